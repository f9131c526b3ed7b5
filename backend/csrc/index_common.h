// What the indexing kernels share (index_ops.cpp, advanced_index_ops.cpp): one IR index op, and
// finishing a call that may have fallen back.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <utility>
#include <vector>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend::indexing {

/// Runs `l` (or the CPU fallback, which finishes `c` itself) and finishes `c` with `result`.
inline void finish(BoxedCall& c, Launch& l, const at::Tensor& result) {
  if (run_or_fall_back(l, c)) c.finish(result);
}

/// Adds an IR index op (GATHER, SCATTER, SCATTER_ADD, ...) of rows `index` of view `table` to `l`.
inline uint32_t index_op(Launch& l, ir::Index::Kind kind, uint32_t table, uint32_t index, uint32_t rows) {
  ir::Index x;
  x.kind = kind;
  x.table = table;
  x.index = index;
  x.rows = rows;
  ir::Op op;
  op.family = ir::Op::Family::kIndex;
  op.index = x;
  l.graph().ops.push_back(op);
  return rows;
}

// Indices as int64 on the device: int32 ones are converted by a copy kernel (into a scratch).
inline at::Tensor int64_indices(Launch& l, const at::Tensor& idx) {
  TORCH_CHECK(idx.scalar_type() == at::kLong || idx.scalar_type() == at::kInt,
              "index must be an int64 or int32 tensor, got ", idx.scalar_type());
  if (idx.scalar_type() == at::kLong) return idx;
  const at::Tensor wide = l.scratch(idx.sizes(), idx, at::kLong);
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kCopy;
  p.compute = hw::DType::kI64;
  p.inputs = {ir::Operand::of(l.view(idx))};
  p.out = l.view(wide);
  l.add(p);
  return wide;
}

// Views of `t` as [dims before `dim`..., size(dim), the rest flattened] when the rest is contiguous;
// nullopt otherwise (the caller packs it first).
inline std::optional<std::pair<std::vector<int64_t>, std::vector<int64_t>>> rows_view(const at::Tensor& t,
                                                                                      int64_t dim) {
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().begin() + dim + 1);
  std::vector<int64_t> strides(t.strides().begin(), t.strides().begin() + dim + 1);
  int64_t inner = 1, expect = 1;
  for (int64_t d = t.dim(); d-- > dim + 1;) {
    if (t.size(d) != 1 && t.stride(d) != expect && t.numel() > 0) return std::nullopt;
    expect *= t.size(d);
    inner *= t.size(d);
  }
  sizes.push_back(inner);
  strides.push_back(1);
  return std::make_pair(sizes, strides);
}

}  // namespace spyre::backend::indexing
