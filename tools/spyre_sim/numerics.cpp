#include "numerics.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "spyre/hw/dlfloat16.h"
#include "spyre/hw/float16.h"

namespace spyre::simtool {
namespace {

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float float_of(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

// IEEE binary16, round to nearest even, with subnormals, infinities and NaN.
uint16_t half_from_float(float x) {
  const uint32_t b = bits_of(x);
  const auto sign = static_cast<uint16_t>(b >> 16 & 0x8000u);
  const uint32_t mag = b & 0x7fffffffu;
  if (mag > 0x7f800000u) return sign | 0x7e00u;
  if (mag >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and above round to infinity
  if (mag < 0x38800000u) {                        // below 2^-14: a subnormal half (or zero)
    // Scaling by 2^24 is exact; nearbyint rounds to nearest even in the default mode.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(float_of(mag) * 16777216.0f)));
  }
  uint32_t h = ((mag >> 23) - 127 + 15) << 10 | (mag >> 13 & 0x3ffu);
  const uint32_t rest = mag & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves into the exponent
  return static_cast<uint16_t>(sign | h);
}

// bfloat16, round to nearest even.
uint16_t bf16_from_float(float x) {
  const uint32_t b = bits_of(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(b >> 16 | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((b + 0x7fffu + (b >> 16 & 1u)) >> 16);
}

uint16_t to16(hw::DType type, const Formats& f, float x) {
  if (type == hw::DType::kBF16) return bf16_from_float(x);
  return f.fp16_dlfloat ? hw::dlf16_from_float(x) : half_from_float(x);
}

float from16(hw::DType type, const Formats& f, uint16_t h) {
  if (type == hw::DType::kBF16) return hw::bf16_to_float(h);
  return f.fp16_dlfloat ? hw::dlf16_to_float(h) : hw::half_to_float(h);
}

void require_float(hw::DType type) {
  if (type != hw::DType::kF32 && type != hw::DType::kF16 && type != hw::DType::kBF16) {
    throw std::invalid_argument(std::string("numerics: not a float type: ") + hw::dtype_name(type));
  }
}

}  // namespace

float round_to(hw::DType type, const Formats& f, float x) {
  require_float(type);
  return type == hw::DType::kF32 ? x : from16(type, f, to16(type, f, x));
}

void encode(hw::DType type, const Formats& f, const float* src, size_t n, void* dst) {
  require_float(type);
  if (type == hw::DType::kF32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  auto* out = static_cast<uint16_t*>(dst);
  for (size_t i = 0; i < n; ++i) out[i] = to16(type, f, src[i]);
}

void decode(hw::DType type, const Formats& f, const void* src, size_t n, float* dst) {
  require_float(type);
  if (type == hw::DType::kF32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  const auto* in = static_cast<const uint16_t*>(src);
  for (size_t i = 0; i < n; ++i) dst[i] = from16(type, f, in[i]);
}

double unit_roundoff(hw::DType type, const Formats& f) {
  require_float(type);
  switch (type) {
    case hw::DType::kF32:
      return std::ldexp(1.0, -24);
    case hw::DType::kBF16:
      return std::ldexp(1.0, -8);
    default:
      return std::ldexp(1.0, f.fp16_dlfloat ? -10 : -11);
  }
}

}  // namespace spyre::simtool
