// What the matmul plans share: the problem as lower_matmul reads it from the graph (shapes,
// operand layouts, the bias), the DMA tags and the epilogue. matmul.cpp holds the streamed plans
// (per-core blocks, shared panels); matmul_resident.cpp the plan that keeps B in the scratchpad.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "lower.h"

namespace spyre::compiler::lower {

struct MatmulOperand {
  bool transposed = false;  // the tile loads along its contiguous dim and is transposed in place
  int64_t outer = 0;        // stride (elements) of the tile's row dim as the PT array reads it
  int64_t inner = 0;        // stride of its column dim
};

/// One matmul, out = alpha * a @ b + beta * bias, over the output's leading (batch) dims.
struct MatmulProblem {
  const ir::View* a = nullptr;
  const ir::View* b = nullptr;
  const ir::View* out = nullptr;
  const ir::View* bias = nullptr;      // null: no bias term
  const ir::View* residual = nullptr;  // null: none; else out's shape, strides and type
  int64_t M = 0, N = 0, K = 0;
  std::vector<int64_t> batch;      // the output's leading dims
  std::vector<int64_t> ba, bb;     // a's and b's strides over them (0: broadcast)
  std::vector<int64_t> bias_full;  // the bias's strides over the whole output
  int64_t sa_m = 0, sa_k = 0, sb_k = 0, sb_n = 0, so_m = 0, so_n = 0, sbias_m = 0, sbias_n = 0;
  MatmulOperand A, B;
  uint64_t es = 0, es_o = 0, es_bias = 0;  // element bytes of the operands, the output, the bias
  hw::Bcast bias_bc = hw::Bcast::kFull;
  hw::DType compute = hw::DType::kF32, out_type = hw::DType::kF32, bias_type = hw::DType::kF32;
  double alpha = 1.0, beta = 1.0;
  hw::UnaryFn activation = hw::UnaryFn::kCopy;    // after the bias (kCopy: none)
  hw::BinaryFn residual_fn = hw::BinaryFn::kAdd;  // the residual added (kAdd) or multiplied (kMul)
  double macs_per_cycle = 1.0;                    // one core's PT rate in this compute type
};

// DMA tags: the A and B loads of buffer i (up to 3 buffers) are tags 2i and 2i + 1; stores have
// their own.
inline constexpr uint32_t kMatmulTagStore = 6;
constexpr uint32_t matmul_tag_a(uint32_t i) {
  return 2u * i;
}
constexpr uint32_t matmul_tag_b(uint32_t i) {
  return 2u * i + 1;
}

/// Scratchpad addresses of the epilogue: the fp32 accumulator, the raw and fp32 bias tiles, and
/// the output tile in the output type.
struct EpilogueLx {
  uint32_t acc = 0, bias_raw = 0, bias_f32 = 0, out = 0;
  uint32_t residual = 0;  // the residual's tile, in the output type
};

/// Where the residual's block of this epilogue is: a register holding a device address and an
/// offset from it; the callback may emit instructions (the bias's address register is free).
/// The residual is no operand of the nest (a nest walks four): its block is where the output's is,
/// moved from the output's base to the residual's (emit_residual_address).
using ResidualAt = std::function<std::pair<uint32_t, uint64_t>(emit::Builder&)>;

/// r[reg], an address in the output, becomes the same place in the residual (r[scratch] is
/// clobbered).
void emit_residual_address(emit::Builder& bld, const MatmulProblem& p, uint32_t reg, uint32_t scratch);

/// Scratchpad bytes of an m x n block's epilogue tiles beyond the accumulator: the output, the
/// bias's (raw and fp32) and the residual's (in the output type).
uint64_t epilogue_bytes(const MatmulProblem& p, uint64_t m, uint64_t n);

/// The epilogue of an mt x nt block: in fp32 alpha, then beta times the bias (its block at device
/// r[bias_reg] + bias_offset); rounded into the output tile once the previous block's store has
/// stopped reading it; then the activation and the residual, each rounding into the output type
/// as the unfused ops would.
void emit_matmul_epilogue(emit::Builder& bld, const MatmulProblem& p, const EpilogueLx& lx, uint32_t mt, uint32_t nt,
                          uint32_t bias_reg, uint64_t bias_offset, const ResidualAt& residual_at);

/// A kernel over the problem's operands with a level per batch dim of more than one (outermost
/// first); add_matmul_level appends a level (strides in elements of a, b, the output and the bias).
Kernel matmul_kernel(const MatmulProblem& p);
void add_matmul_level(Kernel& k, const MatmulProblem& p, uint64_t count, int64_t sa, int64_t sb, int64_t so,
                      int64_t sbias);

/// The resident-B plan when it fits the target and its estimate beats `best` (cycles): each core
/// owns an R x C block of the output, keeps its K x C panel of B in the scratchpad once loaded, and
/// walks its rows in strips that shrink towards the end, so the last stores are short.
std::optional<Kernel> lower_matmul_resident(const MatmulProblem& p, const Target& t, double best);

}  // namespace spyre::compiler::lower
