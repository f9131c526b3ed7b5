// The compiler's driver: lowers each op of a graph by family, picks the cores, and emits one SPMD
// program in which the ops run in order with a barrier between them.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "emit/builder.h"
#include "lower/lower.h"
#include "spyre/compiler/program.h"

namespace spyre::compiler {

Program compile(const ir::Graph& g, const Target& t) {
  for (const ir::View& v : g.views) {
    if (v.arg >= g.num_args || v.sizes.size() != v.strides.size() || v.dtype >= hw::DType::kCount) {
      throw std::invalid_argument(fmt::format("compiler: malformed view (arg {} of {}, {} sizes, {} strides)", v.arg,
                                              g.num_args, v.sizes.size(), v.strides.size()));
    }
  }
  std::vector<lower::Kernel> kernels;
  for (const ir::Op& op : g.ops) {
    std::optional<lower::Kernel> k = op.family == ir::Op::Family::kPointwise
                                         ? lower::lower_pointwise(g, op.pointwise, t)
                                         : lower::lower_reduce(g, op.reduce, t);
    if (k) kernels.push_back(std::move(*k));
  }
  uint64_t most = 1;
  for (const lower::Kernel& k : kernels) most = std::max(most, schedule::nest_units(k.nest));
  const auto cores = static_cast<uint32_t>(std::min<uint64_t>(std::max<uint32_t>(t.cores, 1), most));
  emit::Builder b;
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (i > 0) b.emit(emit::instr(hw::Op::kBarrier));
    schedule::emit_nest(b, kernels[i].nest, cores, kernels[i].body);
  }
  return assemble_spmd(g.name(), b.finish(), cores, g.num_args);
}

}  // namespace spyre::compiler
