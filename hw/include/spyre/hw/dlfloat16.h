// DLFloat16, the 16-bit float Spyre keeps fp16 data in (IBM's 1-6-9 format): 1 sign bit, 6
// exponent bits (bias 31), 9 fraction bits. The device and the host runtime both convert with
// these functions, so the card and the copy boundary agree bit for bit.
//
// The encoding as this project models it (docs/hardware-interface.md, "Numerics"):
// - exponent field 1..63 with fraction f: (-1)^s * 2^(e - 31) * (1 + f / 512), except the one
//   pattern with every exponent and fraction bit set (0x7fff, 0xffff), which is NaN;
// - exponent field 0 is zero (signed); there are no subnormals: a value below the smallest
//   normal, 2^-30, flushes to zero;
// - rounding is to nearest, ties away from zero;
// - there is no infinity: +-inf and finite values past the largest, (2 - 2^-8) * 2^32, saturate
//   to +-that largest value.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace spyre::hw {

inline constexpr uint16_t kDlf16Nan = 0x7fff;
inline constexpr uint16_t kDlf16MaxBits = 0x7ffe;  // exponent 63, fraction 510

/// The DLFloat16 nearest to `x` (ties away from zero), saturating and flushing as above.
inline uint16_t dlf16_from_float(float x) {
  if (std::isnan(x)) return kDlf16Nan;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const float a = std::fabs(x);
  if (a == 0.0f) return sign;
  if (std::isinf(a)) return sign | kDlf16MaxBits;
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int biased = e - 1 + 31;            // a = (2m) * 2^(e - 1)
  // 2m - 1 in 9 fraction bits: exact in float (2m has 24 significant bits), then rounded.
  const float frac = (2.0f * m - 1.0f) * 512.0f;
  uint32_t q = static_cast<uint32_t>(std::floor(frac + 0.5f));
  if (q == 512) {
    q = 0;
    ++biased;
  }
  if (biased < 1) return sign;  // below the smallest normal
  if (biased > 63 || (biased == 63 && q == 511)) return sign | kDlf16MaxBits;
  return static_cast<uint16_t>(sign | biased << 9 | q);
}

/// The value of a DLFloat16 as a float (exact: 10 significant bits).
inline float dlf16_to_float(uint16_t h) {
  if ((h & 0x7fff) == kDlf16Nan) return std::numeric_limits<float>::quiet_NaN();
  const int biased = (h >> 9) & 63;
  const float mag = biased == 0 ? 0.0f : std::ldexp(1.0f + static_cast<float>(h & 511) / 512.0f, biased - 31);
  return (h & 0x8000) ? -mag : mag;
}

}  // namespace spyre::hw
