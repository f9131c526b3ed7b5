// The SFP's generators: RANDOM (counter-based, Philox), FILL and IOTA.
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "sfp.h"
#include "sfp_convert.h"

namespace spyre::sim {

using namespace sfp;  // the SFP's own internals

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

}  // namespace spyre::sim
