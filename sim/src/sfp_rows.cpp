// The SFP's row instructions: REDUCE (sum, product, max, min and the arg-reductions), SCAN, SORT
// and TRANSPOSE, each over the rows of a block.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#define EIGEN_STACK_ALLOCATION_LIMIT 0
#include <Eigen/Core>

#ifdef __AVX__
#include <immintrin.h>
#endif

#include "sfp.h"
#include "sfp_convert.h"
#include "sfp_math.h"

namespace spyre::sim {

using namespace sfp;  // the SFP's own internals

namespace {
// The double partial sums of an fp32 row's sum.
constexpr uint64_t kSumLanes = 8;

// The row's sum from its partial sums: added pairwise, 4 apart, then 2, then 1.
float add_partials(double (&part)[kSumLanes]) {
  for (uint64_t w = kSumLanes / 2; w > 0; w /= 2) {
    for (uint64_t j = 0; j < w; ++j) part[j] += part[j + w];
  }
  return static_cast<float>(part[0]);
}

// The sum of each row of `Cols` (< kSumLanes) floats, as reduce_f32 adds them: partial sum j is
// 0 + row[j] (0 past the row). With the row length known at compile time a block of short rows
// (a reduction over a small trailing dimension) costs no loop per row.
template <uint64_t Cols>
void sum_short_rows(float* dst, const float* src, uint64_t rows) {
  static_assert(Cols > 0 && Cols < kSumLanes);
  for (uint64_t r = 0; r < rows; ++r) {
    const float* row = src + r * Cols;
    double part[kSumLanes] = {};
    for (uint64_t j = 0; j < Cols; ++j) part[j] += row[j];
    dst[r] = add_partials(part);
  }
}

void sum_short_rows(float* dst, const float* src, uint64_t rows, uint64_t cols) {
  using Fn = void (*)(float*, const float*, uint64_t);
  static constexpr Fn kByCols[kSumLanes] = {nullptr,
                                            &sum_short_rows<1>,
                                            &sum_short_rows<2>,
                                            &sum_short_rows<3>,
                                            &sum_short_rows<4>,
                                            &sum_short_rows<5>,
                                            &sum_short_rows<6>,
                                            &sum_short_rows<7>};
  kByCols[cols](dst, src, rows);
}

// Sum, Max and Min of fp32 rows, vectorised: the sum in eight double partial sums (added pairwise
// at the end), Max and Min by Eigen's (NaN if any element is).
void reduce_f32(hw::ReduceFn f, float* dst, const float* src, uint64_t rows, uint64_t cols, bool accumulate) {
  if (f == hw::ReduceFn::kSum && !accumulate && cols > 0 && cols < kSumLanes) {
    return sum_short_rows(dst, src, rows, cols);
  }
  for (uint64_t r = 0; r < rows; ++r) {
    const float* row = src + r * cols;
    float a;
    if (f == hw::ReduceFn::kSum) {
      double part[kSumLanes] = {};
      uint64_t c = 0;
      for (; c + kSumLanes <= cols; c += kSumLanes) {
        for (uint64_t j = 0; j < kSumLanes; ++j) part[j] += row[c + j];
      }
      for (uint64_t j = 0; c < cols; ++c, ++j) part[j] += row[c];
      a = add_partials(part);
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
#ifdef __AVX512F__
// GCC 12's own avx512fintrin.h passes an undefined vector as the unused merge operand of its
// unpack intrinsics and then warns that it is uninitialised (a false positive in the header).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// The 16 x 16 block of 32-bit words at `in` into `out`, transposed: unpack pairs, then quads, then
// gather 128-bit lanes twice (a quarter fewer shuffles per word than the 8 x 8 block's, and half the
// loads and stores).
void transpose16x16_32(const uint32_t* in, uint64_t in_stride, uint32_t* out, uint64_t out_stride) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(reinterpret_cast<const float*>(in + i * in_stride));
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  const auto pairs = [](__m512 a, __m512 b, bool high) {
    const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
    return _mm512_castpd_ps(high ? _mm512_unpackhi_pd(x, y) : _mm512_unpacklo_pd(x, y));
  };
  for (int i = 0; i < 16; i += 4) {
    r[i] = pairs(t[i], t[i + 2], false);
    r[i + 1] = pairs(t[i], t[i + 2], true);
    r[i + 2] = pairs(t[i + 1], t[i + 3], false);
    r[i + 3] = pairs(t[i + 1], t[i + 3], true);
  }
  for (int i = 0; i < 16; i += 8) {
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    _mm512_storeu_ps(reinterpret_cast<float*>(out + j * out_stride), _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88));
    _mm512_storeu_ps(reinterpret_cast<float*>(out + (j + 8) * out_stride), _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd));
  }
}
#pragma GCC diagnostic pop
#endif
}  // namespace

void sfp_transpose(uint32_t es, void* dst, const void* src, uint64_t rows, uint64_t cols) {
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  const auto typed = [&](auto word) {
    using W = decltype(word);
    W* out = reinterpret_cast<W*>(d);
    const W* in = reinterpret_cast<const W*>(s);
    constexpr uint64_t kBlock = 64;  // in blocks, so that both sides stay in cache
    for (uint64_t r0 = 0; r0 < rows; r0 += kBlock) {
      for (uint64_t c0 = 0; c0 < cols; c0 += kBlock) {
        const uint64_t r1 = std::min(rows, r0 + kBlock), c1 = std::min(cols, c0 + kBlock);
        uint64_t r8 = r0, c8 = c0;  // the part done in whole 8 x 8 blocks: [r0, r8) x [c0, c8)
#ifdef __AVX__
        if constexpr (sizeof(W) == 4) {  // whole 16 x 16, then 8 x 8 blocks of words in vector registers
          r8 = r0 + (r1 - r0) / 8 * 8;
          c8 = c0 + (c1 - c0) / 8 * 8;
          uint64_t r16 = r0, c16 = c0;  // [r0, r16) x [c0, c16) in 16 x 16 blocks
#ifdef __AVX512F__
          r16 = r0 + (r1 - r0) / 16 * 16;
          c16 = c0 + (c1 - c0) / 16 * 16;
          for (uint64_t r = r0; r < r16; r += 16) {
            for (uint64_t c = c0; c < c16; c += 16)
              transpose16x16_32(in + r * cols + c, cols, out + c * rows + r, rows);
          }
#endif
          const auto eights = [&](uint64_t ra, uint64_t rb, uint64_t ca, uint64_t cb) {
            for (uint64_t r = ra; r < rb; r += 8) {
              for (uint64_t c = ca; c < cb; c += 8) transpose8x8_32(in + r * cols + c, cols, out + c * rows + r, rows);
            }
          };
          eights(r0, r16, c16, c8);  // right of the 16 x 16 blocks
          eights(r16, r8, c0, c8);   // below them
        }
#endif
        for (uint64_t r = r0; r < r1; ++r) {  // the edges one word at a time
          for (uint64_t c = r < r8 ? c8 : c0; c < c1; ++c) out[c * rows + r] = in[r * cols + c];
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

}  // namespace spyre::sim
