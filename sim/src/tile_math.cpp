#include "tile_math.h"

#include "sfp.h"

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
  sfp_convert(scratch.data(), hw::DType::kF32, p, t, count);
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

}  // namespace spyre::sim
