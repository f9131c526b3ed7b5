// Tile ISA v2: the binary programs that AI cores execute. Produced by the kernel compiler
// (backend/compiler), validated by the firmware (header) and the cores (instructions).
// Semantics and latency of every instruction: docs/hardware-interface.md.
#pragma once

#include <cstdint>

namespace spyre::hw {

inline constexpr uint32_t kProgramMagic = 0x50595053;  // "SPYP"
inline constexpr uint16_t kIsaVersion = 2;
inline constexpr uint32_t kProgramAlign = 64;    // program start alignment in device memory
inline constexpr uint32_t kMaxLabelBytes = 256;  // a program name or launch label, NUL included

/// Program layout in device memory:
///   ProgramHeader (32 bytes)
///   uint32_t entry[num_entries]   entry[r] = index of the first instruction of the r-th core in the launch mask
///   padding to instr_offset       (a multiple of 32)
///   Instr[num_instrs]
///   name[name_size]               the program's name for traces (not NUL-terminated), optional
///   strings[strings_size]         PRINT's format strings, each NUL-terminated: message i is the
///                                 i-th (optional; the host formats the records, docs "Device printf")
/// Several entries may name the same instruction: a program written once for every core (SPMD)
/// reads its rank with RANK and picks its share of the work.
struct ProgramHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t num_entries;  // must equal the number of cores in the launch's core mask
  uint32_t num_instrs;
  uint32_t instr_offset;    // byte offset of the first instruction from the program start
  uint32_t name_offset;     // byte offset of the name from the program start (0 when name_size is 0)
  uint32_t name_size;       // bytes of name, less than kMaxLabelBytes
  uint32_t strings_offset;  // byte offset of PRINT's format strings (0 when strings_size is 0)
  uint32_t strings_size;    // bytes of them, after the code
};
static_assert(sizeof(ProgramHeader) == 32, "program header is 32 bytes");

enum class Op : uint8_t {
  // Control and scalar registers.
  kEnd = 0x00,      // stop this core
  kLi = 0x01,       // r[a] = b
  kArg = 0x02,      // r[a] = argument slot b of the launch
  kAddi = 0x03,     // r[a] = r[d] + b (wrapping)
  kAdd = 0x04,      // r[a] = r[d] + r[e] (wrapping)
  kMuli = 0x05,     // r[a] = r[d] * b (wrapping)
  kBranch = 0x06,   // if flags-condition(r[d], r[e]): continue at instruction a of the program
  kBarrier = 0x07,  // wait until every core of the launch that is still running has arrived (flags: kept MATMULs)
  kRank = 0x08,     // r[a] = this core's rank in the launch, r[a + 1] = cores in the launch
  kMul = 0x09,      // r[a] = r[d] * r[e] (wrapping)
  kDivu = 0x0a,     // r[a] = r[d] / b (unsigned; b = 0 faults)
  kRemu = 0x0b,     // r[a] = r[d] % b (unsigned; b = 0 faults)
  kPrint = 0x0c,    // a record of message a, registers and scratchpad values, to the queue's print buffer
  // Data movement between device memory and the scratchpad.
  kLoad = 0x10,           // device -> scratchpad, 2-D strided; synchronous unless flags has kDmaAsync
  kStore = 0x11,          // scratchpad -> device, same fields
  kWait = 0x12,           // wait until the asynchronous transfers of every tag in mask a have landed
  kGather = 0x13,         // rows of a device table chosen by an index vector -> scratchpad (indirect DMA)
  kScatter = 0x14,        // scratchpad rows -> rows of a device table chosen by an index vector (or added)
  kLoadMulticast = 0x15,  // a LOAD delivered to the same scratchpad address of several cores (below)
  // PT array.
  kMatmul = 0x20,  // C[M,N] (+)= A[M,K] @ B[K,N], fp32 accumulate
  // SFP vector unit: every instruction works on a rows x cols block, rows packed in the scratchpad.
  kConvert = 0x30,    // dst (dtype) = src (type in c), element by element
  kUnary = 0x31,      // dst = f(src), f = UnaryFn in c
  kBinary = 0x32,     // dst = f(src0, src1), f = BinaryFn in c[7:0], broadcast modes in flags
  kSelect = 0x33,     // dst = mask ? src1 : src2 (mask bool), see field table below
  kFma = 0x34,        // dst = src0 * src1 + src2
  kReduce = 0x35,     // dst[rows] = f over each row of src[rows, cols], f = ReduceFn in c
  kFill = 0x36,       // dst = value (double bits in c, converted to dtype)
  kIota = 0x37,       // dst[i] = start + (r[rd] + i) * step (doubles in b and c), i = row * cols + col
  kTranspose = 0x38,  // dst[cols, rows] = src[rows, cols]^T
  kScan = 0x39,       // dst[r, c] = f(src[r, 0..c]) along each row, f = ScanFn in c (inclusive)
  kRandom = 0x3a,     // dst[i] = a random number of element r[rd + 1] + i under key r[rd] (below)
  kSort = 0x3b,       // each row of src sorted (stable) into dst, its column indices (int64) at c
};

/// The mnemonic of an instruction (for listings), or "?" for a number that is no instruction.
constexpr const char* op_name(Op op) {
  switch (op) {
    case Op::kEnd:
      return "END";
    case Op::kLi:
      return "LI";
    case Op::kArg:
      return "ARG";
    case Op::kAddi:
      return "ADDI";
    case Op::kAdd:
      return "ADD";
    case Op::kMuli:
      return "MULI";
    case Op::kBranch:
      return "BRANCH";
    case Op::kBarrier:
      return "BARRIER";
    case Op::kRank:
      return "RANK";
    case Op::kMul:
      return "MUL";
    case Op::kDivu:
      return "DIVU";
    case Op::kRemu:
      return "REMU";
    case Op::kPrint:
      return "PRINT";
    case Op::kLoad:
      return "LOAD";
    case Op::kStore:
      return "STORE";
    case Op::kWait:
      return "WAIT";
    case Op::kGather:
      return "GATHER";
    case Op::kScatter:
      return "SCATTER";
    case Op::kLoadMulticast:
      return "LOAD_MULTICAST";
    case Op::kMatmul:
      return "MATMUL";
    case Op::kConvert:
      return "CONVERT";
    case Op::kUnary:
      return "UNARY";
    case Op::kBinary:
      return "BINARY";
    case Op::kSelect:
      return "SELECT";
    case Op::kFma:
      return "FMA";
    case Op::kReduce:
      return "REDUCE";
    case Op::kFill:
      return "FILL";
    case Op::kIota:
      return "IOTA";
    case Op::kTranspose:
      return "TRANSPOSE";
    case Op::kScan:
      return "SCAN";
    case Op::kRandom:
      return "RANDOM";
    case Op::kSort:
      return "SORT";
  }
  return "?";
}

/// Element types of the scratchpad and device memory. Bool is one byte holding 0 or 1.
enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI32 = 3, kI8 = 4, kBool = 5, kI64 = 6, kCount };

constexpr uint32_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI64:
      return 8;
    default:
      return 1;
  }
}
constexpr bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}
constexpr const char* dtype_name(DType t) {
  constexpr const char* names[] = {"f32", "f16", "bf16", "i32", "i8", "bool", "i64"};
  return t < DType::kCount ? names[static_cast<uint8_t>(t)] : "invalid";
}

/// One 32-byte instruction. `regs` names two scalar registers: bits 3..0 (`rd`) are added to the
/// device address of LOAD and STORE; bits 7..4 (`rl`) are added to every scratchpad address
/// of the instruction. Register 0 reads as zero, so regs = 0 means plain immediates.
struct Instr {
  Op op;
  DType dtype;
  uint8_t flags;
  uint8_t regs;
  uint32_t a;
  uint64_t b;
  uint64_t c;
  uint32_t d;
  uint32_t e;
};
static_assert(sizeof(Instr) == 32, "instruction is 32 bytes");

inline constexpr uint32_t kNumRegs = 16;
constexpr uint8_t pack_regs(uint32_t rd, uint32_t rl) {
  return static_cast<uint8_t>((rd & 15u) | (rl & 15u) << 4);
}
constexpr uint32_t reg_rd(uint8_t regs) {
  return regs & 15u;
}
constexpr uint32_t reg_rl(uint8_t regs) {
  return regs >> 4;
}

// BRANCH conditions (flags): compare r[d] with r[e].
enum class Cond : uint8_t { kAlways = 0, kEq = 1, kNe = 2, kLtu = 3, kGeu = 4, kLt = 5, kGe = 6, kCount };

// LOAD / STORE / GATHER / SCATTER: flags bit 0 makes the transfer asynchronous; bits 7..4 are its tag.
// `dtype` names the element type of the rows moved: it changes neither the bytes nor the time, but
// a simulator in timing mode moves only rows of an integer or bool type (docs/architect-guide.md).
inline constexpr uint8_t kDmaAsync = 1u << 0;
inline constexpr uint32_t kNumDmaTags = 16;
constexpr uint8_t dma_flags(bool async, uint32_t tag) {
  return static_cast<uint8_t>((async ? kDmaAsync : 0) | (tag & 15u) << 4);
}
constexpr uint32_t dma_tag(uint8_t flags) {
  return flags >> 4;
}

// GATHER and SCATTER (indirect DMA). The index vector is int64, in the scratchpad; index i names
// the table row at r[rd] + b + index[i] * stride, and must be in [0, r[rb]), or the core faults.
// regs = rd | rb << 4 (scratchpad addresses are absolute: no rl). Fields: a scratchpad rows (d rows
// of e bytes, packed), c = stride (bits 31..0) | scratchpad address of the index vector (63..32).
// SCATTER with kScatterAdd adds each row into the table in `dtype` (rounding once per element; rows
// named twice accumulate in index order) instead of overwriting it; kScatterMul multiplies,
// kScatterMax keeps the larger and kScatterMin the smaller (a NaN wins, as torch.maximum's). On
// bool rows add and max are logical or, multiply and min logical and. Any other combination of
// bits 3..1 faults.
inline constexpr uint8_t kScatterAdd = 1u << 1;
inline constexpr uint8_t kScatterMul = 1u << 2;
inline constexpr uint8_t kScatterMax = 1u << 3;
inline constexpr uint8_t kScatterMin = kScatterMax | kScatterMul;

enum class ScatterReduce : uint8_t { kNone, kAdd, kMul, kMax, kMin, kInvalid };

/// What a SCATTER's flags do with the table's element: overwrite it (kNone) or combine with it.
constexpr ScatterReduce scatter_reduce(uint8_t flags) {
  switch (flags & (kScatterAdd | kScatterMul | kScatterMax)) {
    case 0:
      return ScatterReduce::kNone;
    case kScatterAdd:
      return ScatterReduce::kAdd;
    case kScatterMul:
      return ScatterReduce::kMul;
    case kScatterMax:
      return ScatterReduce::kMax;
    case kScatterMin:
      return ScatterReduce::kMin;
    default:
      return ScatterReduce::kInvalid;
  }
}

// LOAD_MULTICAST: the fields and flags of LOAD, but regs = rd | rs << 4 (the scratchpad address
// is absolute: no rl) and r[rs] names the cores of the launch that receive the rows, by rank: the
// `count` ranks first, first + stride, ... (bits 15..0 first, 31..16 stride, 47..32 count; 63..48
// zero). The data crosses memory and the ring once; the issuing core's tag covers every delivery.
constexpr uint64_t pack_rank_set(uint64_t first, uint64_t stride, uint64_t count) {
  return (first & 0xffffu) | (stride & 0xffffu) << 16 | (count & 0xffffu) << 32;
}

// PRINT (device printf): appends a record to the print buffer the launch's queue set (SANITIZE
// kPrintBuffer; none set: PRINT only takes its time): message `a` (the a-th format string of the
// program), the values of the scalar registers that c names (bits 3..0 how many, at most
// kMaxPrintRegs; then 4 bits per register from bit 4), and `e` elements of `dtype` from scratchpad
// `b` + r[rl] (at most kMaxPrintValues). d and flags must be zero. A full buffer drops the record
// (and counts it). The host formats each record with its message (spyre/hw/commands.h,
// PrintRecord).
inline constexpr uint32_t kMaxPrintRegs = 4;
inline constexpr uint32_t kMaxPrintValues = 256;
constexpr uint64_t print_regs(uint32_t count, uint32_t r0 = 0, uint32_t r1 = 0, uint32_t r2 = 0, uint32_t r3 = 0) {
  return (count & 15u) | (r0 & 15u) << 4 | (r1 & 15u) << 8 | (r2 & 15u) << 12 | (r3 & 15u) << 16;
}
constexpr uint32_t print_reg_count(uint64_t c) {
  return static_cast<uint32_t>(c & 15u);
}
constexpr uint32_t print_reg(uint64_t c, uint32_t i) {
  return static_cast<uint32_t>((c >> (4 + 4 * i)) & 15u);
}

// SORT: flags bit 0 sorts each row descending instead of ascending. NaN counts as larger than
// every number; equal elements keep their order (a stable sort).
inline constexpr uint8_t kSortDescending = 1u << 0;

// BARRIER: flags bits 3..0 are how many of this core's latest MATMULs may go on running in the PT
// arrays through it; the core first waits for every older one (0: for all of them). The program
// promises that no core writes a kept MATMUL's operands, or touches its C, until it is known done.
inline constexpr uint8_t kBarrierKeepMask = 0x0f;
constexpr uint32_t barrier_keep(uint8_t flags) {
  return flags & kBarrierKeepMask;
}

// MATMUL: flags bit 0 adds to C instead of overwriting it.
inline constexpr uint8_t kMatmulAccumulate = 1u << 0;
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

/// How an SFP operand covers the rows x cols block: the whole block, one row repeated down the
/// block (cols elements), one column repeated across it (rows elements), one element, or an
/// immediate in the instruction (float32 bits for float types, int32 otherwise).
enum class Bcast : uint8_t { kFull = 0, kRow = 1, kCol = 2, kScalar = 3, kImm = 4, kCount };
/// BINARY flags: bits 2..0 the broadcast of src0, bits 5..3 that of src1.
constexpr uint8_t bcast_flags(Bcast src0, Bcast src1) {
  return static_cast<uint8_t>(static_cast<uint8_t>(src0) | static_cast<uint8_t>(src1) << 3);
}
constexpr Bcast bcast_src0(uint8_t flags) {
  return static_cast<Bcast>(flags & 7u);
}
constexpr Bcast bcast_src1(uint8_t flags) {
  return static_cast<Bcast>((flags >> 3) & 7u);
}
/// Elements an operand with broadcast `b` occupies in the scratchpad (0 for an immediate).
constexpr uint64_t bcast_elements(Bcast b, uint64_t rows, uint64_t cols) {
  return b == Bcast::kFull     ? rows * cols
         : b == Bcast::kRow    ? cols
         : b == Bcast::kCol    ? rows
         : b == Bcast::kScalar ? 1
                               : 0;
}

enum class UnaryFn : uint8_t {
  kCopy = 0,  // simple: one lane-group per cycle
  kNeg = 1,
  kAbs = 2,
  kRelu = 3,
  kSign = 4,
  kFloor = 5,
  kCeil = 6,
  kRound = 7,
  kTrunc = 8,
  kExp = 9,  // transcendental: sfp_transcendental_cycles per lane-group
  kExp2 = 10,
  kExpm1 = 11,
  kLog = 12,
  kLog2 = 13,
  kLog1p = 14,
  kSqrt = 15,
  kRsqrt = 16,
  kReciprocal = 17,
  kTanh = 18,
  kSigmoid = 19,
  kErf = 20,
  kGeluErf = 21,
  kGeluTanh = 22,
  kSilu = 23,
  kSin = 24,
  kCos = 25,         // (end of transcendental)
  kLogicalNot = 26,  // simple; LogicalNot, IsNan and IsInf give bool
  kBitwiseNot = 27,
  kIsNan = 28,
  kIsInf = 29,
  kSquare = 30,
  kCount
};

constexpr bool unary_is_bool(UnaryFn f) {
  return f == UnaryFn::kLogicalNot || f == UnaryFn::kIsNan || f == UnaryFn::kIsInf;
}

enum class BinaryFn : uint8_t {
  kAdd = 0,  // simple
  kSub = 1,
  kMul = 2,
  kDiv = 3,  // transcendental (Div, Pow, Remainder, Fmod, FloorDiv, Atan2)
  kMax = 4,
  kMin = 5,
  kPow = 6,
  kRemainder = 7,
  kFmod = 8,
  kFloorDiv = 9,
  kEq = 10,  // comparisons and logical functions give bool
  kNe = 11,
  kLt = 12,
  kLe = 13,
  kGt = 14,
  kGe = 15,
  kLogicalAnd = 16,
  kLogicalOr = 17,
  kLogicalXor = 18,
  kBitAnd = 19,  // integer types only
  kBitOr = 20,
  kBitXor = 21,
  kAtan2 = 22,
  kCount
};
constexpr bool binary_is_compare(BinaryFn f) {
  return f >= BinaryFn::kEq && f <= BinaryFn::kLogicalXor;
}

/// Row reductions. Sum, Max, Min and Prod write dtype; with flags bit 0 (kReduceAccumulate) they
/// combine with what dst holds. ArgMax and ArgMin write int64 indices (first occurrence; NaN wins)
/// and keep each row's best value at the scratchpad address in c[63:32]; the index of the block's
/// first column is r[rd], and with kReduceAccumulate a block's best replaces the kept one only
/// when strictly better, so a row split into column blocks reduces block by block.
enum class ReduceFn : uint8_t { kSum, kMax, kMin, kProd, kArgMax, kArgMin, kCount };
inline constexpr uint8_t kReduceAccumulate = 1u << 0;

/// Row scans (cumulative sum and product). With a carry address in c[63:32], each row's last
/// result is written to carry[row] (dtype), and with kReduceAccumulate each row starts from
/// carry[row] instead of the identity, so a row split into column blocks scans block by block.
enum class ScanFn : uint8_t { kSum = 0, kProd = 1, kCount };

// SFP field use (all scratchpad addresses + r[rl]; d = rows, e = cols):
//   CONVERT   a dst (dtype), b src, c source DType
//   UNARY     a dst, b src, c UnaryFn, flags Bcast of src (2..0; not kImm); the result is dtype,
//             or bool for LogicalNot, IsNan and IsInf
//   BINARY    a dst, b src0 | src1 << 32, c BinaryFn | immediate << 32, flags broadcasts;
//             the result is dtype, or bool for comparisons and logical functions
//   SELECT    a dst, b mask | src1 << 32, c src2 | immediate << 32, flags Bcast of src1 (2..0)
//             and of src2 (5..3); mask is a full block
//   FMA       a dst, b src0 | src1 << 32, c src2, all full blocks
//   REDUCE    a dst (rows elements), b src, c ReduceFn | best values << 32 (arg reductions)
//   FILL      a dst, c value
//   IOTA      a dst, b start, c step
//   RANDOM    a dst (float dtype); flags 0: uniform in [0, 1), 1: standard normal. Counter-based
//             (Philox4x32-10): element i draws from key r[rd] and counter r[rd + 1] + i, so a
//             tensor's numbers do not depend on how it is tiled or on which core draws them.
//   TRANSPOSE a dst, b src
//   SCAN      a dst, b src, c ScanFn | carry << 32, flags kReduceAccumulate
inline constexpr uint8_t kSelectImmBits = 32;

}  // namespace spyre::hw
