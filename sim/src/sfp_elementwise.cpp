// The SFP's element-wise instructions: UNARY, BINARY, SELECT and FMA. fp32 operands take the vector
// fast paths (sfp_vector.cpp) where they apply; every other case expands its operands to a whole
// block in a compute type and applies the scalar reference arithmetic (sfp_math.h) element by
// element, rounding once to the destination type.
#include <cmath>
#include <cstdint>
#include <vector>

#include "sfp.h"
#include "sfp_convert.h"
#include "sfp_math.h"
#include "sfp_vector.h"

namespace spyre::sim {

using namespace sfp;  // the SFP's own internals

void sfp_unary(hw::UnaryFn f, DType t, void* dst, const void* src, Bcast b, uint64_t rows, uint64_t cols) {
  const DType out = hw::unary_is_bool(f) ? DType::kBool : t;
  const uint64_t count = rows * cols;
  if (t == DType::kF32 && b == Bcast::kFull && !hw::unary_is_bool(f) && unary_f32_fast(f, dst, src, count)) return;
  if (hw::dtype_is_float(t)) {
    std::vector<float> v = expand<float>(src, t, b, 0, rows, cols);
    if (f != hw::UnaryFn::kCopy) {
      for (float& x : v) x = unary_f(f, x);
    }
    from_f32(v.data(), out, count, dst);
  } else {
    std::vector<int64_t> v = expand<int64_t>(src, t, b, 0, rows, cols);
    for (int64_t& x : v) x = unary_i(f, x);
    from_i64(v.data(), out, count, dst);
  }
}

void sfp_binary(hw::BinaryFn f, DType t, void* dst, const void* src0, Bcast b0, const void* src1, Bcast b1,
                uint32_t imm, uint64_t rows, uint64_t cols) {
  if (t == DType::kF32 && binary_f32_fast(f, dst, src0, b0, src1, b1, imm, rows, cols)) return;
  const uint64_t n = rows * cols;
  const DType out = hw::binary_is_compare(f) ? DType::kBool : t;
  if (hw::dtype_is_float(t)) {
    std::vector<float> x = expand<float>(src0, t, b0, imm, rows, cols);
    const std::vector<float> y = expand<float>(src1, t, b1, imm, rows, cols);
    for (uint64_t i = 0; i < n; ++i) x[i] = binary_f(f, x[i], y[i]);
    from_f32(x.data(), out, n, dst);
  } else {
    std::vector<int64_t> x = expand<int64_t>(src0, t, b0, imm, rows, cols);
    const std::vector<int64_t> y = expand<int64_t>(src1, t, b1, imm, rows, cols);
    for (uint64_t i = 0; i < n; ++i) x[i] = binary_i(f, x[i], y[i]);
    from_i64(x.data(), out, n, dst);
  }
}

void sfp_select(DType t, void* dst, const uint8_t* mask, const void* src1, Bcast b1, const void* src2, Bcast b2,
                uint32_t imm, uint64_t rows, uint64_t cols) {
  if (t == DType::kF32 && select_f32_fast(static_cast<float*>(dst), mask, src1, b1, src2, b2, imm, rows, cols)) return;
  const uint64_t n = rows * cols;
  if (hw::dtype_is_float(t)) {
    std::vector<float> x = expand<float>(src1, t, b1, imm, rows, cols);
    const std::vector<float> y = expand<float>(src2, t, b2, imm, rows, cols);
    for (uint64_t i = 0; i < n; ++i) x[i] = mask[i] ? x[i] : y[i];
    from_f32(x.data(), t, n, dst);
  } else {
    std::vector<int64_t> x = expand<int64_t>(src1, t, b1, imm, rows, cols);
    const std::vector<int64_t> y = expand<int64_t>(src2, t, b2, imm, rows, cols);
    for (uint64_t i = 0; i < n; ++i) x[i] = mask[i] ? x[i] : y[i];
    from_i64(x.data(), t, n, dst);
  }
}

void sfp_fma(DType t, void* dst, const void* src0, const void* src1, const void* src2, uint64_t count) {
  if (hw::dtype_is_float(t)) {
    std::vector<float> a(count), b(count), c(count);
    to_f32(src0, t, count, a.data());
    to_f32(src1, t, count, b.data());
    to_f32(src2, t, count, c.data());
    for (uint64_t i = 0; i < count; ++i) a[i] = std::fma(a[i], b[i], c[i]);
    from_f32(a.data(), t, count, dst);
  } else {
    std::vector<int64_t> a(count), b(count), c(count);
    to_i64(src0, t, count, a.data());
    to_i64(src1, t, count, b.data());
    to_i64(src2, t, count, c.data());
    for (uint64_t i = 0; i < count; ++i)
      a[i] = binary_i(hw::BinaryFn::kAdd, binary_i(hw::BinaryFn::kMul, a[i], b[i]), c[i]);
    from_i64(a.data(), t, count, dst);
  }
}

}  // namespace spyre::sim
