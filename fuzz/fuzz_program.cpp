// libFuzzer target: the firmware's program validator, fw::validate_program, over arbitrary program
// headers and launch arguments.
//
// Input (little endian, short inputs read as zero-padded):
//   ProgramHeader (32 bytes) | LaunchArgs (48 bytes) | u64 dev_mem_size | u8 num_cores
//
// Invariants:
//   - an accepted header lays out its entry table, code and name, in that order, inside
//     program_size (checked in 128-bit arithmetic, and for programs up to 64 KiB also by reading
//     each part's first and last byte from a heap buffer of exactly program_size bytes, so that
//     AddressSanitizer sees any overrun as a core fetching the program would);
//   - with a launch descriptor that validate_descriptor() also accepts, the whole program is in
//     device memory and every entry belongs to a core that exists;
//   - a rejection is kBadProgram and blames the program, its size or the core mask.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "fuzz_support.h"

using namespace spyre;

namespace {

constexpr uint64_t kMaxMaterialised = 64 << 10;

// Reads the first and last byte of [begin, end) of the program image, if it is not empty.
uint8_t touch(const uint8_t* image, fuzz::u128 begin, fuzz::u128 end) {
  if (begin >= end) return 0;
  return image[static_cast<size_t>(begin)] ^ image[static_cast<size_t>(end - 1)];
}

// Walks an accepted program the way a core fetches it: header, entry table, code, name.
void walk(const hw::ProgramHeader& h, const hw::LaunchArgs& l) {
  if (l.program_size > kMaxMaterialised || l.program_size < sizeof h) return;
  const size_t size = static_cast<size_t>(l.program_size);
  std::unique_ptr<uint8_t[]> image(new uint8_t[size]());
  std::memcpy(image.get(), &h, sizeof h);
  const fuzz::ProgramLayout p = fuzz::layout_of(h);
  volatile uint8_t sink = 0;
  sink = sink ^ touch(image.get(), sizeof h, p.table_end);
  sink = sink ^ touch(image.get(), p.code_begin, p.code_end);
  if (h.name_size > 0) sink = sink ^ touch(image.get(), p.name_begin, p.name_end);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const auto header = in.take<hw::ProgramHeader>();
  const auto launch = in.take<hw::LaunchArgs>();
  fw::Limits limits{};
  limits.mem_size = in.take<uint64_t>();
  limits.num_cores = in.take<uint8_t>();

  const hw::Verdict v = fw::validate_program(header, launch);
  if (!v.ok()) {
    fuzz::check_program_rejection(v);
    return 0;
  }
  fuzz::check_program_safe(header, launch);
  walk(header, launch);

  hw::Descriptor d{};
  d.opcode = hw::Opcode::kLaunch;
  d.launch = launch;
  if (fw::validate_descriptor(d, limits).ok()) {
    const fuzz::ProgramLayout p = fuzz::layout_of(header);
    const fuzz::u128 used = header.name_size > 0 && p.name_end > p.code_end ? p.name_end : p.code_end;
    FUZZ_CHECK(fuzz::inside(launch.program, used, limits.mem_size), "program image leaves device memory");
    FUZZ_CHECK(header.num_entries <= limits.num_cores, "%u entries on %u cores", header.num_entries, limits.num_cores);
  }
  return 0;
}
