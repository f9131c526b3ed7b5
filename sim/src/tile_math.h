// Functional tile arithmetic of a core. fp16 and bf16 inputs are widened exactly; each element of
// the product is a chain of fp32 fused multiply-adds over k in order, added to C under accumulate
// (the MATMUL's defined numerics), computed in register blocks of Eigen's packets, so the bits are
// the same on every host with FMA.
#pragma once

#include <cstdint>

#include "spyre/hw/isa.h"

namespace spyre::sim {

/// C[M,N] (+)= A[M,K] @ B[K,N]; A and B row-major in `in`, C row-major fp32.
void tile_matmul(float* c, const void* a, const void* b, uint32_t m, uint32_t k, uint32_t n, hw::DType in,
                 bool accumulate);

}  // namespace spyre::sim
