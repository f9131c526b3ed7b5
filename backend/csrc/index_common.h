// What the indexing kernels share (index_ops.cpp, advanced_index_ops.cpp): one IR index op, and
// finishing a call that may have fallen back.
#pragma once

#include <ATen/ATen.h>

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

}  // namespace spyre::backend::indexing
