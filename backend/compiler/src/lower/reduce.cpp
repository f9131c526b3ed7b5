// Reduction family: sum, prod, max, min, argmax and argmin over any set of dims. The input is
// walked as [kept dims..., reduced dims...]; the reduced dims must merge into one (the front door
// makes the input contiguous first when they do not). A tile is a block of kept rows with their
// whole reduced extent: loaded directly when the reduced dim is contiguous, loaded along the kept
// dim and transposed in the scratchpad when that one is, or element by element otherwise.
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "layout.h"
#include "lower.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::lower {
namespace {

using hw::DType;
using schedule::kBufferReg;
using schedule::operand_reg;

constexpr uint32_t kLoadTag = 0;
constexpr uint32_t kStoreTag = 1;

enum class Move : uint8_t { kRows, kTransposed, kElems };

// The iteration space of a reduction: kept dims first, then reduced ones (the output does not move
// along those), simplified; a trailing reduced dim of 1 when nothing is left to reduce.
Space reduce_space(const ir::View& in, const ir::View& out, const std::vector<bool>& reduced) {
  Space space;
  space.strides.resize(2);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t d = 0; d < in.sizes.size(); ++d) {
      if (reduced[d] != (pass == 1)) continue;
      space.sizes.push_back(in.sizes[d]);
      space.strides[0].push_back(in.strides[d]);
      space.strides[1].push_back(reduced[d] ? 0 : out.strides[d]);
    }
  }
  space = simplify(space);
  if (space.sizes.empty() || space.strides[1].back() != 0) {  // nothing left to reduce: one element each
    space.sizes.push_back(1);
    space.strides[0].push_back(1);
    space.strides[1].push_back(0);
  }
  return space;
}

bool merged(const Space& space) {
  const size_t n = space.sizes.size();
  return n < 2 || space.strides[1][n - 2] != 0;
}

}  // namespace

bool reduce_dims_merge(const ir::View& in, const ir::View& out, const std::vector<int64_t>& dims) {
  std::vector<bool> reduced(in.sizes.size(), false);
  for (int64_t d : dims) {
    if (d >= 0 && static_cast<size_t>(d) < reduced.size()) reduced[static_cast<size_t>(d)] = true;
  }
  if (out.strides.size() != in.sizes.size()) return true;  // malformed: lower_reduce says why
  return merged(reduce_space(in, out, reduced));
}

std::optional<Kernel> lower_reduce(const ir::Graph& g, const ir::Reduce& r, const Target& t) {
  const ir::View& in = g.views.at(r.in);
  const ir::View& out = g.views.at(r.out);
  const size_t nd = in.sizes.size();
  if (out.sizes.size() != nd) throw Malformed("compiler: reduce output must keep the reduced dims");
  std::vector<bool> reduced(nd, false);
  for (int64_t d : r.dims) {
    if (d < 0 || static_cast<size_t>(d) >= nd) throw Malformed(fmt::format("compiler: reduce dim {}", d));
    reduced[static_cast<size_t>(d)] = true;
  }
  for (size_t d = 0; d < nd; ++d) {
    if (out.sizes[d] != (reduced[d] ? 1 : in.sizes[d])) {
      throw Malformed("compiler: reduce output shape does not match the input");
    }
  }
  if (out.numel() == 0) return std::nullopt;
  if (in.numel() == 0 && (r.fn != hw::ReduceFn::kSum && r.fn != hw::ReduceFn::kProd)) {
    throw Unsupported("compiler: max, min and arg reductions of an empty dim have no identity");
  }
  if (in.numel() == 0) throw Unsupported("compiler: empty reductions are fills");
  const bool arg = r.fn == hw::ReduceFn::kArgMax || r.fn == hw::ReduceFn::kArgMin;
  const DType result = arg ? DType::kI64 : r.compute;

  const Space space = reduce_space(in, out, reduced);
  const size_t n = space.sizes.size();
  if (!merged(space)) {
    throw Unsupported("compiler: the reduced dims do not merge into one; make the input contiguous");
  }
  const int64_t red = space.sizes[n - 1], sr = space.strides[0][n - 1];
  const int64_t rows_all = n >= 2 ? space.sizes[n - 2] : 1;
  const int64_t sk = n >= 2 ? space.strides[0][n - 2] : 0, ok = n >= 2 ? space.strides[1][n - 2] : 0;
  const Move move = (sr == 1 || red == 1) ? Move::kRows : (sk == 1 && rows_all > 1 ? Move::kTransposed : Move::kElems);

  const uint64_t es_i = hw::dtype_size(in.dtype), es_c = hw::dtype_size(r.compute), es_r = hw::dtype_size(result),
                 es_o = hw::dtype_size(out.dtype);
  // A tile is tr kept rows by tc reduced columns. When the reduced extent does not fit in one tile,
  // it is split into column tiles that one core runs in order, accumulating into a fixed region.
  const uint64_t half = t.lx_bytes / 2, slack = 1024;
  const uint64_t per_elem = es_i + 2 * es_c;
  const uint64_t per_row = es_r + es_c + es_o;
  if (t.lx_bytes < 8 * slack) throw Unsupported("compiler: scratchpad too small for a reduction");
  const uint64_t budget = half - slack;  // bytes of one tile's buffers
  int64_t tr = 1, tc = red;
  if (static_cast<uint64_t>(red) * per_elem + per_row <= budget) {
    if (move != Move::kElems) {
      tr =
          std::max<int64_t>(1, std::min<int64_t>(rows_all, budget / (static_cast<uint64_t>(red) * per_elem + per_row)));
    }
  } else {
    if (move != Move::kElems) {  // a divisor of the rows, so that only the column level has a tail
      for (int64_t d = std::min<int64_t>(rows_all, 64); d >= 1; --d) {
        if (rows_all % d == 0) {
          tr = d;
          break;
        }
      }
    }
    tc = static_cast<int64_t>((budget - static_cast<uint64_t>(tr) * per_row) / (static_cast<uint64_t>(tr) * per_elem));
    tc = tc >= 64 ? tc / 64 * 64 : tc;
  }
  const uint64_t col_tiles = static_cast<uint64_t>((red + tc - 1) / tc);
  const bool split = col_tiles > 1;

  Kernel k;
  k.nest.operands = {{in.arg, in.offset * static_cast<int64_t>(es_i)},
                     {out.arg, out.offset * static_cast<int64_t>(es_o)}};
  const auto add_level = [&](uint64_t count, int64_t in_step, int64_t out_step) {
    k.nest.levels.push_back({count, {in_step * static_cast<int64_t>(es_i), out_step * static_cast<int64_t>(es_o)}});
  };
  for (size_t d = 0; d + 2 < n; ++d) {
    add_level(static_cast<uint64_t>(space.sizes[d]), space.strides[0][d], space.strides[1][d]);
  }
  const uint64_t row_tiles = static_cast<uint64_t>((rows_all + tr - 1) / tr);
  const int64_t tail_rows = rows_all - static_cast<int64_t>(row_tiles - 1) * tr;
  const int64_t tail_cols = red - static_cast<int64_t>(col_tiles - 1) * tc;
  if (row_tiles > 1) {
    add_level(row_tiles, sk * tr, ok * tr);
    if (tail_rows != tr) k.nest.tail_levels.push_back(static_cast<uint32_t>(k.nest.levels.size()) - 1);
  }
  const auto col_level = static_cast<uint32_t>(k.nest.levels.size());
  if (split) {
    add_level(col_tiles, sr * tc, 0);
    k.nest.tail_levels.push_back(col_level);  // the last column tile stores the result
    k.nest.serial_levels = 1;
  }

  // Scratchpad. A whole-row reduction double-buffers its tiles in two halves (addresses relative
  // to r15). A split one keeps its accumulators in a fixed region and uses one tile buffer after it
  // (no toggling: half_bytes = 0), so every address is absolute and the body uses no base register.
  LxPlan lx;
  const uint64_t tile = static_cast<uint64_t>(tr * tc);
  const uint32_t acc = split ? lx.take(static_cast<uint64_t>(tr) * es_r) : 0;
  const uint32_t best = split ? lx.take(static_cast<uint64_t>(tr) * es_c) : 0;
  k.nest.fixed_bytes = split ? lx.used() : 0;
  const uint32_t raw = lx.take(tile * es_i), conv = lx.take(tile * es_c), trans = lx.take(tile * es_c);
  const uint32_t res = split ? acc : lx.take(static_cast<uint64_t>(tr) * es_r);
  const uint32_t vals = split ? best : lx.take(static_cast<uint64_t>(tr) * es_c);
  const uint32_t outc = lx.take(static_cast<uint64_t>(tr) * es_o);
  k.nest.half_bytes = split ? 0 : half;
  const uint32_t rl = split ? 0 : kBufferReg;
  const DType in_type = in.dtype, compute = r.compute, out_type = out.dtype;
  const hw::ReduceFn fn = r.fn;
  const bool row_tail = !k.nest.tail_levels.empty() && !split;
  k.body = [=](emit::Builder& b, uint32_t tails) {
    const bool tail = tails != 0;
    const auto rows = static_cast<uint32_t>(tail && row_tail ? tail_rows : tr);
    const auto cols = static_cast<uint32_t>(tail && split ? tail_cols : tc);
    switch (move) {
      case Move::kRows:
        b.emit(emit::dma(hw::Op::kLoad, in_type, operand_reg(0), rl, raw, 0, static_cast<uint64_t>(sk) * es_i, rows,
                         static_cast<uint32_t>(cols * es_i), true, kLoadTag));
        break;
      case Move::kTransposed:
        b.emit(emit::dma(hw::Op::kLoad, in_type, operand_reg(0), rl, raw, 0, static_cast<uint64_t>(sr) * es_i, cols,
                         static_cast<uint32_t>(rows * es_i), true, kLoadTag));
        break;
      case Move::kElems:
        b.emit(emit::dma(hw::Op::kLoad, in_type, operand_reg(0), rl, raw, 0, static_cast<uint64_t>(sr) * es_i, cols,
                         static_cast<uint32_t>(es_i), true, kLoadTag));
        break;
    }
    b.emit(emit::wait_tags(1u << kLoadTag));
    uint32_t src = raw;
    if (in_type != compute) {
      b.emit(emit::sfp(hw::Op::kConvert, compute, rl, conv, raw, static_cast<uint64_t>(in_type), rows, cols));
      src = conv;
    }
    if (move == Move::kTransposed) {
      b.emit(emit::sfp(hw::Op::kTranspose, compute, rl, trans, src, 0, cols, rows));
      src = trans;
    }
    // Arg-reductions keep the best values at `vals` and take the tile's first column index from rd.
    const auto reduce = [&](bool accumulate) {
      const bool arg = fn == hw::ReduceFn::kArgMax || fn == hw::ReduceFn::kArgMin;
      hw::Instr i = emit::sfp(hw::Op::kReduce, compute, rl, res, src,
                              static_cast<uint64_t>(fn) | (arg ? uint64_t{vals} << 32 : 0), rows, cols,
                              accumulate ? hw::kReduceAccumulate : 0);
      i.regs = hw::pack_regs(split ? schedule::kBodyReg : 0, rl);
      b.emit(i);
    };
    if (split) {
      b.emit(emit::muli(schedule::kBodyReg, schedule::level_reg(col_level), tc));
      const emit::Builder::Label later = b.label(), joined = b.label();
      b.branch(hw::Cond::kNe, schedule::level_reg(col_level), 0, later);
      reduce(false);
      b.jump(joined);
      b.bind(later);
      reduce(true);
      b.bind(joined);
      if (!tail) return;  // only the last column tile has the result
    } else {
      reduce(false);
    }
    uint32_t final_buf = res;
    if (out_type != result) {
      b.emit(emit::sfp(hw::Op::kConvert, out_type, rl, outc, res, static_cast<uint64_t>(result), 1, rows));
      final_buf = outc;
    }
    b.emit(emit::wait_tags(1u << kStoreTag));
    if (ok == 1 || rows == 1) {
      b.emit(emit::dma(hw::Op::kStore, out_type, operand_reg(1), rl, final_buf, 0, 0, 1,
                       static_cast<uint32_t>(rows * es_o), true, kStoreTag));
    } else {
      b.emit(emit::dma(hw::Op::kStore, out_type, operand_reg(1), rl, final_buf, 0, static_cast<uint64_t>(ok) * es_o,
                       rows, static_cast<uint32_t>(es_o), true, kStoreTag));
    }
    // A split reduction reuses its accumulator for the next rows: let the store drain first.
    if (split) b.emit(emit::wait_tags(1u << kStoreTag));
  };
  return k;
}

}  // namespace spyre::compiler::lower
