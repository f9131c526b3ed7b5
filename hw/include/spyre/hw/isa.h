// Tile ISA: the binary programs that AI cores execute. Produced by the kernel compiler
// (backend/compiler), validated by the firmware (header) and the cores (instructions).
#pragma once

#include <cstdint>

namespace spyre::hw {

inline constexpr uint32_t kProgramMagic = 0x50595053;  // "SPYP"
inline constexpr uint16_t kIsaVersion = 1;
inline constexpr uint32_t kProgramAlign = 64;  // program start alignment in device memory

/// Program layout in device memory:
///   ProgramHeader (32 bytes)
///   uint32_t entry[num_entries]   entry[r] = index of the first instruction of the r-th core in the launch mask
///   padding to instr_offset       (a multiple of 32)
///   Instr[num_instrs]
struct ProgramHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t num_entries;  // must equal the number of cores in the launch's core mask
  uint32_t num_instrs;
  uint32_t instr_offset;  // byte offset of the first instruction from the program start
  uint32_t reserved[4];
};
static_assert(sizeof(ProgramHeader) == 32, "program header is 32 bytes");

enum class Op : uint8_t {
  kEnd = 0,      // stop this core
  kLoad = 1,     // device memory -> scratchpad, 2-D strided
  kStore = 2,    // scratchpad -> device memory, 2-D strided
  kMatmul = 3,   // PT array: C[M,N] (+)= A[M,K] @ B[K,N], fp32 accumulate
  kConvert = 4,  // SFP: element-wise type conversion inside the scratchpad
  kCount
};

enum class DType : uint8_t { kF32 = 0, kF16 = 1, kCount };

constexpr uint32_t dtype_size(DType t) {
  return t == DType::kF32 ? 4 : 2;
}

inline constexpr uint8_t kMatmulAccumulate = 1u << 0;  // add to C instead of overwriting it

/// One 32-byte instruction. Field meaning by opcode:
///   kLoad / kStore: a = scratchpad address; b = byte offset from argument slot `arg`;
///                   c = device row stride in bytes; d = rows; e = bytes per row
///                   (scratchpad rows are packed: row stride = e).
///   kMatmul: a = scratchpad address of C (fp32, row-major M x N);
///            b = A address (low 32 bits) | B address (high 32 bits), both row-major in `dtype`;
///            c = M | K << 21 | N << 42; flags = kMatmulAccumulate or 0.
///   kConvert: a = destination address (type `dtype`); b = source address; d = element count;
///             e = source DType.
struct Instr {
  Op op;
  DType dtype;
  uint8_t arg;
  uint8_t flags;
  uint32_t a;
  uint64_t b;
  uint64_t c;
  uint32_t d;
  uint32_t e;
};
static_assert(sizeof(Instr) == 32, "instruction is 32 bytes");

inline constexpr uint64_t kMatmulDimMask = (1ull << 21) - 1;

constexpr uint64_t pack_mkn(uint64_t m, uint64_t k, uint64_t n) {
  return m | (k << 21) | (n << 42);
}
constexpr uint32_t unpack_m(uint64_t c) {
  return static_cast<uint32_t>(c & kMatmulDimMask);
}
constexpr uint32_t unpack_k(uint64_t c) {
  return static_cast<uint32_t>((c >> 21) & kMatmulDimMask);
}
constexpr uint32_t unpack_n(uint64_t c) {
  return static_cast<uint32_t>((c >> 42) & kMatmulDimMask);
}

}  // namespace spyre::hw
