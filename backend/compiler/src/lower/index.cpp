// Indexing family: gather and scatter of rows by an index vector (embedding, index_select, gather,
// index_add, scatter, scatter_add and their backwards). Items are tiles of indices (and of columns,
// when a row does not fit a tile), over the batch dims; per tile: load the indices, then one GATHER
// and a store of the rows, or a load of the rows and one SCATTER. The indirect instructions check
// every index against the table's row count, so a bad index faults instead of reading or writing
// outside the table. A float scatter-add or scatter-multiply, or a plain scatter, keeps index
// order for every element (see `ordered` below).
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

constexpr uint32_t kTagIndex = 0, kTagRows = 1, kTagOut = 2;
constexpr uint32_t kLimitReg = schedule::kBodyReg;  // the table's row count, for the bounds check
constexpr uint64_t kMinChunkBytes = 128;            // the narrowest column chunk an ordered scatter gives a core

}  // namespace

std::optional<Kernel> lower_index(const ir::Graph& g, const ir::Index& x, const Target& t) {
  const ir::View& table = g.views.at(x.table);
  const ir::View& index = g.views.at(x.index);
  const ir::View& rows = g.views.at(x.rows);
  if (index.dtype != DType::kI64) throw Malformed("compiler: indices must be int64");
  if (table.dtype != rows.dtype) throw Malformed("compiler: gathered rows must have the table's type");
  const size_t nb = index.sizes.size() - 1;  // batch dims
  if (index.sizes.empty() || table.sizes.size() < nb + 1 || rows.sizes.size() != table.sizes.size()) {
    throw Malformed("compiler: index, table and rows ranks do not agree");
  }
  const int64_t n = index.sizes.back(), R = table.sizes[nb];
  if (rows.sizes[nb] != n) throw Malformed("compiler: rows and index lengths differ");
  // The row: the trailing dims, contiguous in table and rows.
  int64_t C = 1;
  for (size_t d = nb + 1; d < table.sizes.size(); ++d) {
    if (table.sizes[d] != rows.sizes[d]) throw Malformed("compiler: row shapes differ");
    C *= table.sizes[d];
  }
  const auto contiguous_row = [&](const ir::View& v) {
    int64_t expect = 1;
    for (size_t d = v.sizes.size(); d-- > nb + 1;) {
      if (v.sizes[d] != 1 && v.strides[d] != expect) return false;
      expect *= v.sizes[d];
    }
    return true;
  };
  if (!contiguous_row(table) || !contiguous_row(rows)) throw Unsupported("compiler: rows not contiguous");
  if (n == 0 || C == 0) return std::nullopt;
  const std::vector<int64_t> batch(rows.sizes.begin(), rows.sizes.begin() + static_cast<int64_t>(nb));
  for (int64_t s : batch) {
    if (s == 0) return std::nullopt;
  }

  // Tiles: tn indices by tc row elements; buffers of indices and rows in one fixed scratchpad plan.
  const uint64_t es = hw::dtype_size(table.dtype);
  const uint64_t budget = t.lx_bytes / 2 - 1024;
  int64_t tc = std::min<int64_t>(C, static_cast<int64_t>(budget / (2 * es)));
  // A float add or multiply, or a plain scatter, into a row named twice depends on the order of
  // its rows. Then each table element is written by one core only, in index order (CPU's order,
  // so the same bits as CPU and the same on every card): the cores split the row's columns, and
  // the core of a column chunk runs every index tile.
  const bool ordered = x.kind == ir::Index::Kind::kScatter ||
                       (hw::dtype_is_float(table.dtype) &&
                        (x.kind == ir::Index::Kind::kScatterAdd || x.kind == ir::Index::Kind::kScatterMul));
  if (ordered) {
    const int64_t per_core = (C + t.cores - 1) / t.cores;
    tc = std::min(tc, std::max(per_core, static_cast<int64_t>((kMinChunkBytes + es - 1) / es)));
  }
  int64_t tn = std::max<int64_t>(1, std::min<int64_t>(n, static_cast<int64_t>(budget / (8 + 2 * es * tc))));
  tn = std::min<int64_t>(tn, 4096);  // keeps one GATHER's row count bounded

  Kernel k;
  k.nest.operands = {{table.arg, table.offset * static_cast<int64_t>(es)},
                     {index.arg, index.offset * 8},
                     {rows.arg, rows.offset * static_cast<int64_t>(es)}};
  const int64_t s_idx = index.strides.back(), s_rows = rows.strides[nb], s_table = table.strides[nb];
  std::vector<int64_t> bt(nb), bi(nb);
  {
    ir::View lead_t{table.arg,
                    0,
                    {table.sizes.begin(), table.sizes.begin() + static_cast<int64_t>(nb)},
                    {table.strides.begin(), table.strides.begin() + static_cast<int64_t>(nb)},
                    table.dtype};
    ir::View lead_i{index.arg,
                    0,
                    {index.sizes.begin(), index.sizes.end() - 1},
                    {index.strides.begin(), index.strides.end() - 1},
                    index.dtype};
    bt = broadcast_strides(lead_t, batch);
    bi = broadcast_strides(lead_i, batch);
  }
  for (size_t d = 0; d < nb; ++d) {
    if (batch[d] == 1) continue;
    k.nest.levels.push_back(
        {static_cast<uint64_t>(batch[d]),
         {bt[d] * static_cast<int64_t>(es), bi[d] * 8, rows.strides[d] * static_cast<int64_t>(es)}});
  }
  const uint64_t n_tiles = static_cast<uint64_t>((n + tn - 1) / tn), c_tiles = static_cast<uint64_t>((C + tc - 1) / tc);
  const int64_t n_tail = n - static_cast<int64_t>(n_tiles - 1) * tn,
                c_tail = C - static_cast<int64_t>(c_tiles - 1) * tc;
  uint32_t n_bit = 0, c_bit = 0;
  const auto index_tiles = [&] {
    if (n_tiles == 1) return;
    k.nest.levels.push_back({n_tiles, {0, tn * s_idx * 8, tn * s_rows * static_cast<int64_t>(es)}});
    if (n_tail != tn) {
      n_bit = 1u << k.nest.tail_levels.size();
      k.nest.tail_levels.push_back(static_cast<uint32_t>(k.nest.levels.size() - 1));
    }
  };
  const auto column_tiles = [&] {  // sub-rows: the table and the rows move along the row, the indices stay
    if (c_tiles == 1) return;
    k.nest.levels.push_back({c_tiles, {tc * static_cast<int64_t>(es), 0, tc * static_cast<int64_t>(es)}});
    if (c_tail != tc) {
      c_bit = 1u << k.nest.tail_levels.size();
      k.nest.tail_levels.push_back(static_cast<uint32_t>(k.nest.levels.size() - 1));
    }
  };
  if (ordered) {  // the index tiles innermost, run whole by one core
    column_tiles();
    index_tiles();
    k.nest.serial_levels = n_tiles > 1 ? 1 : 0;
  } else {
    index_tiles();
    column_tiles();
  }
  LxPlan lx;
  const uint32_t idx_buf = lx.take(static_cast<uint64_t>(tn) * 8);
  const uint32_t row_buf = lx.take(static_cast<uint64_t>(tn * tc) * es);
  const ir::Index::Kind kind = x.kind;
  const DType type = table.dtype;
  k.body = [=](emit::Builder& b, uint32_t tails) {
    const auto cnt = static_cast<uint32_t>((tails & n_bit) ? n_tail : tn);
    const auto cols = static_cast<uint32_t>((tails & c_bit) ? c_tail : tc);
    const auto row_bytes = static_cast<uint32_t>(cols * es);
    // The previous tile's rows may still be draining from row_buf (gather) or the indices may be
    // in use (scatter): wait for all of this core's transfers before reusing the buffers.
    b.emit(emit::wait_tags(1u << kTagOut));
    if (s_idx == 1) {
      b.emit(emit::dma(hw::Op::kLoad, DType::kI64, operand_reg(1), 0, idx_buf, 0, 0, 1, cnt * 8, true, kTagIndex));
    } else {
      b.emit(emit::dma(hw::Op::kLoad, DType::kI64, operand_reg(1), 0, idx_buf, 0, static_cast<uint64_t>(s_idx) * 8, cnt,
                       8, true, kTagIndex));
    }
    if (kind != ir::Index::Kind::kGather) {
      b.emit(emit::dma(hw::Op::kLoad, type, operand_reg(2), 0, row_buf, 0, static_cast<uint64_t>(s_rows) * es, cnt,
                       row_bytes, true, kTagRows));
    }
    b.emit(emit::li(kLimitReg, static_cast<uint64_t>(R)));
    b.emit(emit::wait_tags(1u << kTagIndex | 1u << kTagRows));
    hw::Instr in = emit::instr(kind == ir::Index::Kind::kGather ? hw::Op::kGather : hw::Op::kScatter);
    in.dtype = type;
    in.regs = hw::pack_regs(operand_reg(0), kLimitReg);
    in.a = row_buf;
    in.c = (static_cast<uint64_t>(s_table) * es) | uint64_t{idx_buf} << 32;
    in.d = cnt;
    in.e = row_bytes;
    if (kind == ir::Index::Kind::kGather) {
      in.flags = hw::dma_flags(true, kTagRows);
      b.emit(in);
      b.emit(emit::wait_tags(1u << kTagRows));
      b.emit(emit::dma(hw::Op::kStore, type, operand_reg(2), 0, row_buf, 0, static_cast<uint64_t>(s_rows) * es, cnt,
                       row_bytes, true, kTagOut));
    } else {
      const uint8_t reduce = kind == ir::Index::Kind::kScatterAdd   ? hw::kScatterAdd
                             : kind == ir::Index::Kind::kScatterMul ? hw::kScatterMul
                             : kind == ir::Index::Kind::kScatterMax ? hw::kScatterMax
                             : kind == ir::Index::Kind::kScatterMin ? hw::kScatterMin
                                                                    : 0;
      in.flags = static_cast<uint8_t>(hw::dma_flags(true, kTagOut) | reduce);
      b.emit(in);
    }
  };
  return k;
}

}  // namespace spyre::compiler::lower
