// The SFP's conversions, shared by its instruction files: whole blocks between a scratchpad type
// and the two compute types (fp32 for float types, int64 for the others), and an operand expanded
// by its broadcast to a whole block. Internal to the SFP model (sfp*.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "spyre/hw/isa.h"

namespace spyre::sim::sfp {

using hw::Bcast;
using hw::DType;

/// Whether `p` is off the natural alignment of elements of `element_bytes` (of type `t`).
bool unaligned(const void* p, uint64_t element_bytes);
bool unaligned(const void* p, DType t);

/// `n` elements of type `t` at `src` (any alignment) to fp32 / int64, and back (round to nearest
/// even; float to integer truncates toward zero and saturates; anything to bool is "not zero").
void to_f32(const void* src, DType t, uint64_t n, float* out);
void from_f32(const float* in, DType t, uint64_t n, void* dst);
void to_i64(const void* src, DType t, uint64_t n, int64_t* out);
void from_i64(const int64_t* in, DType t, uint64_t n, void* dst);

/// A double narrowed to fp32 rounding to odd, so that a second rounding to fp16 or bf16 gives the
/// correctly rounded value of the double.
float round_to_odd(double x);
/// A double to int64, truncating toward zero; out of range and NaN give the "integer indefinite".
int64_t double_to_int(double v);

// An operand expanded to the whole rows x cols block, in a compute type.
template <typename T>
std::vector<T> expand(const void* src, DType t, Bcast b, uint32_t imm, uint64_t rows, uint64_t cols) {
  const uint64_t n = rows * cols;
  std::vector<T> out(n);
  if (b == Bcast::kImm) {
    T v;
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(&v, &imm, 4);
    } else {
      v = static_cast<int32_t>(imm);
    }
    std::fill(out.begin(), out.end(), v);
    return out;
  }
  const uint64_t m = hw::bcast_elements(b, rows, cols);
  std::vector<T> small(m);
  if constexpr (std::is_same_v<T, float>) {
    to_f32(src, t, m, small.data());
  } else {
    to_i64(src, t, m, small.data());
  }
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) {
      const uint64_t i = b == Bcast::kFull ? r * cols + c : b == Bcast::kRow ? c : b == Bcast::kCol ? r : 0;
      out[r * cols + c] = small[i];
    }
  }
  return out;
}

}  // namespace spyre::sim::sfp
