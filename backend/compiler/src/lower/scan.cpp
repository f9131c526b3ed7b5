// Scan family: cumulative sums and products along the last dim. Tiles are blocks of rows by
// columns; the column blocks of a row run in order on one core, carrying each row's running value
// in a fixed scratchpad region from one block to the next (SCAN with accumulate).
#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "layout.h"
#include "lower.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::lower {
namespace {

using hw::DType;
using schedule::operand_reg;

constexpr uint32_t kLoadTag = 0, kStoreTag = 1;

}  // namespace

std::optional<Kernel> lower_scan(const ir::Graph& g, const ir::Scan& s, const Target& t) {
  const ir::View& in = g.views.at(s.in);
  const ir::View& out = g.views.at(s.out);
  if (in.sizes != out.sizes || in.sizes.empty()) throw Malformed("compiler: scan in and out differ");
  if (s.compute == DType::kBool) throw Unsupported("compiler: no scan in bool");
  const int64_t n = in.sizes.back();
  if ((in.strides.back() != 1 || out.strides.back() != 1) && n > 1) {
    throw Unsupported("compiler: the scanned dim must be contiguous");
  }
  if (in.numel() == 0) return std::nullopt;
  // The leading dims, simplified; the innermost of them is the tile's row dim.
  Space space;
  space.sizes.assign(in.sizes.begin(), in.sizes.end() - 1);
  space.strides = {{in.strides.begin(), in.strides.end() - 1}, {out.strides.begin(), out.strides.end() - 1}};
  space = simplify(space);
  const size_t nl = space.sizes.size();
  const int64_t rows_all = nl ? space.sizes.back() : 1;
  const int64_t sr_in = nl ? space.strides[0].back() : 0, sr_out = nl ? space.strides[1].back() : 0;

  const uint64_t es_i = hw::dtype_size(in.dtype), es_c = hw::dtype_size(s.compute), es_o = hw::dtype_size(out.dtype);
  const uint64_t per_elem = es_i + 2 * es_c + es_o;
  const uint64_t budget = t.lx_bytes - 2048;
  int64_t tc = std::min<int64_t>(n, static_cast<int64_t>(budget / per_elem));
  if (tc >= 64) tc = tc / 64 * 64;
  const int64_t tr = std::max<int64_t>(
      1, std::min<int64_t>(rows_all, static_cast<int64_t>(budget / (static_cast<uint64_t>(tc) * per_elem + es_c))));

  Kernel k;
  k.nest.operands = {{in.arg, in.offset * static_cast<int64_t>(es_i)},
                     {out.arg, out.offset * static_cast<int64_t>(es_o)}};
  for (size_t d = 0; d + 1 < nl; ++d) {
    k.nest.levels.push_back(
        {static_cast<uint64_t>(space.sizes[d]),
         {space.strides[0][d] * static_cast<int64_t>(es_i), space.strides[1][d] * static_cast<int64_t>(es_o)}});
  }
  const uint64_t row_tiles = static_cast<uint64_t>((rows_all + tr - 1) / tr);
  const uint64_t col_tiles = static_cast<uint64_t>((n + tc - 1) / tc);
  const int64_t tail_rows = rows_all - static_cast<int64_t>(row_tiles - 1) * tr;
  const int64_t tail_cols = n - static_cast<int64_t>(col_tiles - 1) * tc;
  uint32_t row_bit = 0, col_bit = 0;
  if (row_tiles > 1) {
    k.nest.levels.push_back(
        {row_tiles, {sr_in * tr * static_cast<int64_t>(es_i), sr_out * tr * static_cast<int64_t>(es_o)}});
    if (tail_rows != tr) {
      row_bit = 1u << k.nest.tail_levels.size();
      k.nest.tail_levels.push_back(static_cast<uint32_t>(k.nest.levels.size() - 1));
    }
  }
  const auto col_level = static_cast<uint32_t>(k.nest.levels.size());
  if (col_tiles > 1) {  // one row block's column blocks run in order on one core
    k.nest.levels.push_back({col_tiles, {tc * static_cast<int64_t>(es_i), tc * static_cast<int64_t>(es_o)}});
    k.nest.serial_levels = 1;
    if (tail_cols != tc) {
      col_bit = 1u << k.nest.tail_levels.size();
      k.nest.tail_levels.push_back(col_level);
    }
  }
  // One fixed layout with absolute addresses (no halves); the carry last, since SCAN reads a carry
  // address of 0 as "none".
  LxPlan lx;
  const uint64_t tile = static_cast<uint64_t>(tr * tc);
  const uint32_t raw = lx.take(tile * es_i), conv = lx.take(tile * es_c), res = lx.take(tile * es_c);
  const uint32_t outc = lx.take(tile * es_o);
  const uint32_t carry = lx.take(static_cast<uint64_t>(tr) * es_c);
  const bool split = col_tiles > 1;
  const DType in_type = in.dtype, compute = s.compute, out_type = out.dtype;
  const hw::ScanFn fn = s.fn;
  k.body = [=](emit::Builder& b, uint32_t tails) {
    const auto rows = static_cast<uint32_t>((tails & row_bit) ? tail_rows : tr);
    const auto cols = static_cast<uint32_t>((tails & col_bit) ? tail_cols : tc);
    b.emit(emit::dma(hw::Op::kLoad, in_type, operand_reg(0), 0, raw, 0, static_cast<uint64_t>(sr_in) * es_i, rows,
                     static_cast<uint32_t>(cols * es_i), true, kLoadTag));
    b.emit(emit::wait_tags(1u << kLoadTag));
    uint32_t src = raw;
    if (in_type != compute) {
      b.emit(emit::sfp(hw::Op::kConvert, compute, 0, conv, raw, static_cast<uint64_t>(in_type), rows, cols));
      src = conv;
    }
    const auto scan = [&](bool accumulate) {
      b.emit(emit::sfp(hw::Op::kScan, compute, 0, res, src,
                       static_cast<uint64_t>(fn) | (split ? uint64_t{carry} << 32 : 0), rows, cols,
                       accumulate ? hw::kReduceAccumulate : 0));
    };
    if (split) {  // the first column block starts from the identity, the others from the carry
      const emit::Builder::Label later = b.label(), joined = b.label();
      b.branch(hw::Cond::kNe, schedule::level_reg(col_level), 0, later);
      scan(false);
      b.jump(joined);
      b.bind(later);
      scan(true);
      b.bind(joined);
    } else {
      scan(false);
    }
    b.emit(emit::wait_tags(1u << kStoreTag));  // the previous block's store still reads outc
    uint32_t result = res;
    if (out_type != compute) {
      b.emit(emit::sfp(hw::Op::kConvert, out_type, 0, outc, res, static_cast<uint64_t>(compute), rows, cols));
      result = outc;
    }
    b.emit(emit::dma(hw::Op::kStore, out_type, operand_reg(1), 0, result, 0, static_cast<uint64_t>(sr_out) * es_o, rows,
                     static_cast<uint32_t>(cols * es_o), true, kStoreTag));
    b.emit(emit::wait_tags(1u << kStoreTag));  // res is rewritten by the next block
  };
  return k;
}

}  // namespace spyre::compiler::lower
