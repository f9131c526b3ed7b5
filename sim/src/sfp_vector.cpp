// The SFP's vector fast paths (sfp_vector.h).
#include "sfp_vector.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#define EIGEN_STACK_ALLOCATION_LIMIT 0
#include <Eigen/Core>

#include "sfp.h"
#include "sfp_convert.h"
#include "sfp_math.h"

namespace spyre::sim::sfp {
namespace {

// One operand of an fp32 BINARY as rows see it: a row of `cols` floats (stride 1) or one value per
// row. Broadcast rows, columns and scalars are copied first, so the result may overwrite them.
struct F32Operand {
  const float* full = nullptr;  // Full: row r at full + r * cols
  std::vector<float> copy;      // Row: the row; Col: one value per row; Scalar / Imm: one value
  Bcast b = Bcast::kFull;
  bool vector_rows() const { return b == Bcast::kFull || b == Bcast::kRow; }
  const float* row(uint64_t r, uint64_t cols) const { return b == Bcast::kFull ? full + r * cols : copy.data(); }
  float value(uint64_t r) const { return b == Bcast::kCol ? copy[r] : copy[0]; }
};

F32Operand f32_operand(const void* src, Bcast b, uint32_t imm, uint64_t rows, uint64_t cols) {
  F32Operand o;
  o.b = b;
  if (b == Bcast::kFull) {
    o.full = static_cast<const float*>(src);
  } else if (b == Bcast::kImm) {
    o.copy.resize(1);
    std::memcpy(o.copy.data(), &imm, 4);
  } else {
    o.copy.resize(hw::bcast_elements(b, rows, cols));
    std::memcpy(o.copy.data(), src, o.copy.size() * 4);
  }
  return o;
}

// dst = op(x, y) over rows x cols of fp32 operands, each loop a plain (vectorisable) one. `Out` is
// float, or uint8_t for the functions that give bool (op's 1 or 0).
template <typename Out, typename Op>
void binary_f32(Op op, Out* dst, const F32Operand& x, const F32Operand& y, uint64_t rows, uint64_t cols) {
  for (uint64_t r = 0; r < rows; ++r) {
    Out* out = dst + r * cols;
    if (x.vector_rows() && y.vector_rows()) {
      const float *a = x.row(r, cols), *b = y.row(r, cols);
      for (uint64_t c = 0; c < cols; ++c) out[c] = static_cast<Out>(op(a[c], b[c]));
    } else if (x.vector_rows()) {
      const float* a = x.row(r, cols);
      const float b = y.value(r);
      for (uint64_t c = 0; c < cols; ++c) out[c] = static_cast<Out>(op(a[c], b));
    } else if (y.vector_rows()) {
      const float a = x.value(r);
      const float* b = y.row(r, cols);
      for (uint64_t c = 0; c < cols; ++c) out[c] = static_cast<Out>(op(a, b[c]));
    } else {
      std::fill_n(out, cols, static_cast<Out>(op(x.value(r), y.value(r))));
    }
  }
}

// One instantiation of the row loops per BINARY function, so that the function is chosen once per
// instruction rather than per element, with the general path's arithmetic (binary_f) unchanged.
template <hw::BinaryFn F>
void binary_f32_of(void* out, const F32Operand& x, const F32Operand& y, uint64_t rows, uint64_t cols) {
  using Out = std::conditional_t<hw::binary_is_compare(F), uint8_t, float>;
  binary_f32([](float a, float b) { return binary_f(F, a, b); }, static_cast<Out*>(out), x, y, rows, cols);
}

template <size_t... I>
constexpr auto binary_f32_table(std::index_sequence<I...>) {
  return std::array<void (*)(void*, const F32Operand&, const F32Operand&, uint64_t, uint64_t), sizeof...(I)>{
      &binary_f32_of<static_cast<hw::BinaryFn>(I)>...};
}
constexpr auto kBinaryF32 = binary_f32_table(std::make_index_sequence<static_cast<size_t>(hw::BinaryFn::kCount)>());

// A full operand that overlaps the result without being it (element for element, `bytes` each)
// would be read after parts of it were written: such instructions take the general path (which
// reads everything first).
bool overlaps_apart(const void* dst, const void* src, Bcast b, uint64_t bytes) {
  return b == Bcast::kFull && src != dst && overlaps(dst, bytes, src, bytes);
}

// out[i] = f(in[i]) with f on Eigen packets, the last partial packet padded, so that each
// element's result is the same wherever it sits. (An Eigen array expression computes the elements
// before the destination's first aligned address with the scalar function, which rounds
// differently: results would depend on where the host allocated the scratchpad.) Where Eigen's
// exp of `sign` * x is off (near overflow, and below -87, where it is subnormal and then floors at
// a denormal instead of 0, even for -inf) the element takes `scalar` instead, packet by packet, so
// that a few such elements (a causal mask's -inf scores in a softmax) do not slow the others;
// infinities and NaN come out right either way. `tiny`, when finite, is where the exact result
// is +0 for every `sign` * x below it (exp's underflow), without calling `scalar`.
template <typename F, typename S>
void exp_map(float* out, const float* in, uint64_t n, float sign, float tiny, F f, S scalar) {
  namespace ei = Eigen::internal;
  using P = ei::packet_traits<float>::type;
  constexpr uint64_t kLanes = ei::unpacket_traits<P>::size;
  const P s = ei::pset1<P>(sign), high = ei::pset1<P>(88.3f), inf = ei::pset1<P>(INFINITY), low = ei::pset1<P>(-87.0f);
  // One packet: f, then the off lanes (if any) one at a time.
  const auto packet = [&](const float* src, float* dst) {
    const P x = ei::ploadu<P>(src);
    const P e = ei::pmul(s, x);
    // Off: 88.3 < e < inf, or e < -87 (below -104 Eigen's floor is a denormal, not 0).
    const P off = ei::por(ei::pand(ei::pcmp_lt(high, e), ei::pcmp_lt(e, inf)), ei::pcmp_lt(e, low));
    const P y = f(x);
    if (!ei::predux_any(off)) return ei::pstoreu(dst, y);
    uint32_t offs[kLanes];  // each lane all ones or all zeros
    float xs[kLanes], ys[kLanes];
    ei::pstoreu(reinterpret_cast<float*>(offs), off);
    ei::pstoreu(xs, x);
    ei::pstoreu(ys, y);
    for (uint64_t j = 0; j < kLanes; ++j) {
      if (offs[j] != 0) ys[j] = sign * xs[j] < tiny ? 0.0f : scalar(xs[j]);
    }
    std::memcpy(dst, ys, sizeof ys);
  };
  uint64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) packet(in + i, out + i);
  if (i < n) {
    const uint64_t m = n - i;
    float x[kLanes] = {}, y[kLanes];
    std::memcpy(x, in + i, m * 4);
    packet(x, y);
    std::memcpy(out + i, y, m * 4);
  }
}

// The same loops for UNARY: every function with an fp32 result, one instantiation each. Exp,
// sigmoid and SiLU use Eigen's vectorised exp (within a few ulp of libm's, which the general path
// uses).
template <hw::UnaryFn F>
void unary_f32(float* out, const float* in, uint64_t n) {
  namespace ei = Eigen::internal;
  using P = ei::packet_traits<float>::type;
  using hw::UnaryFn;
  const P one = ei::pset1<P>(1.0f);
  const auto scalar = [](float x) { return unary_f(F, x); };
  if constexpr (F == UnaryFn::kExp) {
    // exp(x) < 2^-150 below -104: libm's expf rounds it to +0 (as does -inf).
    exp_map(out, in, n, 1.0f, -104.0f, [](P x) { return ei::pexp(x); }, scalar);
  } else if constexpr (F == UnaryFn::kSigmoid) {
    exp_map(
        out, in, n, -1.0f, -INFINITY, [&](P x) { return ei::pdiv(one, ei::padd(one, ei::pexp(ei::pnegate(x)))); },
        scalar);
  } else if constexpr (F == UnaryFn::kSilu) {
    exp_map(
        out, in, n, -1.0f, -INFINITY, [&](P x) { return ei::pdiv(x, ei::padd(one, ei::pexp(ei::pnegate(x)))); },
        scalar);
  } else {
    for (uint64_t i = 0; i < n; ++i) out[i] = unary_f(F, in[i]);
  }
}

template <size_t... I>
constexpr auto unary_f32_table(std::index_sequence<I...>) {
  return std::array<void (*)(float*, const float*, uint64_t), sizeof...(I)>{&unary_f32<static_cast<hw::UnaryFn>(I)>...};
}
constexpr auto kUnaryF32 = unary_f32_table(std::make_index_sequence<static_cast<size_t>(hw::UnaryFn::kCount)>());

}  // namespace

// fp32 BINARY functions with an fp32 result, without the general path's per-element dispatch and
// copies. False when the instruction is not one of them (or its operands are unaligned or overlap).
bool binary_f32_fast(hw::BinaryFn f, void* dst, const void* src0, Bcast b0, const void* src1, Bcast b1, uint32_t imm,
                     uint64_t rows, uint64_t cols) {
  using hw::BinaryFn;
  if (f >= BinaryFn::kBitAnd && f <= BinaryFn::kBitXor) return false;  // integer types only
  const uint64_t n = rows * cols, bytes = n * 4;
  if (hw::binary_is_compare(f)) {  // a bool result: any overlap with a full operand goes the general way
    if ((b0 == Bcast::kFull && overlaps(dst, n, src0, bytes)) ||
        (b1 == Bcast::kFull && overlaps(dst, n, src1, bytes))) {
      return false;
    }
  } else if (overlaps_apart(dst, src0, b0, bytes) || overlaps_apart(dst, src1, b1, bytes)) {
    return false;
  }
  // The ISA lets SFP operands sit at any byte: the typed loops below need word-aligned ones.
  // (Broadcast operands are copied into word-aligned vectors by f32_operand.)
  if ((!hw::binary_is_compare(f) && unaligned(dst, DType::kF32)) ||
      (b0 == Bcast::kFull && unaligned(src0, DType::kF32)) || (b1 == Bcast::kFull && unaligned(src1, DType::kF32))) {
    return false;
  }
  const F32Operand x = f32_operand(src0, b0, imm, rows, cols), y = f32_operand(src1, b1, imm, rows, cols);
  auto* out = static_cast<float*>(dst);
  if (hw::binary_is_compare(f)) return kBinaryF32[static_cast<size_t>(f)](dst, x, y, rows, cols), true;
  if (f == BinaryFn::kPow && !y.vector_rows() && b1 != Bcast::kCol) {
    // x^2 and x^-1 are one rounding of the exact value, as pow's result is meant to be
    const float e = y.value(0);
    if (e == 2.0f) return binary_f32([](float a, float) { return a * a; }, out, x, y, rows, cols), true;
    if (e == -1.0f) return binary_f32([](float a, float) { return 1.0f / a; }, out, x, y, rows, cols), true;
    if (e == 1.0f) return binary_f32([](float a, float) { return a; }, out, x, y, rows, cols), true;   // pow(a, 1) = a
    if (e == 0.0f) return binary_f32([](float, float) { return 1.0f; }, out, x, y, rows, cols), true;  // even NaN^0
  }
  kBinaryF32[static_cast<size_t>(f)](out, x, y, rows, cols);
  return true;
}

bool unary_f32_fast(hw::UnaryFn f, void* dst, const void* src, uint64_t count) {
  if (overlaps_apart(dst, src, Bcast::kFull, count * 4) || unaligned(dst, DType::kF32) || unaligned(src, DType::kF32)) {
    return false;
  }
  kUnaryF32[static_cast<size_t>(f)](static_cast<float*>(dst), static_cast<const float*>(src), count);
  return true;
}

// SELECT of fp32 operands, without the general path's copies; false when it does not apply
// (unaligned operands, or a full one partly overlapping the result).
bool select_f32_fast(float* dst, const uint8_t* mask, const void* src1, Bcast b1, const void* src2, Bcast b2,
                     uint32_t imm, uint64_t rows, uint64_t cols) {
  const uint64_t n = rows * cols, bytes = n * 4;
  if (overlaps(dst, bytes, mask, n) || overlaps_apart(dst, src1, b1, bytes) || overlaps_apart(dst, src2, b2, bytes) ||
      unaligned(dst, DType::kF32) || (b1 == Bcast::kFull && unaligned(src1, DType::kF32)) ||
      (b2 == Bcast::kFull && unaligned(src2, DType::kF32))) {
    return false;
  }
  const F32Operand x = f32_operand(src1, b1, imm, rows, cols), y = f32_operand(src2, b2, imm, rows, cols);
  for (uint64_t r = 0; r < rows; ++r) {  // a plain (vectorisable) loop for each operand form
    const uint8_t* m = mask + r * cols;
    float* out = dst + r * cols;
    if (x.vector_rows() && y.vector_rows()) {
      const float *a = x.row(r, cols), *b = y.row(r, cols);
      for (uint64_t c = 0; c < cols; ++c) out[c] = m[c] ? a[c] : b[c];
    } else if (x.vector_rows()) {
      const float* a = x.row(r, cols);
      const float b = y.value(r);
      for (uint64_t c = 0; c < cols; ++c) out[c] = m[c] ? a[c] : b;
    } else if (y.vector_rows()) {
      const float a = x.value(r);
      const float* b = y.row(r, cols);
      for (uint64_t c = 0; c < cols; ++c) out[c] = m[c] ? a : b[c];
    } else {
      const float a = x.value(r), b = y.value(r);
      for (uint64_t c = 0; c < cols; ++c) out[c] = m[c] ? a : b;
    }
  }
  return true;
}

}  // namespace spyre::sim::sfp
