// The device's floating-point types on the host: values rounded as the card stores them, and the
// bytes of a buffer in device memory. fp16 is DLFloat16 or IEEE half, as the card reports.
#pragma once

#include <cstddef>
#include <cstdint>

#include "spyre/hw/isa.h"

namespace spyre::simtool {

/// How the card keeps each float type in device memory.
struct Formats {
  bool fp16_dlfloat = true;  // fp16 is DLFloat16 (hw/dlfloat16.h); false: IEEE half
};

/// `x` rounded to the nearest value of `type` as the card stores it. `type` is f32, f16 or bf16.
float round_to(hw::DType type, const Formats& f, float x);

/// Writes `n` floats as `type` into `dst` (n * dtype_size(type) bytes), rounding to nearest.
void encode(hw::DType type, const Formats& f, const float* src, size_t n, void* dst);
/// Reads `n` values of `type` from `src` as floats (exact).
void decode(hw::DType type, const Formats& f, const void* src, size_t n, float* dst);

/// The unit roundoff of `type` as stored (half the distance from 1 to the next value):
/// 2^-24 for f32, 2^-11 for IEEE half, 2^-10 for DLFloat16, 2^-8 for bf16.
double unit_roundoff(hw::DType type, const Formats& f);

}  // namespace spyre::simtool
