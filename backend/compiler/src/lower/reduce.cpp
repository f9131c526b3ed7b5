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

namespace spyre::compiler::lower {
namespace {

using hw::DType;
using schedule::kBufferReg;
using schedule::operand_reg;

constexpr uint32_t kLoadTag = 0;
constexpr uint32_t kStoreTag = 1;

enum class Move : uint8_t { kRows, kTransposed, kElems };

}  // namespace

std::optional<Kernel> lower_reduce(const ir::Graph& g, const ir::Reduce& r, const Target& t) {
  const ir::View& in = g.views.at(r.in);
  const ir::View& out = g.views.at(r.out);
  const size_t nd = in.sizes.size();
  if (out.sizes.size() != nd) throw std::invalid_argument("compiler: reduce output must keep the reduced dims");
  std::vector<bool> reduced(nd, false);
  for (int64_t d : r.dims) {
    if (d < 0 || static_cast<size_t>(d) >= nd) throw std::invalid_argument(fmt::format("compiler: reduce dim {}", d));
    reduced[static_cast<size_t>(d)] = true;
  }
  for (size_t d = 0; d < nd; ++d) {
    if (out.sizes[d] != (reduced[d] ? 1 : in.sizes[d])) {
      throw std::invalid_argument("compiler: reduce output shape does not match the input");
    }
  }
  if (out.numel() == 0) return std::nullopt;
  if (in.numel() == 0 && (r.fn != hw::ReduceFn::kSum && r.fn != hw::ReduceFn::kProd)) {
    throw std::invalid_argument("compiler: max, min and arg reductions of an empty dim have no identity");
  }
  if (in.numel() == 0) throw std::invalid_argument("compiler: empty reductions are fills");
  const bool arg = r.fn == hw::ReduceFn::kArgMax || r.fn == hw::ReduceFn::kArgMin;
  const DType result = arg ? DType::kI64 : r.compute;

  // Kept dims first, then reduced ones; the output does not move along reduced dims.
  Space space;
  space.strides.resize(2);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t d = 0; d < nd; ++d) {
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
  const size_t n = space.sizes.size();
  if (n >= 2 && space.strides[1][n - 2] == 0) {
    throw std::invalid_argument("compiler: the reduced dims do not merge into one; make the input contiguous");
  }
  const int64_t red = space.sizes[n - 1], sr = space.strides[0][n - 1];
  const int64_t rows_all = n >= 2 ? space.sizes[n - 2] : 1;
  const int64_t sk = n >= 2 ? space.strides[0][n - 2] : 0, ok = n >= 2 ? space.strides[1][n - 2] : 0;
  const Move move = (sr == 1 || red == 1) ? Move::kRows : (sk == 1 && rows_all > 1 ? Move::kTransposed : Move::kElems);

  const uint64_t es_i = hw::dtype_size(in.dtype), es_c = hw::dtype_size(r.compute), es_r = hw::dtype_size(result),
                 es_o = hw::dtype_size(out.dtype);
  const uint64_t half = t.lx_bytes / 2;
  const uint64_t per_elem = es_i + 2 * es_c;
  if (half <= 1024 || static_cast<uint64_t>(red) * per_elem > half - 1024 - 2 * es_r - 2 * es_o) {
    throw std::invalid_argument(
        fmt::format("compiler: a reduction over {} elements does not fit in half the scratchpad", red));
  }
  const uint64_t budget_rows = (half - 1024) / (static_cast<uint64_t>(red) * per_elem + es_r + es_o);
  const int64_t tr = move == Move::kElems ? 1 : std::max<int64_t>(1, std::min<int64_t>(rows_all, budget_rows));

  Kernel k;
  k.half_bytes = half;
  k.nest.operands = {{in.arg, in.offset * static_cast<int64_t>(es_i)},
                     {out.arg, out.offset * static_cast<int64_t>(es_o)}};
  const auto add_level = [&](uint64_t count, int64_t in_step, int64_t out_step) {
    k.nest.levels.push_back({count, {in_step * static_cast<int64_t>(es_i), out_step * static_cast<int64_t>(es_o)}});
  };
  for (size_t d = 0; d + 2 < n; ++d)
    add_level(static_cast<uint64_t>(space.sizes[d]), space.strides[0][d], space.strides[1][d]);
  const uint64_t row_tiles = static_cast<uint64_t>((rows_all + tr - 1) / tr);
  const int64_t tail_rows = rows_all - static_cast<int64_t>(row_tiles - 1) * tr;
  if (row_tiles > 1) {
    add_level(row_tiles, sk * tr, ok * tr);
    if (tail_rows != tr) k.nest.tail_level = static_cast<int>(k.nest.levels.size()) - 1;
  }

  LxPlan lx;
  const uint64_t tile = static_cast<uint64_t>(tr * red);
  const uint32_t raw = lx.take(tile * es_i), conv = lx.take(tile * es_c), trans = lx.take(tile * es_c);
  const uint32_t res = lx.take(static_cast<uint64_t>(tr) * es_r), outc = lx.take(static_cast<uint64_t>(tr) * es_o);
  const DType in_type = in.dtype, compute = r.compute, out_type = out.dtype;
  const hw::ReduceFn fn = r.fn;
  k.body = [=](emit::Builder& b, bool tail) {
    const auto rows = static_cast<uint32_t>(tail ? tail_rows : tr);
    const auto cols = static_cast<uint32_t>(red);
    switch (move) {
      case Move::kRows:
        b.emit(emit::dma(hw::Op::kLoad, operand_reg(0), kBufferReg, raw, 0, static_cast<uint64_t>(sk) * es_i, rows,
                         static_cast<uint32_t>(cols * es_i), true, kLoadTag));
        break;
      case Move::kTransposed:
        b.emit(emit::dma(hw::Op::kLoad, operand_reg(0), kBufferReg, raw, 0, static_cast<uint64_t>(sr) * es_i, cols,
                         static_cast<uint32_t>(rows * es_i), true, kLoadTag));
        break;
      case Move::kElems:
        b.emit(emit::dma(hw::Op::kLoad, operand_reg(0), kBufferReg, raw, 0, static_cast<uint64_t>(sr) * es_i, cols,
                         static_cast<uint32_t>(es_i), true, kLoadTag));
        break;
    }
    b.emit(emit::wait_tags(1u << kLoadTag));
    uint32_t src = raw;
    if (in_type != compute) {
      b.emit(emit::sfp(hw::Op::kConvert, compute, kBufferReg, conv, raw, static_cast<uint64_t>(in_type), rows, cols));
      src = conv;
    }
    if (move == Move::kTransposed) {
      b.emit(emit::sfp(hw::Op::kTranspose, compute, kBufferReg, trans, src, 0, cols, rows));
      src = trans;
    }
    b.emit(emit::sfp(hw::Op::kReduce, compute, kBufferReg, res, src, static_cast<uint64_t>(fn), rows, cols));
    uint32_t final_buf = res;
    if (out_type != result) {
      b.emit(emit::sfp(hw::Op::kConvert, out_type, kBufferReg, outc, res, static_cast<uint64_t>(result), 1, rows));
      final_buf = outc;
    }
    b.emit(emit::wait_tags(1u << kStoreTag));
    if (ok == 1 || rows == 1) {
      b.emit(emit::dma(hw::Op::kStore, operand_reg(1), kBufferReg, final_buf, 0, 0, 1,
                       static_cast<uint32_t>(rows * es_o), true, kStoreTag));
    } else {
      b.emit(emit::dma(hw::Op::kStore, operand_reg(1), kBufferReg, final_buf, 0, static_cast<uint64_t>(ok) * es_o, rows,
                       static_cast<uint32_t>(es_o), true, kStoreTag));
    }
  };
  return k;
}

}  // namespace spyre::compiler::lower
