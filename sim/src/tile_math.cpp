#include "tile_math.h"

#include "sfp.h"

#include <algorithm>
#include <cmath>
#include <vector>

// Core threads run on coroutine stacks: keep Eigen's temporaries on the heap.
#define EIGEN_STACK_ALLOCATION_LIMIT 0
#include <Eigen/Core>

namespace spyre::sim {
namespace {

namespace ei = Eigen::internal;

const float* as_float(const void* p, uint64_t count, hw::DType t, std::vector<float>& scratch) {
  if (t == hw::DType::kF32) return static_cast<const float*>(p);
  scratch.resize(count);
  sfp_convert(scratch.data(), hw::DType::kF32, p, t, count);
  return scratch.data();
}

// The MATMUL's numerics (docs/hardware-interface.md): per element of C, a chain of fused
// multiply-adds over k in order from +0, then added to C under accumulate. Every path below
// computes that, so the bits do not depend on the path, the tile's shape or the host's vector
// width. (A BLAS splits and reorders the chain as suits the host and the shape.)

#ifdef EIGEN_VECTORIZE_FMA
using Packet = ei::packet_traits<float>::type;
constexpr uint32_t kLanes = sizeof(Packet) / sizeof(float);

// An R x V-packet block of C held in registers while k runs: per k, V packets of B's row and R
// broadcasts of A, R * V fused multiply-adds (no packing: B's rows are read where they lie).
template <uint32_t R, uint32_t V>
void chain_block(float* c, const float* a, const float* b, uint32_t k, uint32_t n, bool accumulate) {
  Packet s[R][V];
  for (uint32_t i = 0; i < R; ++i) {
    for (uint32_t v = 0; v < V; ++v) s[i][v] = ei::pset1<Packet>(0.0f);
  }
  for (uint32_t kk = 0; kk < k; ++kk) {
    const float* row = b + uint64_t{kk} * n;
    Packet bv[V];
    for (uint32_t v = 0; v < V; ++v) bv[v] = ei::ploadu<Packet>(row + size_t{v} * kLanes);
    for (uint32_t i = 0; i < R; ++i) {
      const Packet x = ei::pset1<Packet>(a[uint64_t{i} * k + kk]);
      for (uint32_t v = 0; v < V; ++v) s[i][v] = ei::pmadd(x, bv[v], s[i][v]);
    }
  }
  for (uint32_t i = 0; i < R; ++i) {
    for (uint32_t v = 0; v < V; ++v) {
      float* out = c + uint64_t{i} * n + size_t{v} * kLanes;
      ei::pstoreu(out, accumulate ? ei::padd(ei::ploadu<Packet>(out), s[i][v]) : s[i][v]);
    }
  }
}

// Every row of a strip of V packets' columns: R rows at a time, then one at a time.
template <uint32_t R, uint32_t V>
void chain_strip(float* c, const float* a, const float* b, uint32_t m, uint32_t k, uint32_t n, bool accumulate) {
  uint32_t i = 0;
  for (; i + R <= m; i += R) chain_block<R, V>(c + uint64_t{i} * n, a + uint64_t{i} * k, b, k, n, accumulate);
  for (; i < m; ++i) chain_block<1, V>(c + uint64_t{i} * n, a + uint64_t{i} * k, b, k, n, accumulate);
}

// R rows x 2 packets of accumulators, plus B's 2 packets and a broadcast, fill the registers.
constexpr uint32_t kRows = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS >= 32 ? 8 : 6;
#else
// One element at a time: the host without FMA instructions.
void chain_elements(float* c, const float* a, const float* b, uint32_t m, uint32_t k, uint32_t n, bool accumulate) {
  for (uint32_t i = 0; i < m; ++i) {
    for (uint32_t j = 0; j < n; ++j) {
      float s = 0.0f;
      for (uint32_t kk = 0; kk < k; ++kk) s = std::fma(a[uint64_t{i} * k + kk], b[uint64_t{kk} * n + j], s);
      float& out = c[uint64_t{i} * n + j];
      out = accumulate ? out + s : s;
    }
  }
}
#endif

}  // namespace

void tile_matmul(float* c, const void* a, const void* b, uint32_t m, uint32_t k, uint32_t n, hw::DType in,
                 bool accumulate) {
  thread_local std::vector<float> sa, sb;
  const float* fa = as_float(a, uint64_t{m} * k, in, sa);
  const float* fb = as_float(b, uint64_t{k} * n, in, sb);
#ifdef EIGEN_VECTORIZE_FMA
  uint32_t j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) chain_strip<kRows, 2>(c + j, fa, fb + j, m, k, n, accumulate);
  for (; j + kLanes <= n; j += kLanes) chain_strip<kRows, 1>(c + j, fa, fb + j, m, k, n, accumulate);
  if (j < n) {  // the last columns padded to one packet (its other lanes multiply zeros, unread)
    const uint32_t cols = n - j;
    thread_local std::vector<float> pb, pc;
    pb.assign(size_t{k} * kLanes, 0.0f);
    pc.assign(size_t{m} * kLanes, 0.0f);
    for (uint32_t kk = 0; kk < k; ++kk) std::copy_n(fb + size_t{kk} * n + j, cols, pb.data() + size_t{kk} * kLanes);
    for (uint32_t i = 0; i < m && accumulate; ++i)
      std::copy_n(c + size_t{i} * n + j, cols, pc.data() + size_t{i} * kLanes);
    chain_strip<kRows, 1>(pc.data(), fa, pb.data(), m, k, kLanes, accumulate);
    for (uint32_t i = 0; i < m; ++i) std::copy_n(pc.data() + size_t{i} * kLanes, cols, c + size_t{i} * n + j);
  }
#else
  chain_elements(c, fa, fb, m, k, n, accumulate);
#endif
}

}  // namespace spyre::sim
