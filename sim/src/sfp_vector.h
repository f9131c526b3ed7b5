// The SFP's vector fast paths for fp32 operands: the same arithmetic as the general paths
// (sfp_math.h), one instantiation per function, in plain loops the compiler vectorises, and Eigen
// packets for exp, sigmoid and SiLU. Each returns false when the instruction is not one it takes
// (another function, unaligned operands, a full operand partly overlapping the result), and the
// caller takes the general path. Internal to the SFP model (sfp*.cpp).
#pragma once

#include <cstdint>

#include "spyre/hw/isa.h"

namespace spyre::sim::sfp {

bool unary_f32_fast(hw::UnaryFn f, void* dst, const void* src, uint64_t count);
bool binary_f32_fast(hw::BinaryFn f, void* dst, const void* src0, hw::Bcast b0, const void* src1, hw::Bcast b1,
                     uint32_t imm, uint64_t rows, uint64_t cols);
bool select_f32_fast(float* dst, const uint8_t* mask, const void* src1, hw::Bcast b1, const void* src2, hw::Bcast b2,
                     uint32_t imm, uint64_t rows, uint64_t cols);

}  // namespace spyre::sim::sfp
