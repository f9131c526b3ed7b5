// libFuzzer target: the KTIR reader and lowering (spyre/compiler/ktir.h), which torch_spyre.ktir
// and spyre-sim run on whatever text a user hands them. Seeds: the example kernels
// (examples/ktir/).
//
// Invariants:
//   - text is either compiled or refused with compiler::Unsupported or compiler::Malformed, whose
//     message starts "ktir: " (no other exception, no crash, no undefined behaviour);
//   - a compiled program has one entry per tile of its grid, its instructions where its header
//     says, and arguments within the launch's 16 slots.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "spyre/compiler/errors.h"
#include "spyre/compiler/ktir.h"

using namespace spyre;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const compiler::ktir::Kernel k = compiler::ktir::compile(text, compiler::Target{});
    const auto& image = k.program.image;
    hw::ProgramHeader h;
    if (image.size() < sizeof h) std::abort();
    std::memcpy(&h, image.data(), sizeof h);
    if (h.magic != hw::kProgramMagic || h.num_entries != k.source_lines.size()) std::abort();
    if (uint64_t{h.instr_offset} + uint64_t{h.num_instrs} * sizeof(hw::Instr) > image.size()) std::abort();
    if (k.program.num_args > 16) std::abort();
    (void)compiler::ktir::listing(k, text);
  } catch (const compiler::Unsupported& e) {
    if (std::strncmp(e.what(), "ktir: ", 6) != 0) std::abort();
  } catch (const compiler::Malformed& e) {
    if (std::strncmp(e.what(), "ktir: ", 6) != 0) std::abort();
  }
  return 0;
}
