// Functional model of the SFP vector unit: element-wise math, broadcasts, row reductions,
// conversions, fill, iota and transposes on packed rows x cols blocks of scratchpad bytes.
// Float types compute in fp32 and round once to the destination type (as PyTorch's CPU kernels
// do for fp16 and bf16); integer types compute in wrapping 64-bit arithmetic.
// Pure functions of their inputs: no SystemC, no timing (latency.cpp has the latency). One file
// per job: sfp_convert.cpp, sfp_elementwise.cpp (its fast paths in sfp_vector.cpp), sfp_rows.cpp,
// sfp_fill.cpp; the scalar arithmetic of every function is sfp_math.h.
#pragma once

#include <cstdint>

#include "spyre/hw/isa.h"

namespace spyre::sim {

/// True when the byte ranges [p, p + p_bytes) and [q, q + q_bytes) share a byte.
inline bool overlaps(const void* p, uint64_t p_bytes, const void* q, uint64_t q_bytes) {
  const auto *a = static_cast<const uint8_t*>(p), *b = static_cast<const uint8_t*>(q);
  return a < b + q_bytes && b < a + p_bytes;
}

/// Element-wise conversion (round to nearest even; float to integer truncates toward zero and
/// saturates; anything to bool is "not zero").
void sfp_convert(void* dst, hw::DType to, const void* src, hw::DType from, uint64_t count);

/// `src` covers the rows x cols block with broadcast `b` (not kImm).
void sfp_unary(hw::UnaryFn f, hw::DType t, void* dst, const void* src, hw::Bcast b, uint64_t rows, uint64_t cols);

/// src0/src1 are ignored for kImm operands, which take `imm` (float32 or int32 bits).
void sfp_binary(hw::BinaryFn f, hw::DType t, void* dst, const void* src0, hw::Bcast b0, const void* src1, hw::Bcast b1,
                uint32_t imm, uint64_t rows, uint64_t cols);

/// dst = mask ? src1 : src2, with broadcasts for src1 and src2 (mask is a full bool block).
void sfp_select(hw::DType t, void* dst, const uint8_t* mask, const void* src1, hw::Bcast b1, const void* src2,
                hw::Bcast b2, uint32_t imm, uint64_t rows, uint64_t cols);

void sfp_fma(hw::DType t, void* dst, const void* src0, const void* src1, const void* src2, uint64_t count);

/// One result per row; `accumulate` combines with dst. Arg-reductions write int64 indices offset
/// by `base` and keep the rows' best values in `best` (dtype t), see hw::ReduceFn.
void sfp_reduce(hw::ReduceFn f, hw::DType t, void* dst, const void* src, uint64_t rows, uint64_t cols, bool accumulate,
                void* best, int64_t base);

/// Inclusive scan of each row (see hw::ScanFn); `carry` (rows elements of t) may be null.
void sfp_scan(hw::ScanFn f, hw::DType t, void* dst, const void* src, uint64_t rows, uint64_t cols, void* carry,
              bool accumulate);

/// Stable sort of each row into dst (t), the source column of each result into `index` (int64).
/// NaN counts as larger than every number.
void sfp_sort(hw::DType t, void* dst, int64_t* index, const void* src, uint64_t rows, uint64_t cols, bool descending);

/// Whether f16 data is DLFloat16 (the silicon's) or IEEE half: chip.fp16_format of the config.
void set_fp16_dlfloat(bool dlfloat);

/// Counter-based random numbers: element i from (key, counter + i), uniform in [0, 1) or normal.
void sfp_random(hw::DType t, void* dst, uint64_t key, uint64_t counter, uint64_t count, bool normal);

/// Every element = the FILL instruction's value: `bits` are an IEEE double for float types, an
/// int64 (two's complement) for integer types and bool.
void sfp_fill(hw::DType t, void* dst, uint64_t bits, uint64_t count);
void sfp_iota(hw::DType t, void* dst, double start, double step, uint64_t count);
void sfp_transpose(uint32_t elem_bytes, void* dst, const void* src, uint64_t rows, uint64_t cols);

}  // namespace spyre::sim
