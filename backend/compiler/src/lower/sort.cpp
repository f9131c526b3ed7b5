// Sort family: each row along the last dim sorted whole in the scratchpad by one SORT. A tile is
// a block of whole rows; a row too long for the scratchpad is not taken (the front door sorts
// it another way).
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "layout.h"
#include "lower.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::lower {
namespace {

using schedule::operand_reg;

constexpr uint32_t kLoadTag = 0, kStoreTag = 1;

}  // namespace

std::optional<Kernel> lower_sort(const ir::Graph& g, const ir::Sort& s, const Target& t) {
  const ir::View& in = g.views.at(s.in);
  const ir::View& values = g.views.at(s.values);
  const ir::View& indices = g.views.at(s.indices);
  if (in.sizes != values.sizes || in.sizes != indices.sizes || in.sizes.empty() || in.dtype != values.dtype ||
      indices.dtype != hw::DType::kI64) {
    throw Malformed("compiler: sort needs in and values of one type and int64 indices of one shape");
  }
  const int64_t n = in.sizes.back();
  for (const ir::View* v : {&in, &values, &indices}) {
    if (v->strides.back() != 1 && n > 1) throw Unsupported("compiler: the sorted dim must be contiguous");
  }
  if (in.numel() == 0) return std::nullopt;
  Space space;
  space.sizes.assign(in.sizes.begin(), in.sizes.end() - 1);
  space.strides = {{in.strides.begin(), in.strides.end() - 1},
                   {values.strides.begin(), values.strides.end() - 1},
                   {indices.strides.begin(), indices.strides.end() - 1}};
  space = simplify(space);
  const size_t nl = space.sizes.size();
  const int64_t rows_all = nl ? space.sizes.back() : 1;

  const uint64_t es = hw::dtype_size(in.dtype);
  const uint64_t per_row = static_cast<uint64_t>(n) * (2 * es + 8);  // the row, its sorted copy, indices
  const uint64_t budget = t.lx_bytes - 2048;
  if (per_row > budget) {
    throw Unsupported(fmt::format("compiler: a sorted row of {} elements exceeds the scratchpad", n));
  }
  const int64_t tr = std::max<int64_t>(1, std::min<int64_t>(rows_all, static_cast<int64_t>(budget / per_row)));

  Kernel k;
  k.nest.operands = {{in.arg, in.offset * static_cast<int64_t>(es)},
                     {values.arg, values.offset * static_cast<int64_t>(es)},
                     {indices.arg, indices.offset * 8}};
  const auto strides = [&](size_t d, int64_t scale) {
    return std::vector<int64_t>{space.strides[0][d] * scale * static_cast<int64_t>(es),
                                space.strides[1][d] * scale * static_cast<int64_t>(es),
                                space.strides[2][d] * scale * 8};
  };
  for (size_t d = 0; d + 1 < nl; ++d) k.nest.levels.push_back({static_cast<uint64_t>(space.sizes[d]), strides(d, 1)});
  const uint64_t row_tiles = static_cast<uint64_t>((rows_all + tr - 1) / tr);
  const int64_t tail_rows = rows_all - static_cast<int64_t>(row_tiles - 1) * tr;
  uint32_t row_bit = 0;
  if (row_tiles > 1) {
    k.nest.levels.push_back({row_tiles, strides(nl - 1, tr)});
    if (tail_rows != tr) {
      row_bit = 1u << k.nest.tail_levels.size();
      k.nest.tail_levels.push_back(static_cast<uint32_t>(k.nest.levels.size() - 1));
    }
  }
  const int64_t sr_in = nl ? space.strides[0].back() : 0, sr_val = nl ? space.strides[1].back() : 0,
                sr_idx = nl ? space.strides[2].back() : 0;
  LxPlan lx;
  const uint64_t tile = static_cast<uint64_t>(tr * n);
  const uint32_t idx = lx.take(tile * 8), raw = lx.take(tile * es), sorted = lx.take(tile * es);
  const hw::DType type = in.dtype;
  const bool descending = s.descending;
  k.body = [=](emit::Builder& b, uint32_t tails) {
    const auto rows = static_cast<uint32_t>((tails & row_bit) ? tail_rows : tr);
    const auto cols = static_cast<uint32_t>(n);
    b.emit(emit::dma(hw::Op::kLoad, type, operand_reg(0), 0, raw, 0, static_cast<uint64_t>(sr_in) * es, rows,
                     static_cast<uint32_t>(cols * es), true, kLoadTag));
    b.emit(emit::wait_tags(1u << kLoadTag | 1u << kStoreTag));  // the previous block's stores read sorted, idx
    b.emit(emit::sfp(hw::Op::kSort, type, 0, sorted, raw, idx, rows, cols, descending ? hw::kSortDescending : 0));
    b.emit(emit::dma(hw::Op::kStore, type, operand_reg(1), 0, sorted, 0, static_cast<uint64_t>(sr_val) * es, rows,
                     static_cast<uint32_t>(cols * es), true, kStoreTag));
    b.emit(emit::dma(hw::Op::kStore, hw::DType::kI64, operand_reg(2), 0, idx, 0, static_cast<uint64_t>(sr_idx) * 8,
                     rows, cols * 8, true, kStoreTag));
  };
  return k;
}

}  // namespace spyre::compiler::lower
