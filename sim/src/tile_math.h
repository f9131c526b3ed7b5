// Functional tile arithmetic of a core, computed with a real linear-algebra library (Eigen).
// Exact for the declared numerics: fp16 and bf16 inputs are widened exactly, products accumulate in fp32.
#pragma once

#include <cstdint>

#include "spyre/hw/isa.h"

namespace spyre::sim {

/// C[M,N] (+)= A[M,K] @ B[K,N]; A and B row-major in `in`, C row-major fp32.
void tile_matmul(float* c, const void* a, const void* b, uint32_t m, uint32_t k, uint32_t n, hw::DType in,
                 bool accumulate);

}  // namespace spyre::sim
