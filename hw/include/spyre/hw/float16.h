// The card's two other 16-bit floats as float: IEEE binary16 (f16 when chip.fp16_format is ieee)
// and bfloat16. DLFloat16, the default f16, is in dlfloat16.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace spyre::hw {

/// The value of an IEEE binary16 as a float (exact).
inline float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t e = h >> 10 & 31u, m = h & 0x3ffu;
  if (e == 0) return std::copysign(std::ldexp(static_cast<float>(m), -24), sign ? -1.0f : 1.0f);
  const uint32_t bits = e == 31 ? sign | 0x7f800000u | m << 13 : sign | (e - 15 + 127) << 23 | m << 13;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/// The value of a bfloat16 as a float (exact).
inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace spyre::hw
