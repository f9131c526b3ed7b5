#include "sfp.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#define EIGEN_STACK_ALLOCATION_LIMIT 0
#include <Eigen/Core>

#ifdef __AVX__
#include <immintrin.h>
#endif

#include "spyre/hw/dlfloat16.h"

namespace spyre::sim {
namespace {

// The format of f16 data (set once per process from the config, before any core runs).
bool g_fp16_dlfloat = true;

using hw::Bcast;
using hw::DType;

float bf16_to_f32(uint16_t h) {
  const uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

// Whole-block conversions between a scratchpad type and the two compute types (fp32, int64).
// Scratchpad addresses need not be aligned: an unaligned block of 2-, 4- or 8-byte elements is
// read or written through an aligned copy, since the typed loops below may assume alignment.
bool unaligned(const void* p, uint64_t element_bytes) {
  return reinterpret_cast<uintptr_t>(p) % element_bytes != 0;
}
bool unaligned(const void* p, DType t) {
  return unaligned(p, hw::dtype_size(t));
}

void to_f32(const void* src, DType t, uint64_t n, float* out) {
  if (unaligned(src, t)) {
    std::vector<uint8_t> copy(n * hw::dtype_size(t));
    std::memcpy(copy.data(), src, copy.size());
    return to_f32(copy.data(), t, n, out);
  }
  switch (t) {
    case DType::kF32:
      std::memcpy(out, src, n * 4);
      return;
    case DType::kF16: {
      if (g_fp16_dlfloat) {
        const auto* s = static_cast<const uint16_t*>(src);
        for (uint64_t i = 0; i < n; ++i) out[i] = hw::dlf16_to_float(s[i]);
        return;
      }
      const auto* s = static_cast<const Eigen::half*>(src);
      for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (uint64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kI32: {
      const auto* s = static_cast<const int32_t*>(src);
      for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kI64: {
      const auto* s = static_cast<const int64_t*>(src);
      for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kI8: {
      const auto* s = static_cast<const int8_t*>(src);
      for (uint64_t i = 0; i < n; ++i) out[i] = s[i];
      return;
    }
    default: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (uint64_t i = 0; i < n; ++i) out[i] = s[i] != 0 ? 1.0f : 0.0f;
      return;
    }
  }
}

// A double narrowed to fp32 rounding to odd: inexact results keep an odd last bit, so that a
// second rounding to fp16 or bf16 gives the correctly rounded value of the double.
float round_to_odd(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) == x || !std::isfinite(x) || !std::isfinite(f)) return f;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 1u) == 0) f = std::nextafter(f, static_cast<float>(x > static_cast<double>(f) ? INFINITY : -INFINITY));
  return f;
}

// Float to integer conversions truncate toward zero; a value past the destination's range (and
// NaN) gives the x86 "integer indefinite", the most negative value of a 32- or 64-bit integer, as
// CPU torch gives there. Narrower integers take the low bits of the 32-bit conversion.
int64_t to_int64(double v) {
  if (!(v >= -9.2233720368547758e18 && v < 9.2233720368547758e18)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

int32_t to_int32(double v) {
  if (!(v > -2147483649.0 && v < 2147483648.0)) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(v);
}

int64_t double_to_int(double v) {
  return to_int64(v);
}

int64_t f32_to_int(float v) {
  return to_int64(v);
}

void from_f32(const float* in, DType t, uint64_t n, void* dst) {
  if (unaligned(dst, t)) {
    std::vector<uint8_t> copy(n * hw::dtype_size(t));
    from_f32(in, t, n, copy.data());
    std::memcpy(dst, copy.data(), copy.size());
    return;
  }
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, in, n * 4);
      return;
    case DType::kF16: {
      if (g_fp16_dlfloat) {
        auto* d = static_cast<uint16_t*>(dst);
        for (uint64_t i = 0; i < n; ++i) d[i] = hw::dlf16_from_float(in[i]);
        return;
      }
      auto* d = static_cast<Eigen::half*>(dst);
      for (uint64_t i = 0; i < n; ++i) d[i] = Eigen::half(in[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(in[i]);
      return;
    }
    case DType::kI32: {
      auto* d = static_cast<int32_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) d[i] = to_int32(in[i]);
      return;
    }
    case DType::kI64: {
      auto* d = static_cast<int64_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) d[i] = f32_to_int(in[i]);
      return;
    }
    case DType::kI8: {
      auto* d = static_cast<int8_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) d[i] = static_cast<int8_t>(to_int32(in[i]));
      return;
    }
    default: {
      auto* d = static_cast<uint8_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) d[i] = in[i] != 0.0f;
      return;
    }
  }
}

void to_i64(const void* src, DType t, uint64_t n, int64_t* out) {
  if (unaligned(src, t)) {
    std::vector<uint8_t> copy(n * hw::dtype_size(t));
    std::memcpy(copy.data(), src, copy.size());
    return to_i64(copy.data(), t, n, out);
  }
  switch (t) {
    case DType::kI64:
      std::memcpy(out, src, n * 8);
      return;
    case DType::kI32: {
      const auto* s = static_cast<const int32_t*>(src);
      for (uint64_t i = 0; i < n; ++i) out[i] = s[i];
      return;
    }
    case DType::kI8: {
      const auto* s = static_cast<const int8_t*>(src);
      for (uint64_t i = 0; i < n; ++i) out[i] = s[i];
      return;
    }
    case DType::kBool: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (uint64_t i = 0; i < n; ++i) out[i] = s[i] != 0;
      return;
    }
    default: {
      std::vector<float> f(n);
      to_f32(src, t, n, f.data());
      for (uint64_t i = 0; i < n; ++i) out[i] = f32_to_int(f[i]);
      return;
    }
  }
}

void from_i64(const int64_t* in, DType t, uint64_t n, void* dst) {
  if (unaligned(dst, t)) {
    std::vector<uint8_t> copy(n * hw::dtype_size(t));
    from_i64(in, t, n, copy.data());
    std::memcpy(dst, copy.data(), copy.size());
    return;
  }
  switch (t) {
    case DType::kI64:
      std::memcpy(dst, in, n * 8);
      return;
    case DType::kI32: {
      auto* d = static_cast<int32_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(in[i]);
      return;
    }
    case DType::kI8: {
      auto* d = static_cast<int8_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) d[i] = static_cast<int8_t>(in[i]);
      return;
    }
    case DType::kBool: {
      auto* d = static_cast<uint8_t*>(dst);
      for (uint64_t i = 0; i < n; ++i) d[i] = in[i] != 0;
      return;
    }
    default: {
      std::vector<float> f(n);
      for (uint64_t i = 0; i < n; ++i) f[i] = static_cast<float>(in[i]);
      from_f32(f.data(), t, n, dst);
      return;
    }
  }
}

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

float unary_f(hw::UnaryFn f, float x) {
  using hw::UnaryFn;
  switch (f) {
    case UnaryFn::kCopy:
      return x;
    case UnaryFn::kNeg:
      return -x;
    case UnaryFn::kAbs:
      return std::fabs(x);
    case UnaryFn::kRelu:
      return std::isnan(x) ? x : (x > 0.0f ? x : 0.0f);
    case UnaryFn::kSign:
      return std::isnan(x) ? x : static_cast<float>((x > 0.0f) - (x < 0.0f));
    case UnaryFn::kFloor:
      return std::floor(x);
    case UnaryFn::kCeil:
      return std::ceil(x);
    case UnaryFn::kRound:
      return std::nearbyint(x);
    case UnaryFn::kTrunc:
      return std::trunc(x);
    case UnaryFn::kExp:
      return std::exp(x);
    case UnaryFn::kExp2:
      return std::exp2(x);
    case UnaryFn::kExpm1:
      return std::expm1(x);
    case UnaryFn::kLog:
      return std::log(x);
    case UnaryFn::kLog2:
      return std::log2(x);
    case UnaryFn::kLog1p:
      return std::log1p(x);
    case UnaryFn::kSqrt:
      return std::sqrt(x);
    case UnaryFn::kRsqrt:
      return 1.0f / std::sqrt(x);
    case UnaryFn::kReciprocal:
      return 1.0f / x;
    case UnaryFn::kTanh:
      return std::tanh(x);
    case UnaryFn::kSigmoid:
      return 1.0f / (1.0f + std::exp(-x));
    case UnaryFn::kErf:
      return std::erf(x);
    // The forms with 1 + f(x) in fp32, as PyTorch's CPU kernels compute them: the sum cancels to
    // an exact 0 for large negative x (below about -5.5 for erf, -9 for tanh), where the forms
    // without it would give a denormal that CPU does not (and nonzero() would count it).
    case UnaryFn::kGeluErf:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case UnaryFn::kGeluTanh: {
      const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(inner));
    }
    case UnaryFn::kSilu:
      return x / (1.0f + std::exp(-x));
    case UnaryFn::kSin:
      return std::sin(x);
    case UnaryFn::kCos:
      return std::cos(x);
    case UnaryFn::kLogicalNot:
      return x == 0.0f ? 1.0f : 0.0f;
    case UnaryFn::kIsNan:
      return std::isnan(x) ? 1.0f : 0.0f;
    case UnaryFn::kIsInf:
      return std::isinf(x) ? 1.0f : 0.0f;
    case UnaryFn::kSquare:
      return x * x;
    default:
      return std::numeric_limits<float>::quiet_NaN();
  }
}

int64_t unary_i(hw::UnaryFn f, int64_t x) {
  using hw::UnaryFn;
  switch (f) {
    case UnaryFn::kNeg:
      return static_cast<int64_t>(0ull - static_cast<uint64_t>(x));
    case UnaryFn::kAbs:
      return x < 0 ? static_cast<int64_t>(0ull - static_cast<uint64_t>(x)) : x;
    case UnaryFn::kRelu:
      return x > 0 ? x : 0;
    case UnaryFn::kSign:
      return (x > 0) - (x < 0);
    case UnaryFn::kLogicalNot:
      return x == 0;
    case UnaryFn::kBitwiseNot:
      return ~x;
    case UnaryFn::kIsNan:
    case UnaryFn::kIsInf:
      return 0;
    case UnaryFn::kSquare:
      return static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(x));
    default:  // copy, floor, ceil, round and trunc are the identity on integers
      return x;
  }
}

float binary_f(hw::BinaryFn f, float a, float b) {
  using hw::BinaryFn;
  switch (f) {
    case BinaryFn::kAdd:
      return a + b;
    case BinaryFn::kSub:
      return a - b;
    case BinaryFn::kMul:
      return a * b;
    case BinaryFn::kDiv:
      return a / b;
    case BinaryFn::kMax:
      return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b);
    case BinaryFn::kMin:
      return (std::isnan(a) || std::isnan(b)) ? std::numeric_limits<float>::quiet_NaN() : std::min(a, b);
    case BinaryFn::kPow:
      return std::pow(a, b);
    case BinaryFn::kRemainder: {
      const float r = std::fmod(a, b);
      return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
    }
    case BinaryFn::kFmod:
      return std::fmod(a, b);
    case BinaryFn::kFloorDiv: {
      if (b == 0.0f) return a / b;
      const float mod = std::fmod(a, b);
      float div = (a - mod) / b;
      if (mod != 0.0f && ((b < 0.0f) != (mod < 0.0f))) div -= 1.0f;
      if (div == 0.0f) return std::copysign(0.0f, a / b);
      const float fl = std::floor(div);
      return div - fl > 0.5f ? fl + 1.0f : fl;
    }
    case BinaryFn::kEq:
      return a == b;
    case BinaryFn::kNe:
      return a != b;
    case BinaryFn::kLt:
      return a < b;
    case BinaryFn::kLe:
      return a <= b;
    case BinaryFn::kGt:
      return a > b;
    case BinaryFn::kGe:
      return a >= b;
    case BinaryFn::kLogicalAnd:
      return (a != 0.0f) && (b != 0.0f);
    case BinaryFn::kLogicalOr:
      return (a != 0.0f) || (b != 0.0f);
    case BinaryFn::kLogicalXor:
      return (a != 0.0f) != (b != 0.0f);
    case BinaryFn::kAtan2:
      return std::atan2(a, b);
    default:
      return std::numeric_limits<float>::quiet_NaN();
  }
}

int64_t ipow(int64_t base, int64_t exp) {
  if (exp < 0) return base == 1 ? 1 : (base == -1 ? ((exp & 1) ? -1 : 1) : 0);
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  for (uint64_t e = static_cast<uint64_t>(exp); e; e >>= 1, b *= b) {
    if (e & 1) result *= b;
  }
  return static_cast<int64_t>(result);
}

int64_t binary_i(hw::BinaryFn f, int64_t a, int64_t b) {
  using hw::BinaryFn;
  const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (f) {
    case BinaryFn::kAdd:
      return static_cast<int64_t>(ua + ub);
    case BinaryFn::kSub:
      return static_cast<int64_t>(ua - ub);
    case BinaryFn::kMul:
      return static_cast<int64_t>(ua * ub);
    case BinaryFn::kDiv:  // integer division by zero gives 0 (the compiler checks divisors)
      if (b == -1) return static_cast<int64_t>(0 - ua);  // INT64_MIN / -1 wraps, as CPU's floor_divide
      return b == 0 ? 0 : a / b;
    case BinaryFn::kMax:
      return std::max(a, b);
    case BinaryFn::kMin:
      return std::min(a, b);
    case BinaryFn::kPow:
      return ipow(a, b);
    case BinaryFn::kRemainder: {
      if (b == 0 || b == -1) return 0;
      const int64_t r = a % b;
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case BinaryFn::kFmod:
      return b == 0 || b == -1 ? 0 : a % b;
    case BinaryFn::kFloorDiv: {
      if (b == -1) return static_cast<int64_t>(0 - ua);
      if (b == 0) return 0;
      const int64_t q = a / b;
      return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
    }
    case BinaryFn::kEq:
      return a == b;
    case BinaryFn::kNe:
      return a != b;
    case BinaryFn::kLt:
      return a < b;
    case BinaryFn::kLe:
      return a <= b;
    case BinaryFn::kGt:
      return a > b;
    case BinaryFn::kGe:
      return a >= b;
    case BinaryFn::kLogicalAnd:
      return a != 0 && b != 0;
    case BinaryFn::kLogicalOr:
      return a != 0 || b != 0;
    case BinaryFn::kLogicalXor:
      return (a != 0) != (b != 0);
    case BinaryFn::kBitAnd:
      return a & b;
    case BinaryFn::kBitOr:
      return a | b;
    case BinaryFn::kBitXor:
      return a ^ b;
    default:
      return 0;
  }
}

}  // namespace

void sfp_convert(void* dst, DType to, const void* src, DType from, uint64_t count) {
  if (to == from) {
    std::memmove(dst, src, count * hw::dtype_size(to));
  } else if (hw::dtype_is_float(to) && hw::dtype_is_float(from)) {
    std::vector<float> f(count);
    to_f32(src, from, count, f.data());
    from_f32(f.data(), to, count, dst);
  } else if (hw::dtype_is_float(from)) {  // float -> integer or bool
    std::vector<float> f(count);
    to_f32(src, from, count, f.data());
    from_f32(f.data(), to, count, dst);
  } else {  // integer or bool -> anything
    std::vector<int64_t> v(count);
    to_i64(src, from, count, v.data());
    from_i64(v.data(), to, count, dst);
  }
}

namespace {
bool unary_f32_fast(hw::UnaryFn f, void* dst, const void* src, uint64_t count);
}  // namespace

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

// out[i] = f(in[i]) with f on Eigen packets, the last partial packet padded, so that each
// element's result is the same wherever it sits. (An Eigen array expression computes the elements
// before the destination's first aligned address with the scalar function, which rounds
// differently: results would depend on where the host allocated the scratchpad.) Where Eigen's
// exp of `sign` * x is off (near overflow, and below -87, where it is subnormal and then floors at
// a denormal instead of 0, even for -inf) the element takes
// `scalar` instead; infinities and NaN come out right either way.
template <typename F, typename S>
void exp_map(float* out, const float* in, uint64_t n, float sign, F f, S scalar) {
  namespace ei = Eigen::internal;
  using P = ei::packet_traits<float>::type;
  constexpr uint64_t kLanes = ei::unpacket_traits<P>::size;
  const auto off = [sign](float x) {
    const float e = sign * x;
    return (e > 88.3f && e < INFINITY) || e < -87.0f;  // below -104 Eigen's floor is a denormal, not 0
  };
  uint32_t wild = 0;
  for (uint64_t i = 0; i < n; ++i) wild |= off(in[i]);
  uint64_t i = 0;
  if (!wild) {  // the common case: whole packets straight through
    for (; i + kLanes <= n; i += kLanes) ei::pstoreu(out + i, f(ei::ploadu<P>(in + i)));
  }
  for (; i < n; i += kLanes) {
    const uint64_t m = std::min(kLanes, n - i);
    float x[kLanes] = {}, y[kLanes];
    std::memcpy(x, in + i, m * 4);
    ei::pstoreu(y, f(ei::ploadu<P>(x)));
    for (uint64_t j = 0; j < m; ++j) {
      if (off(x[j])) y[j] = scalar(x[j]);
    }
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
    exp_map(out, in, n, 1.0f, [](P x) { return ei::pexp(x); }, scalar);
  } else if constexpr (F == UnaryFn::kSigmoid) {
    exp_map(out, in, n, -1.0f, [&](P x) { return ei::pdiv(one, ei::padd(one, ei::pexp(ei::pnegate(x)))); }, scalar);
  } else if constexpr (F == UnaryFn::kSilu) {
    exp_map(out, in, n, -1.0f, [&](P x) { return ei::pdiv(x, ei::padd(one, ei::pexp(ei::pnegate(x)))); }, scalar);
  } else {
    for (uint64_t i = 0; i < n; ++i) out[i] = unary_f(F, in[i]);
  }
}

template <size_t... I>
constexpr auto unary_f32_table(std::index_sequence<I...>) {
  return std::array<void (*)(float*, const float*, uint64_t), sizeof...(I)>{&unary_f32<static_cast<hw::UnaryFn>(I)>...};
}
constexpr auto kUnaryF32 = unary_f32_table(std::make_index_sequence<static_cast<size_t>(hw::UnaryFn::kCount)>());

bool unary_f32_fast(hw::UnaryFn f, void* dst, const void* src, uint64_t count) {
  if (overlaps_apart(dst, src, Bcast::kFull, count * 4) || unaligned(dst, DType::kF32) || unaligned(src, DType::kF32)) {
    return false;
  }
  kUnaryF32[static_cast<size_t>(f)](static_cast<float*>(dst), static_cast<const float*>(src), count);
  return true;
}

}  // namespace

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

namespace {
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
}  // namespace

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

namespace {
// Sum, Max and Min of fp32 rows, vectorised: the sum in eight double partial sums (added pairwise
// at the end), Max and Min by Eigen's (NaN if any element is).
void reduce_f32(hw::ReduceFn f, float* dst, const float* src, uint64_t rows, uint64_t cols, bool accumulate) {
  constexpr uint64_t kLanes = 8;
  for (uint64_t r = 0; r < rows; ++r) {
    const float* row = src + r * cols;
    float a;
    if (f == hw::ReduceFn::kSum) {
      double part[kLanes] = {};
      uint64_t c = 0;
      for (; c + kLanes <= cols; c += kLanes) {
        for (uint64_t j = 0; j < kLanes; ++j) part[j] += row[c + j];
      }
      for (uint64_t j = 0; c < cols; ++c, ++j) part[j] += row[c];
      for (uint64_t w = kLanes / 2; w > 0; w /= 2) {
        for (uint64_t j = 0; j < w; ++j) part[j] += part[j + w];
      }
      a = static_cast<float>(part[0]);
    } else {
      const Eigen::Map<const Eigen::ArrayXf> x(row, static_cast<Eigen::Index>(cols));
      a = f == hw::ReduceFn::kMax ? x.maxCoeff<Eigen::PropagateNaN>() : x.minCoeff<Eigen::PropagateNaN>();
    }
    if (accumulate) {
      a = binary_f(f == hw::ReduceFn::kSum   ? hw::BinaryFn::kAdd
                   : f == hw::ReduceFn::kMax ? hw::BinaryFn::kMax
                                             : hw::BinaryFn::kMin,
                   dst[r], a);
    }
    dst[r] = a;
  }
}
}  // namespace

namespace {
// The index of each row's best element (the first one; NaN beats everything) into dst (int64, at
// any byte), and its value into kept; with `accumulate`, only where strictly better than kept.
template <typename T>
void arg_rows(bool want_max, const T* v, T* kept, void* dst, uint64_t rows, uint64_t cols, bool accumulate,
              int64_t base) {
  const auto is_nan = [](T x) {
    if constexpr (std::is_floating_point_v<T>) {
      return std::isnan(x);
    } else {
      (void)x;
      return false;
    }
  };
  const auto better = [&](T x, T cur) { return !is_nan(cur) && (is_nan(x) || (want_max ? x > cur : x < cur)); };
  auto* out = static_cast<uint8_t*>(dst);
  for (uint64_t r = 0; r < rows; ++r) {
    uint64_t j = 0;
    for (uint64_t c = 1; c < cols; ++c) {
      if (better(v[r * cols + c], v[r * cols + j])) j = c;
    }
    const T x = v[r * cols + j];
    if (!accumulate || better(x, kept[r])) {
      kept[r] = x;
      const int64_t index = base + static_cast<int64_t>(j);
      std::memcpy(out + r * 8, &index, 8);
    }
  }
}
}  // namespace

void sfp_reduce(hw::ReduceFn f, DType t, void* dst, const void* src, uint64_t rows, uint64_t cols, bool accumulate,
                void* best, int64_t base) {
  using hw::ReduceFn;
  const uint64_t n = rows * cols;
  if (f == ReduceFn::kArgMax || f == ReduceFn::kArgMin) {
    // Floats compared as fp32 values, integers as int64: exact over each type's whole range.
    if (hw::dtype_is_float(t)) {
      std::vector<float> v(n), kept(rows);
      to_f32(src, t, n, v.data());
      if (accumulate) to_f32(best, t, rows, kept.data());
      arg_rows(f == ReduceFn::kArgMax, v.data(), kept.data(), dst, rows, cols, accumulate, base);
      from_f32(kept.data(), t, rows, best);
    } else {
      std::vector<int64_t> v(n), kept(rows);
      to_i64(src, t, n, v.data());
      if (accumulate) to_i64(best, t, rows, kept.data());
      arg_rows(f == ReduceFn::kArgMax, v.data(), kept.data(), dst, rows, cols, accumulate, base);
      from_i64(kept.data(), t, rows, best);
    }
    return;
  }
  if (t == DType::kF32 && f != ReduceFn::kProd && !unaligned(src, t) && !unaligned(dst, t) &&
      !overlaps(dst, rows * 4, src, n * 4)) {
    reduce_f32(f, static_cast<float*>(dst), static_cast<const float*>(src), rows, cols, accumulate);
    return;
  }
  if (hw::dtype_is_float(t)) {
    std::vector<float> v(n);
    to_f32(src, t, n, v.data());
    std::vector<float> res(rows);
    if (accumulate) to_f32(dst, t, rows, res.data());
    for (uint64_t r = 0; r < rows; ++r) {
      const float* row = v.data() + r * cols;
      double acc = f == ReduceFn::kSum ? 0.0 : f == ReduceFn::kProd ? 1.0 : row[0];
      for (uint64_t c = 0; c < cols; ++c) {
        const double x = row[c];
        if (f == ReduceFn::kSum) {
          acc += x;
        } else if (f == ReduceFn::kProd) {
          acc *= x;
        } else if (std::isnan(x) || std::isnan(acc)) {
          acc = std::numeric_limits<double>::quiet_NaN();
        } else {
          acc = f == ReduceFn::kMax ? std::max(acc, x) : std::min(acc, x);
        }
      }
      const float a = static_cast<float>(acc);
      res[r] = accumulate ? binary_f(f == ReduceFn::kSum    ? hw::BinaryFn::kAdd
                                     : f == ReduceFn::kProd ? hw::BinaryFn::kMul
                                     : f == ReduceFn::kMax  ? hw::BinaryFn::kMax
                                                            : hw::BinaryFn::kMin,
                                     res[r], a)
                          : a;
    }
    from_f32(res.data(), t, rows, dst);
  } else {
    std::vector<int64_t> v(n);
    to_i64(src, t, n, v.data());
    std::vector<int64_t> res(rows);
    if (accumulate) to_i64(dst, t, rows, res.data());
    const hw::BinaryFn combine = f == ReduceFn::kSum    ? hw::BinaryFn::kAdd
                                 : f == ReduceFn::kProd ? hw::BinaryFn::kMul
                                 : f == ReduceFn::kMax  ? hw::BinaryFn::kMax
                                                        : hw::BinaryFn::kMin;
    for (uint64_t r = 0; r < rows; ++r) {
      const int64_t* row = v.data() + r * cols;
      int64_t acc = f == ReduceFn::kSum ? 0 : f == ReduceFn::kProd ? 1 : row[0];
      for (uint64_t c = 0; c < cols; ++c) acc = binary_i(combine, acc, row[c]);
      res[r] = accumulate ? binary_i(combine, res[r], acc) : acc;
    }
    from_i64(res.data(), t, rows, dst);
  }
}

namespace {

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): four
// 32-bit outputs per 128-bit counter under a 64-bit key.
std::array<uint32_t, 4> philox(uint64_t key, uint64_t counter) {
  std::array<uint32_t, 4> c = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u};
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c[0], p1 = uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

}  // namespace

void sfp_random(DType t, void* dst, uint64_t key, uint64_t counter, uint64_t count, bool normal) {
  std::vector<float> v(count);
  for (uint64_t i = 0; i < count; ++i) {
    const std::array<uint32_t, 4> r = philox(key, counter + i);
    // 24 random bits: exactly representable uniforms in [0, 1) (and (0, 1] for the logarithm).
    const float u1 = static_cast<float>(r[0] >> 8) * 0x1p-24f;
    if (!normal) {
      v[i] = u1;
      continue;
    }
    const double u = (static_cast<double>(r[0] >> 8) + 1.0) * 0x1p-24, w = static_cast<double>(r[1] >> 8) * 0x1p-24;
    v[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * w));  // Box-Muller
  }
  from_f32(v.data(), t, count, dst);
}

void sfp_fill(DType t, void* dst, uint64_t bits, uint64_t count) {
  if (count == 0) return;
  const uint32_t es = hw::dtype_size(t);
  auto* d = static_cast<uint8_t*>(dst);
  if (hw::dtype_is_float(t)) {
    double value;
    std::memcpy(&value, &bits, 8);
    const float f = t == DType::kF32 ? static_cast<float>(value) : round_to_odd(value);
    from_f32(&f, t, 1, d);
  } else {
    const auto v = static_cast<int64_t>(bits);
    const int64_t i = t == DType::kBool ? (v != 0) : v;
    from_i64(&i, t, 1, d);
  }
  const auto repeat = [&](auto word) {  // the first element, copied as one machine word
    std::memcpy(&word, d, sizeof word);
    std::fill_n(reinterpret_cast<decltype(word)*>(d) + 1, count - 1, word);
  };
  if (es == 1) return std::memset(d + 1, d[0], count - 1), void();
  if (unaligned(d, es)) {  // an unaligned block: element by element
    for (uint64_t k = 1; k < count; ++k) std::memcpy(d + k * es, d, es);
    return;
  }
  if (es == 2) repeat(uint16_t{});
  if (es == 4) repeat(uint32_t{});
  if (es == 8) repeat(uint64_t{});
}

void sfp_iota(DType t, void* dst, double start, double step, uint64_t count) {
  if (hw::dtype_is_float(t)) {
    std::vector<float> v(count);
    for (uint64_t i = 0; i < count; ++i) {
      const double x = start + static_cast<double>(i) * step;
      v[i] = t == DType::kF32 ? static_cast<float>(x) : round_to_odd(x);
    }
    from_f32(v.data(), t, count, dst);
  } else {
    std::vector<int64_t> v(count);
    for (uint64_t i = 0; i < count; ++i) v[i] = double_to_int(start + static_cast<double>(i) * step);
    from_i64(v.data(), t, count, dst);
  }
}

void sfp_sort(DType t, void* dst, int64_t* index, const void* src, uint64_t rows, uint64_t cols, bool descending) {
  // Keys in fp32 for float types (exact: every float type widens to it) and in int64 for the
  // others (exact, where a double would merge int64s past 2^53); NaN sorts as the largest.
  const uint32_t es = hw::dtype_size(t);
  std::vector<float> fkey(hw::dtype_is_float(t) ? cols : 0);
  std::vector<int64_t> ikey(hw::dtype_is_float(t) ? 0 : cols), order(cols);
  std::vector<uint8_t> row(cols * es);
  for (uint64_t r = 0; r < rows; ++r) {
    const auto* in = static_cast<const uint8_t*>(src) + r * cols * es;
    for (uint64_t c = 0; c < cols; ++c) order[c] = static_cast<int64_t>(c);
    if (hw::dtype_is_float(t)) {
      to_f32(in, t, cols, fkey.data());
      std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {  // strictly before
        const float x = fkey[static_cast<size_t>(i)], y = fkey[static_cast<size_t>(j)];
        if (std::isnan(x) || std::isnan(y))
          return descending ? std::isnan(x) && !std::isnan(y) : !std::isnan(x) && std::isnan(y);
        return descending ? x > y : x < y;
      });
    } else {
      to_i64(in, t, cols, ikey.data());
      std::stable_sort(order.begin(), order.end(), [&](int64_t i, int64_t j) {
        const int64_t x = ikey[static_cast<size_t>(i)], y = ikey[static_cast<size_t>(j)];
        return descending ? x > y : x < y;
      });
    }
    std::memcpy(row.data(), in, cols * es);  // src and dst may be the same block
    auto* out = static_cast<uint8_t*>(dst) + r * cols * es;
    for (uint64_t c = 0; c < cols; ++c)
      std::memcpy(out + c * es, row.data() + static_cast<uint64_t>(order[c]) * es, es);
    std::memcpy(index + r * cols, order.data(), cols * 8);
  }
}

void sfp_scan(hw::ScanFn f, DType t, void* dst, const void* src, uint64_t rows, uint64_t cols, void* carry,
              bool accumulate) {
  const uint64_t n = rows * cols;
  const bool sum = f == hw::ScanFn::kSum;
  if (hw::dtype_is_float(t)) {  // accumulates in double, rounds each result once
    std::vector<float> v(n), start(rows, sum ? 0.0f : 1.0f);
    to_f32(src, t, n, v.data());
    if (carry && accumulate) to_f32(carry, t, rows, start.data());
    for (uint64_t r = 0; r < rows; ++r) {
      double acc = start[r];
      for (uint64_t c = 0; c < cols; ++c) {
        acc = sum ? acc + v[r * cols + c] : acc * v[r * cols + c];
        v[r * cols + c] = static_cast<float>(acc);
      }
      start[r] = cols ? v[r * cols + cols - 1] : start[r];
    }
    from_f32(v.data(), t, n, dst);
    if (carry) from_f32(start.data(), t, rows, carry);
  } else {
    std::vector<int64_t> v(n), start(rows, sum ? 0 : 1);
    to_i64(src, t, n, v.data());
    if (carry && accumulate) to_i64(carry, t, rows, start.data());
    for (uint64_t r = 0; r < rows; ++r) {
      int64_t acc = start[r];
      for (uint64_t c = 0; c < cols; ++c) {
        acc = binary_i(sum ? hw::BinaryFn::kAdd : hw::BinaryFn::kMul, acc, v[r * cols + c]);
        v[r * cols + c] = acc;
      }
      start[r] = acc;
    }
    from_i64(v.data(), t, n, dst);
    if (carry) from_i64(start.data(), t, rows, carry);
  }
}

namespace {
#ifdef __AVX__
// The 8 x 8 block of 32-bit words at `in` (rows `in_stride` words apart) into `out`, transposed:
// unpack pairs, then quads, then swap 128-bit halves.
void transpose8x8_32(const uint32_t* in, uint64_t in_stride, uint32_t* out, uint64_t out_stride) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(in + i * in_stride));
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    for (int j = 0; j < 2; ++j) {
      r[i + j] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], _MM_SHUFFLE(1, 0, 1, 0));
      r[i + j + 2] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  }
  // r holds, per 128-bit half, rows 0,2,1,3 (and 4,6,5,7) of the transposed block.
  const int order[4] = {0, 2, 1, 3};
  for (int i = 0; i < 4; ++i) {
    const __m256 lo = r[order[i]], hi = r[4 + order[i]];
    _mm256_storeu_ps(reinterpret_cast<float*>(out + i * out_stride), _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(reinterpret_cast<float*>(out + (i + 4) * out_stride), _mm256_permute2f128_ps(lo, hi, 0x31));
  }
}
#endif
}  // namespace

void sfp_transpose(uint32_t es, void* dst, const void* src, uint64_t rows, uint64_t cols) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const auto typed = [&](auto word) {
    using W = decltype(word);
    W* out = reinterpret_cast<W*>(d);
    const W* in = reinterpret_cast<const W*>(s);
    constexpr uint64_t kBlock = 32;  // in blocks, so that both sides stay in cache
    for (uint64_t r0 = 0; r0 < rows; r0 += kBlock) {
      for (uint64_t c0 = 0; c0 < cols; c0 += kBlock) {
        const uint64_t r1 = std::min(rows, r0 + kBlock), c1 = std::min(cols, c0 + kBlock);
#ifdef __AVX__
        if constexpr (sizeof(W) == 4) {  // whole 8 x 8 blocks of words in vector registers
          if (r1 - r0 == kBlock && c1 - c0 == kBlock) {
            for (uint64_t r = r0; r < r1; r += 8) {
              for (uint64_t c = c0; c < c1; c += 8) transpose8x8_32(in + r * cols + c, cols, out + c * rows + r, rows);
            }
            continue;
          }
        }
#endif
        for (uint64_t r = r0; r < r1; ++r) {
          for (uint64_t c = c0; c < c1; ++c) out[c * rows + r] = in[r * cols + c];
        }
      }
    }
  };
  const bool aligned = !unaligned(d, es) && !unaligned(s, es);
  if (es == 1) return typed(uint8_t{});
  if (aligned && es == 2) return typed(uint16_t{});
  if (aligned && es == 4) return typed(uint32_t{});
  if (aligned && es == 8) return typed(uint64_t{});
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) std::memcpy(d + (c * rows + r) * es, s + (r * cols + c) * es, es);
  }
}

void set_fp16_dlfloat(bool dlfloat) {
  g_fp16_dlfloat = dlfloat;
}

}  // namespace spyre::sim
