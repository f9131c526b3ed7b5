// The SFP's conversions (sfp_convert.h) and the CONVERT instruction: every scratchpad type to and
// from the compute types, with the f16 format of the config (DLFloat16 or IEEE half).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#define EIGEN_STACK_ALLOCATION_LIMIT 0
#include <Eigen/Core>

#include "sfp.h"
#include "sfp_convert.h"
#include "spyre/hw/dlfloat16.h"
#include "spyre/hw/float16.h"

namespace spyre::sim {
namespace sfp {
namespace {

// The format of f16 data (set once per process from the config, before any core runs).
bool g_fp16_dlfloat = true;

uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace

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
      for (uint64_t i = 0; i < n; ++i) out[i] = hw::bf16_to_float(s[i]);
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

}  // namespace sfp

using namespace sfp;  // the SFP's own internals

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

void set_fp16_dlfloat(bool dlfloat) {
  sfp::g_fp16_dlfloat = dlfloat;
}

}  // namespace spyre::sim
