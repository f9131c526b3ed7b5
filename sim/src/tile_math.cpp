#include "tile_math.h"

#include <cstring>
#include <vector>

// Core threads run on coroutine stacks: keep Eigen's temporaries on the heap.
#define EIGEN_STACK_ALLOCATION_LIMIT 0
#include <Eigen/Core>

namespace spyre::sim {
namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

const float* as_float(const void* p, uint64_t count, hw::DType t, std::vector<float>& scratch) {
  if (t == hw::DType::kF32) return static_cast<const float*>(p);
  scratch.resize(count);
  const auto* h = static_cast<const Eigen::half*>(p);
  for (uint64_t i = 0; i < count; ++i) scratch[i] = static_cast<float>(h[i]);
  return scratch.data();
}

}  // namespace

void tile_matmul(float* c, const void* a, const void* b, uint32_t m, uint32_t k, uint32_t n, hw::DType in,
                 bool accumulate) {
  thread_local std::vector<float> sa, sb;
  const Eigen::Map<const RowMajor> A(as_float(a, uint64_t{m} * k, in, sa), m, k);
  const Eigen::Map<const RowMajor> B(as_float(b, uint64_t{k} * n, in, sb), k, n);
  Eigen::Map<RowMajor> C(c, m, n);
  if (accumulate) {
    C.noalias() += A * B;
  } else {
    C.noalias() = A * B;
  }
}

void tile_convert(void* dst, hw::DType to, const void* src, hw::DType from, uint64_t count) {
  if (to == from) {
    std::memmove(dst, src, count * hw::dtype_size(to));
    return;
  }
  if (from == hw::DType::kF32) {
    const auto* s = static_cast<const float*>(src);
    auto* d = static_cast<Eigen::half*>(dst);
    for (uint64_t i = 0; i < count; ++i) d[i] = Eigen::half(s[i]);
  } else {
    const auto* s = static_cast<const Eigen::half*>(src);
    auto* d = static_cast<float*>(dst);
    for (uint64_t i = 0; i < count; ++i) d[i] = static_cast<float>(s[i]);
  }
}

}  // namespace spyre::sim
