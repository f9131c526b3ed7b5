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

#include <cstdint>
#include <cstring>
#include <limits>

namespace spyre::hw {

inline constexpr uint16_t kDlf16Nan = 0x7fff;
inline constexpr uint16_t kDlf16MaxBits = 0x7ffe;  // exponent 63, fraction 510

/// The DLFloat16 nearest to `x` (ties away from zero), saturating and flushing as above.
inline uint16_t dlf16_from_float(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const auto sign = static_cast<uint16_t>(bits >> 16 & 0x8000);
  const uint32_t mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) return kDlf16Nan;
  if (mag < 0x00800000u) return sign;  // zero, or an fp32 subnormal: far below 2^-30
  // Keep 9 of fp32's 23 fraction bits: adding half of the 14 dropped ones rounds the magnitude to
  // nearest with ties up (away from zero), carrying into the exponent when the fraction overflows.
  const uint32_t rounded = mag + (1u << 13);
  const int biased = static_cast<int>(rounded >> 23) - 127 + 31;
  const uint32_t fraction = rounded >> 14 & 511u;
  if (biased < 1) return sign;                                                        // below the smallest normal
  if (biased > 63 || (biased == 63 && fraction == 511)) return sign | kDlf16MaxBits;  // and +-inf
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(biased) << 9 | fraction);
}

/// The value of a DLFloat16 as a float (exact: 10 significant bits).
inline float dlf16_to_float(uint16_t h) {
  if ((h & 0x7fff) == kDlf16Nan) return std::numeric_limits<float>::quiet_NaN();
  const uint32_t biased = h >> 9 & 63u;
  uint32_t bits = uint32_t{h & 0x8000u} << 16;
  if (biased != 0) bits |= (biased - 31 + 127) << 23 | uint32_t{h & 511u} << 14;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace spyre::hw
