// Pointwise family: copies, unary and binary math, select, fma, fill and iota over any strides,
// with broadcasting and type conversion, and expressions of several of them evaluated in one pass
// (an elementwise chain fused: each input is loaded once, each intermediate stays in the
// scratchpad). The iteration space is simplified to as few dims as possible; the innermost dim is
// tiled into columns, the next into rows, the rest are loop levels. Per tile: asynchronous loads of
// every view, conversion to the compute type, one SFP instruction per step, conversion to the
// output type, and an asynchronous store that drains while the next tile runs.
//
// An expression with row reductions (a layer norm, an RMS norm, a softmax written out) keeps the
// output's last dim whole in each tile: a reduction step reduces the tile's rows into one value per
// row, and the steps on such values (and on [rows, 1] inputs) run over one element per row.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "layout.h"
#include "lower.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::lower {
namespace {

using hw::Bcast;
using hw::DType;
using schedule::kBufferReg;
using schedule::operand_reg;

static_assert(kMaxPointwiseInputs + 1 == schedule::kMaxOperands, "a pointwise nest walks its inputs and output");

constexpr uint32_t kLoadTag = 0;
constexpr uint32_t kStoreTag = 1;

// How a view operand covers a rows x cols tile, given its strides along the two inner dims.
enum class Move : uint8_t {
  kBlock,       // rows of contiguous columns
  kRow,         // one contiguous row, repeated down the tile (row stride 0)
  kCol,         // one element per row, repeated across it (column stride 0)
  kScalar,      // one element for the whole tile
  kElems,       // columns `col_stride` apart, one row per tile (the nest then has rows = 1)
  kTransposed,  // contiguous down the tile's columns (a transposed input): loaded as cols x rows
                // along its contiguous dim and transposed in the scratchpad
};

struct Input {
  bool view = false;
  uint32_t slot = 0;  // nest operand index (views only)
  DType dtype = DType::kF32;
  double scalar = 0;
  int64_t row_stride = 0, col_stride = 0;  // elements
  Move move = Move::kBlock;
  uint32_t raw = 0, conv = 0;  // scratchpad: as loaded, and in the compute type (or filled)
  uint32_t block = 0;          // kTransposed: the loaded block transposed back into tile order
};

// Where an operand of a step is in the scratchpad, how it covers the tile, and its type. An
// immediate has imm set (and no address).
struct Value {
  uint32_t addr = 0;
  Bcast bcast = Bcast::kFull;
  DType type = DType::kF32;
  std::optional<uint32_t> imm;
};

Move classify(int64_t row_stride, int64_t col_stride, int64_t rows, int64_t cols) {
  const bool same_row = row_stride == 0 && rows > 1;
  if (col_stride == 0 && cols > 1) return same_row ? Move::kScalar : Move::kCol;
  if (col_stride == 1 || cols == 1) return same_row ? Move::kRow : Move::kBlock;
  return Move::kElems;
}

Bcast bcast_of(Move m) {
  switch (m) {
    case Move::kRow:
      return Bcast::kRow;
    case Move::kCol:
      return Bcast::kCol;
    case Move::kScalar:
      return Bcast::kScalar;
    default:
      return Bcast::kFull;
  }
}

// The instruction immediate for scalar `o` in compute type `t`, when it is exactly representable.
std::optional<uint32_t> immediate(const ir::Operand& o, DType t) {
  if (hw::dtype_is_float(t)) {  // the SFP computes in fp32, so the fp32 value is the one it would use
    const float f = static_cast<float>(o.scalar);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return bits;
  }
  if (!o.integer || *o.integer < INT32_MIN || *o.integer > INT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(static_cast<int32_t>(*o.integer));
}

// FILL's value for `t`: IEEE double bits for float types, the integer itself (two's complement)
// for integer types and bool, so that every int64 fills exactly.
uint64_t fill_bits(double x, const std::optional<int64_t>& exact, DType t) {
  if (hw::dtype_is_float(t)) return emit::double_bits(x);
  if (t == DType::kBool) return exact ? *exact != 0 : x != 0.0;  // 0.5 is true, NaN too (as torch)
  const int64_t v = exact ? *exact : static_cast<int64_t>(std::trunc(std::isfinite(x) ? x : 0.0));
  return static_cast<uint64_t>(v);
}

DType step_type(const ir::Step& st, DType compute) {
  if (st.kind == ir::PointwiseKind::kBinary && hw::binary_is_compare(st.binary)) return DType::kBool;
  if (st.kind == ir::PointwiseKind::kUnary && hw::unary_is_bool(st.unary)) return DType::kBool;
  return compute;
}

size_t arity(ir::PointwiseKind k) {
  switch (k) {
    case ir::PointwiseKind::kFill:
    case ir::PointwiseKind::kIota:
    case ir::PointwiseKind::kRandom:
      return 0;
    case ir::PointwiseKind::kCopy:
    case ir::PointwiseKind::kUnary:
    case ir::PointwiseKind::kReduce:
    case ir::PointwiseKind::kRound:
    case ir::PointwiseKind::kRotateHalf:
      return 1;
    case ir::PointwiseKind::kBinary:
      return 2;
    default:
      return 3;
  }
}

// The most dims an iteration space keeps in one nest: its outer dims are a level each, and the
// row and column tiles two more. A deeper space runs as a kernel per slice of its outermost dim.
constexpr size_t kMaxSpaceDims = schedule::kMaxLevels;
// The most kernels one op is sliced into (16^3: a space of 8 dims of 16 that do not merge).
constexpr size_t kMaxSlices = 4096;

// p over a space of more than kMaxSpaceDims dims: one op per index of the outermost dim, each over
// views of that slice (added to a copy of the graph), lowered in turn.
std::vector<Kernel> lower_slices(const ir::Graph& g, const ir::Pointwise& p, const Target& t,
                                 const std::vector<const ir::View*>& views, const Space& space,
                                 const std::vector<Input>& in) {
  const auto slices = static_cast<uint64_t>(space.sizes[0]);
  std::vector<Kernel> kernels;
  for (uint64_t i = 0; i < slices; ++i) {
    ir::Graph sliced = g;
    const auto slice = [&](size_t slot) {
      const ir::View& v = *views[slot];
      const std::vector<int64_t>& st = space.strides[slot];
      return sliced.add_view(ir::View{v.arg, v.offset + static_cast<int64_t>(i) * st[0],
                                      std::vector<int64_t>(space.sizes.begin() + 1, space.sizes.end()),
                                      std::vector<int64_t>(st.begin() + 1, st.end()), v.dtype});
    };
    ir::Pointwise part = p;
    for (size_t j = 0; j < in.size(); ++j) {
      if (in[j].view) part.inputs[j] = ir::Operand::of(slice(in[j].slot));
    }
    part.out = slice(views.size() - 1);
    for (Kernel& k : lower_pointwise(sliced, part, t)) kernels.push_back(std::move(k));
    if (kernels.size() > kMaxSlices) {
      throw Unsupported(
          fmt::format("compiler: a pointwise op over {} dims that do not merge needs more than {} kernels",
                      space.sizes.size(), kMaxSlices));
    }
  }
  return kernels;
}

}  // namespace

std::vector<Kernel> lower_pointwise(const ir::Graph& g, const ir::Pointwise& p, const Target& t) {
  const std::vector<ir::Step> steps = p.expression();
  for (size_t j = 0; j < steps.size(); ++j) {
    if (steps[j].args.size() != arity(steps[j].kind)) {
      throw Malformed(fmt::format("compiler: pointwise step {} takes {} arguments, got {}", j, arity(steps[j].kind),
                                  steps[j].args.size()));
    }
    for (int32_t a : steps[j].args) {
      if ((a >= 0 && static_cast<size_t>(a) >= p.inputs.size()) || (a < 0 && static_cast<size_t>(-1 - a) >= j)) {
        throw Malformed(fmt::format("compiler: pointwise step {} names a missing argument {}", j, a));
      }
    }
  }
  if (steps.empty()) throw Malformed("compiler: a pointwise op needs a step");
  const ir::View& out = g.views.at(p.out);
  for (int64_t s : out.sizes) {
    if (s == 0) return {};
  }
  // An expression of several instructions keeps fp16 and bf16 intermediates in fp32 and rounds
  // once at the end, as torch's CPU kernels do; a single instruction already computes in fp32.
  const bool several = steps.size() > 1 || steps[0].kind == ir::PointwiseKind::kFma;
  const DType compute = several && (p.compute == DType::kF16 || p.compute == DType::kBF16) ? DType::kF32 : p.compute;
  std::vector<DType> types;
  types.reserve(steps.size());
  for (const ir::Step& st : steps) types.push_back(step_type(st, compute));
  const DType result = types.back();

  // The iteration space: the output's shape, one stride vector per view operand (inputs, then out).
  Space space;
  space.sizes = out.sizes;
  std::vector<Input> in(p.inputs.size());
  std::vector<const ir::View*> views;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const ir::Operand& o = p.inputs[i];
    if (o.kind == ir::Operand::Kind::kScalar) {
      in[i].scalar = o.scalar;
      in[i].dtype = compute;
      continue;
    }
    const ir::View& v = g.views.at(o.view);
    in[i].view = true;
    in[i].slot = static_cast<uint32_t>(views.size());
    in[i].dtype = v.dtype;
    views.push_back(&v);
    space.strides.push_back(broadcast_strides(v, out.sizes));
  }
  const auto out_slot = static_cast<uint32_t>(views.size());
  views.push_back(&out);
  space.strides.push_back(out.strides);
  if (views.size() > schedule::kMaxOperands) {
    throw Unsupported(
        fmt::format("compiler: a pointwise op of {} tensors exceeds {}", views.size(), schedule::kMaxOperands));
  }
  const auto has = [&](ir::PointwiseKind kind) {
    return std::any_of(steps.begin(), steps.end(), [kind](const ir::Step& st) { return st.kind == kind; });
  };
  const bool row_reduce = has(ir::PointwiseKind::kReduce);
  // Row reductions and rotations read whole rows: every tile holds whole rows of the last dim.
  const bool whole_rows = row_reduce || has(ir::PointwiseKind::kRotateHalf);
  if (has(ir::PointwiseKind::kRotateHalf) && (out.sizes.empty() || out.sizes.back() % 2 != 0)) {
    throw Malformed("compiler: rotate_half needs an output whose last dim is even");
  }
  if (whole_rows) {
    for (const ir::Step& st : steps) {
      if (st.kind == ir::PointwiseKind::kReduce &&
          (st.reduce == hw::ReduceFn::kArgMax || st.reduce == hw::ReduceFn::kArgMin ||
           st.reduce >= hw::ReduceFn::kCount)) {
        throw Malformed("compiler: a pointwise row reduction is a sum, product, max or min");
      }
    }
    if (out.sizes.empty()) throw Malformed("compiler: a row reduction needs an output with a last dim");
    // The last dim stays whole and apart: only the dims before it merge.
    Space rows = space;
    rows.sizes.pop_back();
    for (auto& s : rows.strides) s.pop_back();
    rows = simplify(rows);
    rows.sizes.push_back(space.sizes.back());
    for (size_t o = 0; o < rows.strides.size(); ++o) rows.strides[o].push_back(space.strides[o].back());
    space = rows;
  } else {
    space = simplify(space);
  }
  if (space.sizes.empty()) {  // one element
    space.sizes.push_back(1);
    for (auto& s : space.strides) s.push_back(1);
  }
  if (space.sizes.size() > kMaxSpaceDims) return lower_slices(g, p, t, views, space, in);
  const size_t nd = space.sizes.size();
  // Elements are independent, so any dim can be the tile's row dim: when the inner one is short
  // (under 64), take the longest outer one instead, so that a permuted copy such as [b, l, h, d]
  // from [b, h, l, d] moves [l, d] tiles rather than [h, d] slivers. Not when an operand is
  // broadcast along the inner row dim: it would then be loaded once per row instead of once.
  const auto broadcast_rows = [&] {
    return std::any_of(space.strides.begin(), space.strides.end(), [&](const auto& s) { return s[nd - 2] == 0; });
  };
  // Makes dim `d` the tile's row dim (swapping it with the one that was).
  const auto make_rows = [&](size_t d) {
    std::swap(space.sizes[d], space.sizes[nd - 2]);
    for (auto& s : space.strides) std::swap(s[d], s[nd - 2]);
  };
  if (nd >= 3 && space.sizes[nd - 2] < 64 && !broadcast_rows() && !whole_rows) {
    size_t longest = nd - 2;
    for (size_t d = 0; d + 2 < nd; ++d) {
      if (space.sizes[d] > space.sizes[longest]) longest = d;
    }
    make_rows(longest);
  }
  // An input broadcast along an outer dim (a rotary embedding's cos and sin over the heads) is
  // loaded again for every index of that dim. With the tile's rows along that dim instead, it is
  // one row per tile, loaded once; not when that makes tiles of under 512 elements, whose fixed
  // costs outweigh the bytes saved.
  if (nd >= 3 && !broadcast_rows()) {
    size_t best = nd - 2;
    for (size_t d = 0; d + 2 < nd; ++d) {
      const bool reused = std::any_of(in.begin(), in.end(), [&](const Input& x) {
        return x.view && space.strides[x.slot][d] == 0 && space.strides[x.slot][nd - 1] != 0;
      });
      if (reused && space.sizes[d] * space.sizes[nd - 1] >= 512 &&
          (best == nd - 2 || space.sizes[d] > space.sizes[best])) {
        best = d;
      }
    }
    make_rows(best);
  }
  const int64_t cols_all = space.sizes[nd - 1];
  const int64_t rows_all = nd >= 2 ? space.sizes[nd - 2] : 1;
  const auto row_stride = [&](uint32_t slot) { return nd >= 2 ? space.strides[slot][nd - 2] : 0; };
  const auto col_stride = [&](uint32_t slot) { return space.strides[slot][nd - 1]; };
  const Move out_move = classify(row_stride(out_slot), col_stride(out_slot), rows_all, cols_all);
  if (out_move != Move::kBlock && out_move != Move::kElems) {
    throw Unsupported("compiler: the output of a pointwise op overlaps itself (a stride is 0)");
  }
  bool elems = out_move == Move::kElems;
  for (Input& x : in) {
    if (!x.view) continue;
    x.row_stride = row_stride(x.slot);
    x.col_stride = col_stride(x.slot);
    x.move = classify(x.row_stride, x.col_stride, rows_all, cols_all);
    // An input contiguous down the rows (a transpose being copied) moves in blocks along that dim,
    // rather than one element per transfer, when the output itself is written in blocks.
    if (x.move == Move::kElems && x.row_stride == 1 && rows_all > 1 && out_move == Move::kBlock) {
      x.move = Move::kTransposed;
    }
    elems |= x.move == Move::kElems;
  }
  for (const ir::Step& st : steps) {
    if ((st.kind == ir::PointwiseKind::kIota || st.kind == ir::PointwiseKind::kRandom) && nd != 1) {
      throw Malformed("compiler: iota and random need a 1-d output");
    }
    if (st.kind == ir::PointwiseKind::kRound &&
        (compute != DType::kF32 || (st.to != DType::kF16 && st.to != DType::kBF16))) {
      throw Malformed("compiler: a round step takes an fp32 value to fp16 or bf16");
    }
    if (st.kind == ir::PointwiseKind::kRandom &&
        (p.rng_arg < 0 || static_cast<uint32_t>(p.rng_arg) + 1 >= g.num_args || !hw::dtype_is_float(p.compute))) {
      throw Malformed("compiler: random numbers need a float type and a key and counter argument");
    }
  }

  // Tile size: every buffer of one tile must fit in half the scratchpad: per input as loaded and
  // converted, per step its result and an operand conversion, and the converted output.
  const uint64_t es_c = std::max<uint64_t>(hw::dtype_size(compute), 1), es_o = hw::dtype_size(out.dtype);
  // An expression over whole rows (row reductions, rotations) has tiles of few rows, so its steps
  // share buffers: a step's result takes a slot freed by results no later step reads, and every
  // step's argument conversions share three.
  std::vector<uint32_t> slot_of(steps.size());
  uint32_t slots = 0;
  if (whole_rows) {
    std::vector<size_t> last(steps.size());
    for (size_t j = 0; j < steps.size(); ++j) {
      last[j] = j;
      for (int32_t a : steps[j].args) {
        if (a < 0) last[static_cast<size_t>(-1 - a)] = j;
      }
    }
    last.back() = steps.size();  // the result outlives the steps
    std::vector<uint32_t> free;
    std::vector<bool> freed(steps.size(), false);
    for (size_t j = 0; j < steps.size(); ++j) {
      for (size_t i = 0; i < j; ++i) {  // results no step from j on reads (step j's own arguments stay)
        if (!freed[i] && last[i] < j) {
          free.push_back(slot_of[i]);
          freed[i] = true;
        }
      }
      if (free.empty()) {
        slot_of[j] = slots++;
      } else {
        slot_of[j] = free.back();
        free.pop_back();
      }
    }
  }
  uint64_t per_elem = es_o;
  for (const Input& x : in) {
    per_elem += (x.view ? hw::dtype_size(x.dtype) * (x.move == Move::kTransposed ? 2 : 1) : 0) + es_c;
  }
  // Per step its result and a scratch buffer per argument (a row reduction's expression holds only
  // the buffers its steps' arities need: its rows are whole, so its tiles are few rows).
  if (whole_rows) {
    per_elem += (slots + 3) * es_c;
  } else {
    per_elem += steps.size() * 4 * es_c;
  }
  const uint64_t half = t.lx_bytes / 2;
  const uint64_t slack = 128 * (2 * in.size() + 2 * steps.size() + 4);
  if (half <= slack + 64 * per_elem) throw Unsupported("compiler: scratchpad too small for a pointwise tile");
  uint64_t budget = (half - slack) / per_elem;
  if (budget >= 64) budget = budget / 64 * 64;
  // A transposed input moves tc rows of tr elements: keep the tile about square so both are long.
  int64_t widest = static_cast<int64_t>(budget);
  if (!elems && std::any_of(in.begin(), in.end(), [](const Input& x) { return x.move == Move::kTransposed; })) {
    widest = 64;
    while (widest * widest * 4 <= static_cast<int64_t>(budget)) widest *= 2;
  }
  if (whole_rows) {
    if (out_move != Move::kBlock || std::any_of(in.begin(), in.end(), [](const Input& x) {
          return x.view && (x.move == Move::kElems || x.move == Move::kTransposed);
        })) {
      throw Unsupported("compiler: a row reduction's operands must be contiguous along the row (or broadcast)");
    }
    if (static_cast<uint64_t>(cols_all) > budget) {
      throw Unsupported(
          fmt::format("compiler: a row of {} elements does not fit the scratchpad with its steps", cols_all));
    }
    elems = false;
    widest = cols_all;
  }
  const int64_t tc = std::min<int64_t>(cols_all, widest);
  const int64_t tr = elems ? 1 : std::min<int64_t>(rows_all, static_cast<int64_t>(budget) / tc);

  Kernel k;
  k.nest.half_bytes = half;
  for (const ir::View* v : views) {
    k.nest.operands.push_back({v->arg, v->offset * static_cast<int64_t>(hw::dtype_size(v->dtype))});
  }
  const auto add_level = [&](uint64_t count, size_t dim, int64_t step) {
    schedule::Level l;
    l.count = count;
    for (size_t o = 0; o < views.size(); ++o) {
      l.stride_bytes.push_back(space.strides[o][dim] * step * static_cast<int64_t>(hw::dtype_size(views[o]->dtype)));
    }
    k.nest.levels.push_back(std::move(l));
  };
  for (size_t d = 0; d + 2 < nd; ++d) add_level(static_cast<uint64_t>(space.sizes[d]), d, 1);
  const uint64_t row_tiles = static_cast<uint64_t>((rows_all + tr - 1) / tr);
  const uint64_t col_tiles = static_cast<uint64_t>((cols_all + tc - 1) / tc);
  if (nd >= 2 && row_tiles > 1) add_level(row_tiles, nd - 2, tr);
  const int row_level = nd >= 2 && row_tiles > 1 ? static_cast<int>(k.nest.levels.size()) - 1 : -1;
  if (col_tiles > 1) add_level(col_tiles, nd - 1, tc);
  const int col_level = col_tiles > 1 ? static_cast<int>(k.nest.levels.size()) - 1 : -1;
  const int64_t tail_cols = cols_all - static_cast<int64_t>(col_tiles - 1) * tc;
  const int64_t tail_rows = rows_all - static_cast<int64_t>(row_tiles - 1) * tr;
  const bool col_tail = col_level >= 0 && tail_cols != tc;
  const bool row_tail = row_level >= 0 && tail_rows != tr;
  if (col_tail) k.nest.tail_levels.push_back(static_cast<uint32_t>(col_level));
  if (row_tail) k.nest.tail_levels.push_back(static_cast<uint32_t>(row_level));

  // Scratchpad plan of one half, sized for a full tile.
  const uint64_t tile = static_cast<uint64_t>(tr * tc);
  LxPlan lx;
  for (Input& x : in) {
    if (x.view) x.raw = lx.take(tile * hw::dtype_size(x.dtype));
    x.block = x.move == Move::kTransposed ? lx.take(tile * hw::dtype_size(x.dtype)) : x.raw;
    x.conv = lx.take(tile * es_c);
  }
  // Per step: its result, and one scratch buffer per argument (conversions and expansions).
  std::vector<uint32_t> res(steps.size());
  std::vector<std::array<uint32_t, 3>> tmp(steps.size());
  if (whole_rows) {
    std::vector<uint32_t> slot(slots);
    for (uint32_t& a : slot) a = lx.take(tile * es_c);
    const std::array<uint32_t, 3> shared = {lx.take(tile * es_c), lx.take(tile * es_c), lx.take(tile * es_c)};
    for (size_t j = 0; j < steps.size(); ++j) {
      res[j] = slot[slot_of[j]];
      tmp[j] = shared;
    }
  } else {
    for (size_t j = 0; j < steps.size(); ++j) {
      res[j] = lx.take(tile * es_c);
      for (uint32_t& b : tmp[j]) b = lx.take(tile * es_c);
    }
  }
  const uint32_t outc = lx.take(tile * es_o);

  const DType out_type = out.dtype;
  const int64_t out_row = row_stride(out_slot), out_col = col_stride(out_slot);
  const int32_t rng_arg = p.rng_arg;
  k.body = [=](emit::Builder& b, uint32_t tails) {
    const uint32_t col_bit = col_tail ? 1u : 0u, row_bit = row_tail ? (col_tail ? 2u : 1u) : 0u;
    const auto rows = static_cast<uint32_t>((tails & row_bit) ? tail_rows : tr);
    const auto cols = static_cast<uint32_t>((tails & col_bit) ? tail_cols : tc);
    const auto sfp = [&](hw::Op op, DType type, uint32_t dst, uint64_t bf, uint64_t cf, uint32_t r, uint32_t c,
                         uint8_t flags = 0) { b.emit(emit::sfp(op, type, kBufferReg, dst, bf, cf, r, c, flags)); };
    // Loads.
    bool loaded = false;
    for (const Input& v : in) {
      if (!v.view) continue;
      const uint32_t es = hw::dtype_size(v.dtype);
      const uint32_t rd = operand_reg(v.slot);
      const uint64_t rs = static_cast<uint64_t>(v.row_stride) * es;
      switch (v.move) {
        case Move::kBlock:
          b.emit(emit::dma(hw::Op::kLoad, v.dtype, rd, kBufferReg, v.raw, 0, rs, rows, cols * es, true, kLoadTag));
          break;
        case Move::kRow:
          b.emit(emit::dma(hw::Op::kLoad, v.dtype, rd, kBufferReg, v.raw, 0, 0, 1, cols * es, true, kLoadTag));
          break;
        case Move::kCol:
          b.emit(emit::dma(hw::Op::kLoad, v.dtype, rd, kBufferReg, v.raw, 0, rs, rows, es, true, kLoadTag));
          break;
        case Move::kScalar:
          b.emit(emit::dma(hw::Op::kLoad, v.dtype, rd, kBufferReg, v.raw, 0, 0, 1, es, true, kLoadTag));
          break;
        case Move::kElems:
          b.emit(emit::dma(hw::Op::kLoad, v.dtype, rd, kBufferReg, v.raw, 0, static_cast<uint64_t>(v.col_stride) * es,
                           cols, es, true, kLoadTag));
          break;
        case Move::kTransposed:  // tile column c is `rows` contiguous elements at c * col_stride
          b.emit(emit::dma(hw::Op::kLoad, v.dtype, rd, kBufferReg, v.raw, 0, static_cast<uint64_t>(v.col_stride) * es,
                           cols, rows * es, true, kLoadTag));
          break;
      }
      loaded = true;
    }
    if (loaded) b.emit(emit::wait_tags(1u << kLoadTag));
    for (const Input& v : in) {
      if (v.view && v.move == Move::kTransposed) sfp(hw::Op::kTranspose, v.dtype, v.block, v.raw, 0, cols, rows);
    }
    // The inputs as values: views in the compute type (bool ones also as loaded, for masks),
    // constants as immediates where they fit, else filled into their buffer once.
    std::vector<Value> as_compute(in.size()), as_loaded(in.size());
    std::vector<bool> filled(in.size(), false);
    for (size_t i = 0; i < in.size(); ++i) {
      const Input& v = in[i];
      if (!v.view) {
        as_compute[i] = Value{v.conv, Bcast::kScalar, compute, immediate(p.inputs[i], compute)};
        continue;
      }
      const Bcast bc = bcast_of(v.move);
      as_loaded[i] = Value{v.block, bc, v.dtype, std::nullopt};
      if (v.dtype == compute) {
        as_compute[i] = as_loaded[i];
      } else {
        const auto n = static_cast<uint32_t>(hw::bcast_elements(bc, rows, cols));
        sfp(hw::Op::kConvert, compute, v.conv, v.block, static_cast<uint64_t>(v.dtype), 1, n);
        as_compute[i] = Value{v.conv, bc, compute, std::nullopt};
      }
    }
    std::vector<Value> results(steps.size());
    // Argument `k` of step j: in memory (a constant's buffer filled on first use), of type `want`;
    // a conversion goes to the argument's own scratch buffer.
    const auto fetch = [&](size_t j, size_t k, DType want, bool allow_imm) -> Value {
      const int32_t arg = steps[j].args[k];
      const uint32_t scratch = tmp[j][k];
      if (arg < 0) {
        Value v = results[static_cast<size_t>(-1 - arg)];
        if (v.type != want) {  // a bool result used as a number, or a number as a mask
          sfp(hw::Op::kConvert, want, scratch, v.addr, static_cast<uint64_t>(v.type), 1,
              static_cast<uint32_t>(hw::bcast_elements(v.bcast, rows, cols)));
          v = Value{scratch, v.bcast, want, std::nullopt};
        }
        return v;
      }
      const auto i = static_cast<size_t>(arg);
      if (want == DType::kBool && in[i].view && in[i].dtype == DType::kBool) return as_loaded[i];
      Value v = as_compute[i];
      if (!in[i].view) {
        if (allow_imm && v.imm) return v;
        if (!filled[i]) {
          sfp(hw::Op::kFill, compute, in[i].conv, 0, fill_bits(in[i].scalar, p.inputs[i].integer, compute), 1, 1);
          filled[i] = true;
        }
        v.imm.reset();
      }
      if (v.type != want) {
        sfp(hw::Op::kConvert, want, scratch, v.addr, static_cast<uint64_t>(v.type), 1,
            static_cast<uint32_t>(hw::bcast_elements(v.bcast, rows, cols)));
        v = Value{scratch, v.bcast, want, std::nullopt};
      }
      return v;
    };
    // Argument k of step j as a whole tile (the instructions without broadcasts take only those).
    const auto full = [&](size_t j, size_t k, Value v) {
      if (v.bcast == Bcast::kFull && !v.imm) return v;
      sfp(hw::Op::kUnary, v.type, tmp[j][k], v.addr, static_cast<uint64_t>(hw::UnaryFn::kCopy), rows, cols,
          static_cast<uint8_t>(v.bcast));
      return Value{tmp[j][k], Bcast::kFull, v.type, std::nullopt};
    };
    const auto bc = [](const Value& v) { return v.imm ? Bcast::kImm : v.bcast; };
    // In an expression with row reductions, a step whose arguments are all one value per row (or
    // one value) runs over one element per row, and its result is one per row too.
    const auto per_row = [&](std::initializer_list<Value> args) {
      if (!row_reduce) return false;
      bool any = false;
      for (const Value& v : args) {
        if (bc(v) == Bcast::kCol) {
          any = true;
        } else if (bc(v) != Bcast::kScalar && bc(v) != Bcast::kImm) {
          return false;
        }
      }
      return any;
    };
    const auto narrowed = [](const Value& v) { return v.bcast == Bcast::kCol ? Bcast::kFull : v.bcast; };
    for (size_t j = 0; j < steps.size(); ++j) {
      const ir::Step& st = steps[j];
      const DType type = types[j];
      const uint32_t dst = res[j];
      Bcast shape = Bcast::kFull;  // of this step's result
      switch (st.kind) {
        case ir::PointwiseKind::kCopy:
        case ir::PointwiseKind::kUnary: {
          Value x = fetch(j, 0, compute, false);
          const hw::UnaryFn fn = st.kind == ir::PointwiseKind::kCopy ? hw::UnaryFn::kCopy : st.unary;
          const bool one = per_row({x});
          if (one) x.bcast = narrowed(x), shape = Bcast::kCol;
          sfp(hw::Op::kUnary, compute, dst, x.addr, static_cast<uint64_t>(fn), one ? 1 : rows, one ? rows : cols,
              static_cast<uint8_t>(x.bcast));
          break;
        }
        case ir::PointwiseKind::kBinary: {  // one immediate at most: the first argument's if both are
          Value x = fetch(j, 0, compute, true);
          Value y = fetch(j, 1, compute, !x.imm);
          const uint32_t imm = x.imm ? *x.imm : (y.imm ? *y.imm : 0);
          const bool one = per_row({x, y});
          if (one) x.bcast = narrowed(x), y.bcast = narrowed(y), shape = Bcast::kCol;
          sfp(hw::Op::kBinary, compute, dst, emit::pack2(x.addr, y.addr),
              static_cast<uint64_t>(st.binary) | uint64_t{imm} << 32, one ? 1 : rows, one ? rows : cols,
              hw::bcast_flags(bc(x), bc(y)));
          break;
        }
        case ir::PointwiseKind::kRound: {  // to the narrow type in a scratch buffer and back, as stored
          const Value x = fetch(j, 0, compute, false);
          const auto n = static_cast<uint32_t>(hw::bcast_elements(x.bcast, rows, cols));
          sfp(hw::Op::kConvert, st.to, tmp[j][1], x.addr, static_cast<uint64_t>(compute), 1, n);
          sfp(hw::Op::kConvert, compute, dst, tmp[j][1], static_cast<uint64_t>(st.to), 1, n);
          shape = x.bcast;
          break;
        }
        case ir::PointwiseKind::kRotateHalf: {
          // Whole rows of 2h: transposed, the halves are h rows each of the scratch tile; the
          // second half, negated, becomes the first, the first the second; transposed back.
          const Value x = full(j, 0, fetch(j, 0, compute, false));
          const auto half = static_cast<uint32_t>(cols / 2);
          const uint32_t t = tmp[j][1], r = tmp[j][2], half_bytes = half * rows * static_cast<uint32_t>(es_c);
          sfp(hw::Op::kTranspose, compute, t, x.addr, 0, rows, cols);
          sfp(hw::Op::kUnary, compute, r, t + half_bytes, static_cast<uint64_t>(hw::UnaryFn::kNeg), half, rows);
          sfp(hw::Op::kUnary, compute, r + half_bytes, t, static_cast<uint64_t>(hw::UnaryFn::kCopy), half, rows);
          sfp(hw::Op::kTranspose, compute, dst, r, 0, cols, rows);
          break;
        }
        case ir::PointwiseKind::kReduce: {  // over the tile's whole rows: one value per row
          const Value x = full(j, 0, fetch(j, 0, compute, false));
          sfp(hw::Op::kReduce, compute, dst, x.addr, static_cast<uint64_t>(st.reduce), rows, cols);
          shape = Bcast::kCol;
          break;
        }
        case ir::PointwiseKind::kSelect: {
          const Value mask = full(j, 0, fetch(j, 0, DType::kBool, false));
          const Value x = fetch(j, 1, compute, true);
          const Value y = fetch(j, 2, compute, !x.imm);
          const uint32_t imm = x.imm ? *x.imm : (y.imm ? *y.imm : 0);
          sfp(hw::Op::kSelect, compute, dst, emit::pack2(mask.addr, x.addr), y.addr | uint64_t{imm} << 32, rows, cols,
              hw::bcast_flags(bc(x), bc(y)));
          break;
        }
        case ir::PointwiseKind::kFma: {
          const Value a = full(j, 0, fetch(j, 0, compute, false));
          const Value bb = fetch(j, 1, compute, true);
          const Value c = fetch(j, 2, compute, true);
          if (bc(bb) == Bcast::kFull && bc(c) == Bcast::kFull) {
            // Three whole tiles: the SFP's fused multiply-add, rounded once (as CPU's compiled loops).
            sfp(hw::Op::kFma, compute, dst, emit::pack2(a.addr, bb.addr), c.addr, rows, cols);
            break;
          }
          // Else a * b, then + c: two SFP instructions, so that b and c may be broadcast or immediate.
          sfp(hw::Op::kBinary, compute, dst, emit::pack2(a.addr, bb.addr),
              static_cast<uint64_t>(hw::BinaryFn::kMul) | uint64_t{bb.imm.value_or(0)} << 32, rows, cols,
              hw::bcast_flags(Bcast::kFull, bc(bb)));
          sfp(hw::Op::kBinary, compute, dst, emit::pack2(dst, c.addr),
              static_cast<uint64_t>(hw::BinaryFn::kAdd) | uint64_t{c.imm.value_or(0)} << 32, rows, cols,
              hw::bcast_flags(Bcast::kFull, bc(c)));
          break;
        }
        case ir::PointwiseKind::kFill:
          sfp(hw::Op::kFill, compute, dst, 0, fill_bits(st.start, st.start_int, compute), rows, cols);
          break;
        case ir::PointwiseKind::kRandom: {  // key in r7, counter base (+ this tile's first element) in r8
          constexpr uint32_t kKey = 7, kCounter = 8;
          b.emit(emit::arg(kKey, static_cast<uint32_t>(rng_arg)));
          b.emit(emit::arg(kCounter, static_cast<uint32_t>(rng_arg) + 1));
          if (col_level >= 0) {
            b.emit(emit::muli(schedule::kBodyReg, schedule::level_reg(static_cast<uint32_t>(col_level)), tc));
            b.emit(emit::add(kCounter, kCounter, schedule::kBodyReg));
          }
          hw::Instr in = emit::sfp(hw::Op::kRandom, compute, kBufferReg, dst, 0, 0, rows, cols, st.start != 0 ? 1 : 0);
          in.regs = hw::pack_regs(kKey, kBufferReg);
          b.emit(in);
          break;
        }
        case ir::PointwiseKind::kIota: {  // a 1-d output: its column tile gives the first index
          hw::Instr in = emit::sfp(hw::Op::kIota, compute, kBufferReg, dst, emit::double_bits(st.start),
                                   emit::double_bits(st.step), rows, cols);
          if (col_level >= 0) {
            b.emit(emit::muli(schedule::kBodyReg, schedule::level_reg(static_cast<uint32_t>(col_level)), tc));
            in.regs = hw::pack_regs(schedule::kBodyReg, kBufferReg);
          }
          b.emit(in);
          break;
        }
      }
      results[j] = Value{dst, shape, type, std::nullopt};
    }
    uint32_t final_buf = res.back();
    if (results.back().bcast != Bcast::kFull) {  // one value per row, written to each of its elements
      final_buf = full(steps.size() - 1, 0, results.back()).addr;
    }
    if (out_type != result) {
      sfp(hw::Op::kConvert, out_type, outc, final_buf, static_cast<uint64_t>(result), rows, cols);
      final_buf = outc;
    }
    // The previous tile's store drains from the other half; wait for it before queueing this one,
    // so that at most one store per half is in flight.
    b.emit(emit::wait_tags(1u << kStoreTag));
    const uint32_t es = hw::dtype_size(out_type);
    const uint32_t rd = operand_reg(out_slot);
    if (out_move == Move::kElems) {
      b.emit(emit::dma(hw::Op::kStore, out_type, rd, kBufferReg, final_buf, 0, static_cast<uint64_t>(out_col) * es,
                       cols, es, true, kStoreTag));
    } else {
      b.emit(emit::dma(hw::Op::kStore, out_type, rd, kBufferReg, final_buf, 0, static_cast<uint64_t>(out_row) * es,
                       rows, cols * es, true, kStoreTag));
    }
  };
  std::vector<Kernel> kernels;
  kernels.push_back(std::move(k));
  return kernels;
}

}  // namespace spyre::compiler::lower
