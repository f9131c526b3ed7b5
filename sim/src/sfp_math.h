// The SFP's scalar reference arithmetic: one element of every UNARY and BINARY function, in fp32
// for float types and in wrapping int64 for the others. The general paths apply it element by
// element; the vector fast paths (sfp_vector.cpp) instantiate it once per function, so it lives
// here, inline, where both see it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "spyre/hw/isa.h"

namespace spyre::sim::sfp {

inline float unary_f(hw::UnaryFn f, float x) {
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

inline int64_t unary_i(hw::UnaryFn f, int64_t x) {
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

inline float binary_f(hw::BinaryFn f, float a, float b) {
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

inline int64_t ipow(int64_t base, int64_t exp) {
  if (exp < 0) return base == 1 ? 1 : (base == -1 ? ((exp & 1) ? -1 : 1) : 0);
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  for (uint64_t e = static_cast<uint64_t>(exp); e; e >>= 1, b *= b) {
    if (e & 1) result *= b;
  }
  return static_cast<int64_t>(result);
}

inline int64_t binary_i(hw::BinaryFn f, int64_t a, int64_t b) {
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

}  // namespace spyre::sim::sfp
