// One lowering per op family: each turns an IR op into a loop nest of tiles and the body that runs
// per tile (loads, SFP or PT work, stores). compile.cpp schedules the kernels of a graph.
#pragma once

#include <optional>
#include <vector>

#include "../schedule/nest.h"
#include "spyre/compiler/ir.h"
#include "spyre/compiler/program.h"

namespace spyre::compiler::lower {

struct Kernel {
  schedule::Nest nest;
  schedule::Body body;
};

/// nullopt when the op has nothing to do (an empty output). Throws std::invalid_argument naming
/// the problem when the op cannot be lowered (the front door then takes another path).
/// Pointwise ops may take several kernels (a space of more dims than a nest holds runs per slice);
/// none when the output is empty.
std::vector<Kernel> lower_pointwise(const ir::Graph& g, const ir::Pointwise& p, const Target& t);
std::optional<Kernel> lower_reduce(const ir::Graph& g, const ir::Reduce& r, const Target& t);
std::optional<Kernel> lower_matmul(const ir::Graph& g, const ir::Matmul& m, const Target& t);
std::optional<Kernel> lower_index(const ir::Graph& g, const ir::Index& x, const Target& t);
std::optional<Kernel> lower_scan(const ir::Graph& g, const ir::Scan& s, const Target& t);
std::optional<Kernel> lower_sort(const ir::Graph& g, const ir::Sort& s, const Target& t);
std::optional<Kernel> lower_attention(const ir::Graph& g, const ir::Attention& a, const Target& t);

/// True when lower_reduce takes `in` reduced over `dims` into `out` as laid out: the reduced dims
/// merge into one run of the input (the op library copies the input first when they do not).
bool reduce_dims_merge(const ir::View& in, const ir::View& out, const std::vector<int64_t>& dims);

}  // namespace spyre::compiler::lower
