// The compiler's driver: lowers each op of a graph by family, picks the cores, and emits one SPMD
// program in which the ops run in order with a barrier between them.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "lower/lower.h"
#include "spyre/compiler/emit.h"
#include "spyre/compiler/errors.h"
#include "spyre/compiler/program.h"

namespace spyre::compiler {

Program compile(const ir::Graph& g, const Target& t) {
  for (const ir::View& v : g.views) {
    if (v.arg >= g.num_args || v.sizes.size() != v.strides.size() || v.dtype >= hw::DType::kCount) {
      throw Malformed(fmt::format("compiler: malformed view (arg {} of {}, {} sizes, {} strides)", v.arg, g.num_args,
                                  v.sizes.size(), v.strides.size()));
    }
  }
  std::vector<lower::Kernel> kernels;
  std::vector<size_t> first_kernel;  // of each op
  for (const ir::Op& op : g.ops) {
    first_kernel.push_back(kernels.size());
    std::optional<lower::Kernel> k;
    switch (op.family) {
      case ir::Op::Family::kPointwise:
        for (lower::Kernel& part : lower::lower_pointwise(g, op.pointwise, t)) kernels.push_back(std::move(part));
        break;
      case ir::Op::Family::kReduce:
        k = lower::lower_reduce(g, op.reduce, t);
        break;
      case ir::Op::Family::kMatmul:
        k = lower::lower_matmul(g, op.matmul, t);
        break;
      case ir::Op::Family::kIndex:
        k = lower::lower_index(g, op.index, t);
        break;
      case ir::Op::Family::kScan:
        k = lower::lower_scan(g, op.scan, t);
        break;
      case ir::Op::Family::kSort:
        k = lower::lower_sort(g, op.sort, t);
        break;
      case ir::Op::Family::kAttention:
        k = lower::lower_attention(g, op.attention, t);
        break;
    }
    if (k) kernels.push_back(std::move(*k));
  }
  // As many cores as the widest kernel can use; a replicated one takes all of them.
  uint64_t most = 1;
  for (const lower::Kernel& k : kernels) {
    most = std::max(most, k.nest.replicated ? uint64_t{t.cores} : schedule::nest_units(k.nest));
  }
  const auto cores = static_cast<uint32_t>(std::min<uint64_t>(std::max<uint32_t>(t.cores, 1), most));
  emit::Builder b;
  ProgramNotes notes;
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (i > 0) b.emit(emit::instr(hw::Op::kBarrier));
    for (size_t op = 0; op < g.ops.size(); ++op) {
      if (first_kernel[op] == i) notes.sections.emplace_back(b.pos(), fmt::format("op {}: {}", op, g.op_name(op)));
    }
    schedule::emit_nest(b, kernels[i].nest, cores, kernels[i].body);
  }
  // Each argument slot by the first view of it; an op's output makes it "out".
  std::vector<bool> written(g.views.size());
  for (const ir::Op& op : g.ops) {
    const uint32_t out = op.family == ir::Op::Family::kPointwise ? op.pointwise.out
                         : op.family == ir::Op::Family::kReduce  ? op.reduce.out
                         : op.family == ir::Op::Family::kMatmul  ? op.matmul.out
                         : op.family == ir::Op::Family::kScan    ? op.scan.out
                         : op.family == ir::Op::Family::kSort    ? op.sort.values
                         : op.family == ir::Op::Family::kIndex
                             ? (op.index.kind == ir::Index::Kind::kGather ? op.index.rows : op.index.table)
                             : op.attention.out;
    written[out] = true;
  }
  notes.args.assign(g.num_args, "");
  for (size_t v = 0; v < g.views.size(); ++v) {
    std::string& slot = notes.args[g.views[v].arg];
    if (slot.empty()) slot = fmt::format("{} {}", written[v] ? "out" : "in", g.views[v].describe());
  }
  Program p = assemble_spmd(g.name(), b.finish(), cores, g.num_args);
  p.notes = std::move(notes);
  return p;
}

Program compile_matmul(const MatmulSpec& s, const Target& t) {
  if (s.m == 0 || s.k == 0 || s.n == 0) {
    throw Malformed(fmt::format("compile_matmul: empty shape {}x{}x{}", s.m, s.k, s.n));
  }
  if (s.lda < s.k || s.ldb < s.n || s.ldc < s.n) {
    throw Malformed(fmt::format("compile_matmul: row strides lda={} ldb={} ldc={} too small for {}x{}x{}", s.lda, s.ldb,
                                s.ldc, s.m, s.k, s.n));
  }
  ir::Graph g;
  g.num_args = 3;
  const auto view = [&](uint32_t arg, int64_t rows, int64_t cols, uint64_t ld, hw::DType t) {
    return g.add_view(ir::View{arg, 0, {rows, cols}, {static_cast<int64_t>(ld), 1}, t});
  };
  ir::Op op;
  op.family = ir::Op::Family::kMatmul;
  op.matmul.a = view(0, s.m, s.k, s.lda, s.in);
  op.matmul.b = view(1, s.k, s.n, s.ldb, s.in);
  op.matmul.out = view(2, s.m, s.n, s.ldc, s.out);
  op.matmul.compute = s.in;
  g.ops.push_back(op);
  return compile(g, t);
}

}  // namespace spyre::compiler
