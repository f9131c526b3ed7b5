// Shared by the libFuzzer targets: structured values read from the fuzzer's bytes, a check that
// names the broken invariant and aborts (so libFuzzer keeps the input as a crash file), and the
// properties an accepted descriptor or program must have. The properties are written from
// docs/hardware-interface.md, apart from the firmware's code, in 128-bit arithmetic so that no
// wrap-around can hide an access outside device memory or outside the program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "spyre/firmware/firmware.h"

#define FUZZ_CHECK(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "fuzz: invariant broken at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                        \
      std::fputc('\n', stderr);                                                                 \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

namespace spyre::fuzz {

using u128 = unsigned __int128;

/// The fuzzer's input read front to back; past its end every value reads as zero bytes.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  /// The next sizeof(T) bytes as a T (little endian, as on the device).
  template <typename T>
  T take() {
    static_assert(std::is_trivially_copyable_v<T>, "take() copies bytes");
    T value;
    std::memset(static_cast<void*>(&value), 0, sizeof value);
    const size_t n = sizeof value < left() ? sizeof value : left();
    if (n > 0) std::memcpy(static_cast<void*>(&value), data_ + pos_, n);
    pos_ += n;
    return value;
  }
  size_t left() const { return size_ - pos_; }
  bool empty() const { return pos_ == size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

/// True when [addr, addr + size) lies in the first `mem` bytes.
inline bool inside(uint64_t addr, u128 size, uint64_t mem) {
  return u128{addr} + size <= mem;
}

inline uint32_t popcount(uint64_t x) {
  uint32_t n = 0;
  for (; x != 0; x &= x - 1) ++n;
  return n;
}

/// A copy the firmware hands to the DMA engine: one side host, at most one; the device side(s) in
/// device memory; a size within the limit.
inline void check_copy_safe(const hw::CopyArgs& c, uint8_t flags, const fw::Limits& lim) {
  FUZZ_CHECK((flags & ~hw::kCopyFlagMask) == 0, "flags 0x%x", flags);
  FUZZ_CHECK((flags & hw::kCopyFlagMask) != hw::kCopyFlagMask, "host to host copy");
  FUZZ_CHECK(c.size >= 1 && c.size <= hw::kMaxCopyBytes, "copy size %llu", (unsigned long long)c.size);
  if (!(flags & hw::kCopySrcHost)) {
    FUZZ_CHECK(inside(c.src, c.size, lim.mem_size), "copy src 0x%llx + %llu outside %llu bytes",
               (unsigned long long)c.src, (unsigned long long)c.size, (unsigned long long)lim.mem_size);
  }
  if (!(flags & hw::kCopyDstHost)) {
    FUZZ_CHECK(inside(c.dst, c.size, lim.mem_size), "copy dst 0x%llx + %llu outside %llu bytes",
               (unsigned long long)c.dst, (unsigned long long)c.size, (unsigned long long)lim.mem_size);
  }
}

/// A launch the firmware lets reach the cores: program, label and (unless read from the host)
/// arguments in device memory,
/// aligned, within their limits; the core mask names existing cores only, and at least one.
inline void check_launch_safe(const hw::LaunchArgs& l, uint8_t flags, const fw::Limits& lim) {
  const uint64_t mem = lim.mem_size;
  FUZZ_CHECK(l.program % hw::kProgramAlign == 0, "program 0x%llx", (unsigned long long)l.program);
  FUZZ_CHECK(l.program_size >= sizeof(hw::ProgramHeader) && l.program_size <= hw::kMaxProgramBytes &&
                 l.program_size % sizeof(hw::Instr) == 0,
             "program_size %llu", (unsigned long long)l.program_size);
  FUZZ_CHECK(inside(l.program, l.program_size, mem), "program 0x%llx + %llu outside %llu bytes",
             (unsigned long long)l.program, (unsigned long long)l.program_size, (unsigned long long)mem);
  FUZZ_CHECK(l.args % 8 == 0 && l.args_size % 8 == 0 && l.args_size <= 8u * hw::kMaxLaunchArgs, "args %llu/%llu",
             (unsigned long long)l.args, (unsigned long long)l.args_size);
  FUZZ_CHECK((flags & ~hw::kLaunchFlagMask) == 0, "launch flags 0x%x", flags);
  FUZZ_CHECK(l.args_size == 0 || (flags & hw::kLaunchArgsHost) || inside(l.args, l.args_size, mem),
             "args 0x%llx + %llu outside %llu bytes", (unsigned long long)l.args, (unsigned long long)l.args_size,
             (unsigned long long)mem);
  FUZZ_CHECK(l.label == 0 || inside(l.label, 1, mem), "label 0x%llx", (unsigned long long)l.label);
  FUZZ_CHECK(l.core_mask != 0, "empty core mask");
  for (uint32_t core = lim.num_cores; core < 64; ++core) {
    FUZZ_CHECK(!(l.core_mask >> core & 1), "core %u of %u", core, lim.num_cores);
  }
}

/// A descriptor that passed validate_descriptor() under `lim`.
inline void check_descriptor_safe(const hw::Descriptor& d, const fw::Limits& lim) {
  FUZZ_CHECK(d.reserved0 == 0 && d.reserved1 == 0, "reserved header bits");
  switch (d.opcode) {
    case hw::Opcode::kNop:
      FUZZ_CHECK(d.flags == 0, "nop flags 0x%x", d.flags);
      break;
    case hw::Opcode::kCopy:
      for (uint64_t r : d.copy.reserved) FUZZ_CHECK(r == 0, "copy reserved");
      check_copy_safe(d.copy, d.flags, lim);
      break;
    case hw::Opcode::kLaunch:
      check_launch_safe(d.launch, d.flags, lim);
      break;
    case hw::Opcode::kTimestamp:
      FUZZ_CHECK(d.flags == 0 && d.timestamp.dst % 8 == 0, "timestamp");
      for (uint64_t r : d.timestamp.reserved) FUZZ_CHECK(r == 0, "timestamp reserved");
      break;
    case hw::Opcode::kSignal:
    case hw::Opcode::kWait: {
      const uint8_t allowed = d.opcode == hw::Opcode::kWait ? hw::kWaitFlagMask : 0;
      FUZZ_CHECK((d.flags & ~allowed) == 0 && d.semaphore.addr % 8 == 0, "semaphore flags 0x%x", d.flags);
      FUZZ_CHECK((d.flags & hw::kWaitHost) || inside(d.semaphore.addr, 8, lim.mem_size), "semaphore 0x%llx",
                 (unsigned long long)d.semaphore.addr);  // an IOVA with kWaitHost: the IOMMU checks it
      for (uint64_t r : d.semaphore.reserved) FUZZ_CHECK(r == 0, "semaphore reserved");
      break;
    }
    case hw::Opcode::kSanitize: {
      const hw::SanitizeArgs& s = d.sanitize;
      FUZZ_CHECK(d.flags == 0, "sanitize flags 0x%x", d.flags);
      for (uint64_t r : s.reserved) FUZZ_CHECK(r == 0, "sanitize reserved");
      if (s.action == hw::SanitizeAction::kEnable) {
        FUZZ_CHECK(s.base == 0 && s.size == 0 && (s.tag & ~hw::kSanitizeMask) == 0, "sanitize enable");
      } else if (s.action == hw::SanitizeAction::kUnbreak) {
        FUZZ_CHECK(s.base == 0 && s.size == 0 && s.tag == 0, "sanitize unbreak");
      } else if (s.action == hw::SanitizeAction::kPrintBuffer) {
        FUZZ_CHECK(s.tag == 0 && ((s.base == 0 && s.size == 0) || (s.base % 8 == 0 && s.size >= hw::kPrintBufferMin &&
                                                                   inside(s.base, s.size, lim.mem_size))),
                   "sanitize print buffer 0x%llx + %llu", (unsigned long long)s.base, (unsigned long long)s.size);
      } else if (s.action == hw::SanitizeAction::kBreak) {
        FUZZ_CHECK(s.size >= hw::kBreakHeaderBytes && inside(s.base, s.size, lim.mem_size), "sanitize break");
      } else {
        FUZZ_CHECK(s.action == hw::SanitizeAction::kAlloc || s.action == hw::SanitizeAction::kFree ||
                       s.action == hw::SanitizeAction::kWatch || s.action == hw::SanitizeAction::kUnwatch,
                   "sanitize action %llu", (unsigned long long)s.action);
        FUZZ_CHECK(s.size != 0 && s.tag != 0 && inside(s.base, s.size, lim.mem_size), "sanitize 0x%llx + %llu",
                   (unsigned long long)s.base, (unsigned long long)s.size);
      }
      break;
    }
    default:
      FUZZ_CHECK(false, "opcode %u accepted", static_cast<unsigned>(d.opcode));
  }
}

/// A rejection names a real error and a field of the descriptor's own kind.
inline void check_descriptor_rejection(const hw::Descriptor& d, const hw::Verdict& v) {
  using F = hw::Field;
  FUZZ_CHECK(v.error != hw::ErrorCode::kOk && v.error < hw::ErrorCode::kCount, "error %u",
             static_cast<unsigned>(v.error));
  FUZZ_CHECK(v.field != F::kNone && v.field < F::kCount, "field %u", static_cast<unsigned>(v.field));
  FUZZ_CHECK((v.error == hw::ErrorCode::kBadOpcode) == (v.field == F::kOpcode), "error %u blames field %u",
             static_cast<unsigned>(v.error), static_cast<unsigned>(v.field));
  if (v.field == F::kFlags || v.field == F::kReserved || v.field == F::kOpcode) return;
  bool own = false;
  switch (d.opcode) {
    case hw::Opcode::kCopy:
      own = v.field == F::kCopySrc || v.field == F::kCopyDst || v.field == F::kCopySize || v.field == F::kCopyLabel;
      break;
    case hw::Opcode::kLaunch:
      own = v.field == F::kLaunchProgram || v.field == F::kLaunchProgramSize || v.field == F::kLaunchArgs ||
            v.field == F::kLaunchArgsSize || v.field == F::kLaunchCoreMask || v.field == F::kLaunchLabel;
      break;
    case hw::Opcode::kTimestamp:
      own = v.field == F::kTimestampDst;
      break;
    case hw::Opcode::kSignal:
    case hw::Opcode::kWait:
      own = v.field == F::kSemaphoreAddr;
      break;
    case hw::Opcode::kSanitize:
      own = v.field == F::kSanitizeAction || v.field == F::kSanitizeRange || v.field == F::kSanitizeTag;
      break;
    default:
      break;
  }
  FUZZ_CHECK(own, "opcode %u blames field %u", static_cast<unsigned>(d.opcode), static_cast<unsigned>(v.field));
}

/// Where the parts of a program lie, from its header (program-relative byte offsets).
struct ProgramLayout {
  u128 table_end;  // end of the entry table
  u128 code_begin;
  u128 code_end;
  u128 name_begin;
  u128 name_end;
};

inline ProgramLayout layout_of(const hw::ProgramHeader& h) {
  ProgramLayout p;
  p.table_end = sizeof(hw::ProgramHeader) + u128{4} * h.num_entries;
  p.code_begin = h.instr_offset;
  p.code_end = p.code_begin + u128{sizeof(hw::Instr)} * h.num_instrs;
  p.name_begin = h.name_offset;
  p.name_end = p.name_begin + h.name_size;
  return p;
}

/// A program header that passed validate_program() for launch `l`: every part of the program, in
/// the order of the layout in isa.h, lies inside its program_size bytes.
inline void check_program_safe(const hw::ProgramHeader& h, const hw::LaunchArgs& l) {
  FUZZ_CHECK(h.magic == hw::kProgramMagic && h.version == hw::kIsaVersion, "magic 0x%x version %u", h.magic, h.version);
  FUZZ_CHECK(h.num_entries == popcount(l.core_mask), "%u entries for mask 0x%llx", h.num_entries,
             (unsigned long long)l.core_mask);
  const ProgramLayout p = layout_of(h);
  FUZZ_CHECK(h.instr_offset % sizeof(hw::Instr) == 0, "instr_offset %u", h.instr_offset);
  FUZZ_CHECK(p.table_end <= p.code_begin, "entry table runs into the code (%u entries, code at %u)", h.num_entries,
             h.instr_offset);
  FUZZ_CHECK(p.code_end <= l.program_size, "code ends past program_size %llu (offset %u, %u instrs)",
             (unsigned long long)l.program_size, h.instr_offset, h.num_instrs);
  FUZZ_CHECK(h.name_size < hw::kMaxLabelBytes, "name_size %u", h.name_size);
  if (h.strings_size > 0) {
    const u128 begin = h.strings_offset, end = begin + h.strings_size;
    FUZZ_CHECK(begin >= p.code_end && end <= l.program_size, "strings [%u, +%u) outside the program's tail",
               h.strings_offset, h.strings_size);
  } else {
    FUZZ_CHECK(h.strings_offset == 0, "strings_offset %u without strings", h.strings_offset);
  }
  if (h.name_size > 0) {
    FUZZ_CHECK(p.name_begin >= p.code_end && p.name_end <= l.program_size,
               "name [%u, +%u) outside the program's tail (code end %llu, size %llu)", h.name_offset, h.name_size,
               (unsigned long long)p.code_end, (unsigned long long)l.program_size);
  }
}

/// A verdict of validate_program() that is not kOk.
inline void check_program_rejection(const hw::Verdict& v) {
  FUZZ_CHECK(v.error == hw::ErrorCode::kBadProgram, "program error %u", static_cast<unsigned>(v.error));
  FUZZ_CHECK(v.field == hw::Field::kLaunchProgram || v.field == hw::Field::kLaunchProgramSize ||
                 v.field == hw::Field::kLaunchCoreMask,
             "program error blames field %u", static_cast<unsigned>(v.field));
}

}  // namespace spyre::fuzz
