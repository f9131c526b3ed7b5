// Pointwise family: copies, unary and binary math, select, fma, fill and iota over any strides,
// with broadcasting and type conversion. The iteration space is simplified to as few dims as
// possible; the innermost dim is tiled into columns, the next into rows, the rest are loop levels.
// Per tile: asynchronous loads of every view, conversion to the compute type, one SFP instruction,
// conversion to the output type, and an asynchronous store that drains while the next tile runs.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "layout.h"
#include "lower.h"

namespace spyre::compiler::lower {
namespace {

using hw::Bcast;
using hw::DType;
using schedule::kBufferReg;
using schedule::operand_reg;

constexpr uint32_t kLoadTag = 0;
constexpr uint32_t kStoreTag = 1;

// How a view operand covers a rows x cols tile, given its strides along the two inner dims.
enum class Move : uint8_t {
  kBlock,   // rows of contiguous columns
  kRow,     // one contiguous row, repeated down the tile (row stride 0)
  kCol,     // one element per row, repeated across it (column stride 0)
  kScalar,  // one element for the whole tile
  kElems,   // columns `col_stride` apart, one row per tile (the nest then has rows = 1)
};

struct Input {
  bool view = false;
  uint32_t slot = 0;  // nest operand index (views only)
  DType dtype = DType::kF32;
  double scalar = 0;
  int64_t row_stride = 0, col_stride = 0;  // elements
  Move move = Move::kBlock;
  uint32_t raw = 0, conv = 0;  // scratchpad: as loaded, and in the compute type (or expanded)
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

// The instruction immediate for `x` in compute type `t`, when it is exactly representable.
std::optional<uint32_t> immediate(double x, DType t) {
  if (hw::dtype_is_float(t)) {  // the SFP computes in fp32, so the fp32 value is the one it would use
    const float f = static_cast<float>(x);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return bits;
  }
  if (x != std::trunc(x) || x < -2147483648.0 || x > 2147483647.0) return std::nullopt;
  return static_cast<uint32_t>(static_cast<int32_t>(x));
}

DType result_type(const ir::Pointwise& p) {
  if (p.kind == ir::PointwiseKind::kBinary && hw::binary_is_compare(p.binary)) return DType::kBool;
  if (p.kind == ir::PointwiseKind::kUnary && hw::unary_is_bool(p.unary)) return DType::kBool;
  return p.compute;
}

size_t arity(ir::PointwiseKind k) {
  switch (k) {
    case ir::PointwiseKind::kFill:
    case ir::PointwiseKind::kIota:
      return 0;
    case ir::PointwiseKind::kCopy:
    case ir::PointwiseKind::kUnary:
      return 1;
    case ir::PointwiseKind::kBinary:
      return 2;
    default:
      return 3;
  }
}

}  // namespace

std::optional<Kernel> lower_pointwise(const ir::Graph& g, const ir::Pointwise& p, const Target& t) {
  if (p.inputs.size() != arity(p.kind)) {
    throw std::invalid_argument(
        fmt::format("compiler: pointwise op takes {} inputs, got {}", arity(p.kind), p.inputs.size()));
  }
  const ir::View& out = g.views.at(p.out);
  for (int64_t s : out.sizes) {
    if (s == 0) return std::nullopt;
  }
  const DType compute = p.compute;
  const DType result = result_type(p);

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
  if (p.kind == ir::PointwiseKind::kSelect && (!in[0].view || in[0].dtype != DType::kBool)) {
    throw std::invalid_argument("compiler: select needs a bool mask view");
  }
  space = simplify(space);
  if (space.sizes.empty()) {  // one element
    space.sizes.push_back(1);
    for (auto& s : space.strides) s.push_back(1);
  }
  const size_t nd = space.sizes.size();
  const int64_t cols_all = space.sizes[nd - 1];
  const int64_t rows_all = nd >= 2 ? space.sizes[nd - 2] : 1;
  const auto row_stride = [&](uint32_t slot) { return nd >= 2 ? space.strides[slot][nd - 2] : 0; };
  const auto col_stride = [&](uint32_t slot) { return space.strides[slot][nd - 1]; };
  const Move out_move = classify(row_stride(out_slot), col_stride(out_slot), rows_all, cols_all);
  if (out_move != Move::kBlock && out_move != Move::kElems) {
    throw std::invalid_argument("compiler: the output of a pointwise op overlaps itself (a stride is 0)");
  }
  bool elems = out_move == Move::kElems;
  for (Input& x : in) {
    if (!x.view) continue;
    x.row_stride = row_stride(x.slot);
    x.col_stride = col_stride(x.slot);
    x.move = classify(x.row_stride, x.col_stride, rows_all, cols_all);
    elems |= x.move == Move::kElems;
  }
  if (p.kind == ir::PointwiseKind::kIota && nd != 1) throw std::invalid_argument("compiler: iota needs a 1-d output");

  // Tile size: every buffer of one tile must fit in half the scratchpad.
  const uint64_t es_c = hw::dtype_size(compute), es_r = hw::dtype_size(result), es_o = hw::dtype_size(out.dtype);
  uint64_t per_elem = es_r + (result != out.dtype ? es_o : 0);
  for (const Input& x : in) per_elem += (x.view ? hw::dtype_size(x.dtype) : 0) + std::max<uint64_t>(es_c, 1);
  const uint64_t half = t.lx_bytes / 2;
  const uint64_t slack = 128 * (2 * in.size() + 3);
  if (half <= slack + 64 * per_elem) throw std::invalid_argument("compiler: scratchpad too small for a pointwise tile");
  uint64_t budget = (half - slack) / per_elem;
  if (budget >= 64) budget = budget / 64 * 64;
  const int64_t tc = std::min<int64_t>(cols_all, static_cast<int64_t>(budget));
  const int64_t tr = (elems || tc < cols_all) ? 1 : std::min<int64_t>(rows_all, static_cast<int64_t>(budget) / tc);
  if (p.kind == ir::PointwiseKind::kIota && tc != cols_all) {
    throw std::invalid_argument("compiler: iota output larger than one tile");
  }

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
    x.conv = lx.take(tile * std::max<uint64_t>(es_c, 1));
  }
  const uint32_t res = lx.take(tile * es_r);
  const uint32_t outc = lx.take(tile * es_o);

  const ir::Pointwise op = p;
  const DType out_type = out.dtype;
  const int64_t out_row = row_stride(out_slot), out_col = col_stride(out_slot);
  k.body = [=](emit::Builder& b, uint32_t tails) {
    const uint32_t col_bit = col_tail ? 1u : 0u, row_bit = row_tail ? (col_tail ? 2u : 1u) : 0u;
    const auto rows = static_cast<uint32_t>((tails & row_bit) ? tail_rows : tr);
    const auto cols = static_cast<uint32_t>((tails & col_bit) ? tail_cols : tc);
    std::vector<Input> x = in;
    // Loads.
    bool loaded = false;
    for (const Input& v : x) {
      if (!v.view) continue;
      const uint32_t es = hw::dtype_size(v.dtype);
      const uint32_t rd = operand_reg(v.slot);
      const uint64_t rs = static_cast<uint64_t>(v.row_stride) * es;
      switch (v.move) {
        case Move::kBlock:
          b.emit(emit::dma(hw::Op::kLoad, rd, kBufferReg, v.raw, 0, rs, rows, cols * es, true, kLoadTag));
          break;
        case Move::kRow:
          b.emit(emit::dma(hw::Op::kLoad, rd, kBufferReg, v.raw, 0, 0, 1, cols * es, true, kLoadTag));
          break;
        case Move::kCol:
          b.emit(emit::dma(hw::Op::kLoad, rd, kBufferReg, v.raw, 0, rs, rows, es, true, kLoadTag));
          break;
        case Move::kScalar:
          b.emit(emit::dma(hw::Op::kLoad, rd, kBufferReg, v.raw, 0, 0, 1, es, true, kLoadTag));
          break;
        case Move::kElems:
          b.emit(emit::dma(hw::Op::kLoad, rd, kBufferReg, v.raw, 0, static_cast<uint64_t>(v.col_stride) * es, cols, es,
                           true, kLoadTag));
          break;
      }
      loaded = true;
    }
    if (loaded) b.emit(emit::wait_tags(1u << kLoadTag));
    // Conversion to the compute type (the mask of a select stays bool); constants.
    std::optional<uint32_t> imm;  // at most one immediate per instruction
    for (size_t i = 0; i < x.size(); ++i) {
      Input& v = x[i];
      const bool is_mask = op.kind == ir::PointwiseKind::kSelect && i == 0;
      if (!v.view) {
        const std::optional<uint32_t> bits = immediate(v.scalar, compute);
        if (bits && !imm && op.kind != ir::PointwiseKind::kFma) {
          imm = bits;
          v.move = Move::kScalar;
          v.raw = UINT32_MAX;  // marks the immediate
        } else {
          b.emit(emit::sfp(hw::Op::kFill, compute, kBufferReg, v.conv, 0, emit::double_bits(v.scalar), 1, 1));
          v.raw = v.conv;
          v.move = Move::kScalar;
        }
        continue;
      }
      const uint64_t n = hw::bcast_elements(bcast_of(v.move), rows, cols);
      if (!is_mask && v.dtype != compute) {
        b.emit(emit::sfp(hw::Op::kConvert, compute, kBufferReg, v.conv, v.raw, static_cast<uint64_t>(v.dtype), 1,
                         static_cast<uint32_t>(n)));
        v.raw = v.conv;
      }
    }
    const auto bc = [&](const Input& v) { return v.raw == UINT32_MAX ? Bcast::kImm : bcast_of(v.move); };
    const auto addr = [&](const Input& v) { return v.raw == UINT32_MAX ? 0u : v.raw; };
    // Operands that the instruction needs as full tiles are expanded into their conv buffer.
    const auto full = [&](Input& v, DType t) {
      if (bc(v) == Bcast::kFull) return;
      if (bc(v) == Bcast::kImm) {
        float f;
        std::memcpy(&f, &*imm, 4);
        b.emit(emit::sfp(hw::Op::kFill, t, kBufferReg, v.conv, 0,
                         emit::double_bits(hw::dtype_is_float(t) ? f : static_cast<int32_t>(*imm)), rows, cols));
      } else {
        b.emit(emit::sfp(hw::Op::kUnary, t, kBufferReg, v.conv, addr(v), static_cast<uint64_t>(hw::UnaryFn::kCopy),
                         rows, cols, static_cast<uint8_t>(bc(v))));
      }
      v.raw = v.conv;
      v.move = Move::kBlock;
    };
    const uint64_t imm_bits = imm ? uint64_t{*imm} << 32 : 0;
    switch (op.kind) {
      case ir::PointwiseKind::kCopy:
        b.emit(emit::sfp(hw::Op::kUnary, compute, kBufferReg, res, addr(x[0]),
                         static_cast<uint64_t>(hw::UnaryFn::kCopy), rows, cols, static_cast<uint8_t>(bc(x[0]))));
        break;
      case ir::PointwiseKind::kUnary:
        if (bc(x[0]) == Bcast::kImm) full(x[0], compute);
        b.emit(emit::sfp(hw::Op::kUnary, compute, kBufferReg, res, addr(x[0]), static_cast<uint64_t>(op.unary), rows,
                         cols, static_cast<uint8_t>(bc(x[0]))));
        break;
      case ir::PointwiseKind::kBinary:
        b.emit(emit::sfp(hw::Op::kBinary, compute, kBufferReg, res, emit::pack2(addr(x[0]), addr(x[1])),
                         static_cast<uint64_t>(op.binary) | imm_bits, rows, cols, hw::bcast_flags(bc(x[0]), bc(x[1]))));
        break;
      case ir::PointwiseKind::kSelect:
        full(x[0], DType::kBool);
        b.emit(emit::sfp(hw::Op::kSelect, compute, kBufferReg, res, emit::pack2(addr(x[0]), addr(x[1])),
                         addr(x[2]) | imm_bits, rows, cols, hw::bcast_flags(bc(x[1]), bc(x[2]))));
        break;
      case ir::PointwiseKind::kFma:
        for (Input& v : x) full(v, compute);
        b.emit(emit::sfp(hw::Op::kFma, compute, kBufferReg, res, emit::pack2(addr(x[0]), addr(x[1])), addr(x[2]), rows,
                         cols));
        break;
      case ir::PointwiseKind::kFill:
        b.emit(emit::sfp(hw::Op::kFill, compute, kBufferReg, res, 0, emit::double_bits(op.start), rows, cols));
        break;
      case ir::PointwiseKind::kIota:
        b.emit(emit::sfp(hw::Op::kIota, compute, kBufferReg, res, emit::double_bits(op.start),
                         emit::double_bits(op.step), rows, cols));
        break;
    }
    uint32_t final_buf = res;
    if (out_type != result) {
      b.emit(emit::sfp(hw::Op::kConvert, out_type, kBufferReg, outc, res, static_cast<uint64_t>(result), rows, cols));
      final_buf = outc;
    }
    // The previous tile's store drains from the other half; wait for it before queueing this one,
    // so that at most one store per half is in flight.
    b.emit(emit::wait_tags(1u << kStoreTag));
    const uint32_t es = hw::dtype_size(out_type);
    const uint32_t rd = operand_reg(out_slot);
    if (out_move == Move::kElems) {
      b.emit(emit::dma(hw::Op::kStore, rd, kBufferReg, final_buf, 0, static_cast<uint64_t>(out_col) * es, cols, es,
                       true, kStoreTag));
    } else {
      b.emit(emit::dma(hw::Op::kStore, rd, kBufferReg, final_buf, 0, static_cast<uint64_t>(out_row) * es, rows,
                       cols * es, true, kStoreTag));
    }
  };
  return k;
}

}  // namespace spyre::compiler::lower
