// Tiles that talk to tiles, and reads through an index: KTIR's inter_tile_produce and
// inter_tile_reduce, and its indirect access tiles.
//
// The card's cores share device memory, not scratchpads, so a tile-to-tile transfer goes through a
// workspace the launch is given: each producer stores its partial into its own slot, every core
// meets at a BARRIER (after its stores have landed), and each consumer loads its group's partials
// in producer order and folds them into the identity with the reduce op's own region. Every
// consumer of a group folds the same partials in the same order, so all hold the same bits.
//
// An indirect access tile whose first dim is chosen by an index view, `%X[%IDX[%m], %k]`, is a
// GATHER: the index elements are loaded into the scratchpad (as int64) and the rows they name are
// fetched by the DMA engine, which checks every index against the view's first dim.
#include <algorithm>

#include <fmt/format.h>

#include "lower.h"
#include "spyre/compiler/errors.h"

namespace spyre::compiler::ktir {
namespace {

constexpr uint32_t kWorkspaceReg = 13;
constexpr uint32_t kBoundReg = 14;

// The groups a set of tiles forms: for each group id g the set allows (`groups` over g), the ranks
// `tiles(i)[g]` holds, in rank order.
std::vector<std::vector<int64_t>> groups_of(const Set& tiles, const Set* groups, const std::vector<int64_t>& grid,
                                            int64_t count) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t g = 0; g < count; ++g) {
    if (groups && !contains(*groups, {g}, {})) continue;
    std::vector<int64_t> members;
    for (int64_t r = 0; r < count; ++r) {
      std::vector<int64_t> id = {r};
      if (tiles.dims.size() == grid.size() && grid.size() > 1) {
        id.assign(grid.size(), 0);
        int64_t x = r;
        for (size_t d = grid.size(); d-- > 0;) {
          id[d] = x % grid[d];
          x /= grid[d];
        }
      }
      if (contains(tiles, id, {g})) members.push_back(r);
    }
    if (!groups && members.empty()) continue;
    out.push_back(std::move(members));
  }
  return out;
}

// `groups = affine_set<...>` inside a !ktdp.tile_future<...> type, if any.
std::string groups_in(const std::string& type) {
  const size_t at = type.find("groups");
  if (at == std::string::npos) return "";
  const size_t open = type.find("affine_set<", at);
  if (open == std::string::npos) return "";
  int depth = 0;
  for (size_t i = open; i < type.size(); ++i) {
    const char c = type[i], next = i + 1 < type.size() ? type[i + 1] : '\0';
    if ((c == '-' && next == '>') || (c == '>' && next == '=') || (c == '<' && next == '=')) {
      ++i;
    } else if (c == '<') {
      ++depth;
    } else if (c == '>' && --depth == 0) {
      return type.substr(open, i + 1 - open);
    }
  }
  return "";
}

}  // namespace

void Lowering::produce(const Op& o) {
  const Token* tiles = attribute(o, "producer_tiles_per_group", *shared_.module);
  if (!tiles)
    throw Malformed(fmt::format("ktir: line {}: inter_tile_produce without producer_tiles_per_group", o.line));
  const Set producers = parse_set(tiles->text, o.line);
  const Token* future_type = nullptr;
  for (const Token& t : o.tokens) {
    if (t.kind == Token::Kind::kType && t.text.find("tile_future") != std::string::npos) future_type = &t;
  }
  if (!future_type)
    throw Malformed(fmt::format("ktir: line {}: inter_tile_produce without its !ktdp.tile_future type", o.line));
  const std::string gtext = groups_in(future_type->text);
  const Set gset = gtext.empty() ? Set{} : parse_set(gtext, o.line);
  int64_t count = 1;
  for (int64_t g : shared_.grid) count *= g;
  FutureV f;
  f.groups = groups_of(producers, gtext.empty() ? nullptr : &gset, shared_.grid, count);
  int64_t mine = -1;
  for (size_t g = 0; g < f.groups.size(); ++g) {
    if (std::find(f.groups[g].begin(), f.groups[g].end(), rank_) == f.groups[g].end()) continue;
    if (mine >= 0) throw Unsupported(fmt::format("ktir: line {}: a tile that produces for two groups", o.line));
    mine = static_cast<int64_t>(g);
  }
  // The partial's type: the one before '->' (tensor<...>).
  std::string partial_type;
  for (const Token& t : o.tokens) {
    if (t.kind == Token::Kind::kType && t.text.rfind("tensor<", 0) == 0) {
      partial_type = t.text;
      break;
    }
  }
  std::tie(f.shape, f.dtype) = shaped(partial_type.empty() ? future_type->text : partial_type, o.line);
  TensorV proto{0, f.shape, f.dtype};
  const uint64_t slot = (uint64_t{proto.bytes()} + 63) / 64 * 64;
  f.workspace = workspace_;
  workspace_ += slot * static_cast<uint64_t>(count);
  shared_.workspace_bytes = std::max(shared_.workspace_bytes, workspace_);
  if (mine >= 0) {
    if (o.regions.empty()) throw Malformed(fmt::format("ktir: line {}: inter_tile_produce without a body", o.line));
    const std::vector<Value> out = block(o.regions[0].blocks[0], {}, {Value(mine)});
    line_ = o.line;
    const auto* partial = out.size() == 1 ? std::get_if<TensorV>(&out[0]) : nullptr;
    if (!partial || partial->numel() != proto.numel() || partial->dtype != f.dtype) {
      throw Malformed(fmt::format("ktir: line {}: the yielded partial is not a {}", o.line, partial_type));
    }
    emit(emit::arg(kWorkspaceReg, static_cast<uint32_t>(shared_.arguments.size())));
    before_read(partial->addr, partial->bytes());
    emit(emit::dma(hw::Op::kStore, f.dtype, kWorkspaceReg, 0, partial->addr,
                   f.workspace + static_cast<uint64_t>(rank_) * slot, partial->bytes(), 1, partial->bytes(), true, 1));
    pending_.push_back(Pending{partial->addr, partial->addr + partial->bytes(), 1, true});
    shared_.work.store_bytes += partial->bytes();
  }
  define(o, {f});
}

void Lowering::inter_reduce(const Op& o) {
  std::string fut;
  for (const Token& t : o.tokens) {
    if (t.kind == Token::Kind::kValue) {
      fut = t.text;
      break;
    }
  }
  const auto* f = std::get_if<FutureV>(&value(fut, o.line));
  if (!f) throw Malformed(fmt::format("ktir: line {}: inter_tile_reduce of {}, which is no tile future", o.line, fut));
  const FutureV future = *f;
  const Token* tiles = attribute(o, "consumer_tiles_per_group", *shared_.module);
  if (!tiles) throw Malformed(fmt::format("ktir: line {}: inter_tile_reduce without consumer_tiles_per_group", o.line));
  const Set consumers = parse_set(tiles->text, o.line);
  int64_t mine = -1;
  for (size_t g = 0; g < future.groups.size(); ++g) {
    std::vector<int64_t> id = {rank_};
    if (consumers.dims.size() == tile_id_.size() && tile_id_.size() > 1) id = tile_id_;
    if (contains(consumers, id, {static_cast<int64_t>(g)})) mine = static_cast<int64_t>(g);
  }
  // Every partial has landed before anyone reads one.
  uint32_t stores = 0;
  for (const Pending& p : pending_) {
    if (p.store) stores |= 1u << p.tag;
  }
  retire(stores);
  emit(emit::instr(hw::Op::kBarrier));
  const std::vector<std::string> identity = group(o, "identity");
  const auto [shape, dtype] =
      shaped(o.last().is("@region") ? o.tokens[o.tokens.size() - 2].text : o.last().text, o.line);
  if (mine < 0 || identity.size() != 1) {
    define(o, {Value()});  // not a consumer: the result is not this tile's to use
    return;
  }
  TensorV acc = new_tensor(future.shape, future.dtype, o.line);
  const TensorV id = tensor(identity[0], o.line);
  if (id.numel() != acc.numel() || id.dtype != acc.dtype) {
    throw Malformed(fmt::format("ktir: line {}: the identity does not match the partials", o.line));
  }
  copy(id, acc);
  const uint64_t slot = (uint64_t{acc.bytes()} + 63) / 64 * 64;
  emit(emit::arg(kWorkspaceReg, static_cast<uint32_t>(shared_.arguments.size())));
  for (const int64_t p : future.groups[static_cast<size_t>(mine)]) {
    const uint32_t mark = top_;
    TensorV part = new_tensor(future.shape, future.dtype, o.line);
    emit(emit::dma(hw::Op::kLoad, future.dtype, kWorkspaceReg, 0, part.addr,
                   future.workspace + static_cast<uint64_t>(p) * slot, part.bytes(), 1, part.bytes(), false, 0));
    shared_.work.load_bytes += part.bytes();
    if (o.regions.empty()) throw Malformed(fmt::format("ktir: line {}: inter_tile_reduce without a body", o.line));
    const std::vector<Value> out = block(o.regions[0].blocks[0], {}, {Value(acc), Value(part)});
    line_ = o.line;
    const auto* r = out.size() == 1 ? std::get_if<TensorV>(&out[0]) : nullptr;
    if (!r || r->numel() != acc.numel())
      throw Malformed(fmt::format("ktir: line {}: the reduce body yields no partial", o.line));
    copy(*r, acc);
    top_ = mark;
  }
  TensorV result = acc;
  result.shape = shape;
  if (result.numel() != acc.numel() || dtype != acc.dtype) {
    throw Malformed(fmt::format("ktir: line {}: inter_tile_reduce's result type does not hold a partial", o.line));
  }
  define(o, {result});
}

void Lowering::indirect_tile(const Op& o) {
  const std::vector<Token>& t = o.tokens;
  const std::vector<std::string> vars = group(o, "intermediate_variables");
  size_t i = 0;
  if (!after(o, "intermediate_variables", &i)) {
    throw Malformed(
        fmt::format("ktir: line {}: construct_indirect_access_tile without intermediate_variables", o.line));
  }
  while (i < t.size() && !t[i].is(")")) ++i;
  ++i;
  if (i + 1 >= t.size() || t[i].kind != Token::Kind::kValue || !t[i + 1].is("[")) {
    throw Malformed(fmt::format("ktir: line {}: expected '%base[...]' after the intermediate variables", o.line));
  }
  const auto* base = std::get_if<ViewV>(&value(t[i].text, o.line));
  if (!base || base->local)
    throw Unsupported(fmt::format("ktir: line {}: an indirect tile over a scratchpad view", o.line));
  i += 2;
  std::vector<Expr> subs;
  while (i < t.size() && !t[i].is("]")) {
    subs.push_back(parse_expr(t, &i));
    if (i < t.size() && t[i].is(",")) ++i;
  }
  const Token* space = attribute(o, "variables_space_set", *shared_.module);
  if (!space)
    throw Malformed(fmt::format("ktir: line {}: construct_indirect_access_tile without variables_space_set", o.line));
  const auto range = box(parse_set(space->text, o.line), {}, fmt::format("line {}: variables_space_set", o.line));
  if (vars.size() != range.size() || subs.size() != base->sizes.size() || subs.size() != vars.size() ||
      base->sizes.size() != 2 || subs[0].kind != Expr::Kind::kIndexed) {
    throw Unsupported(
        fmt::format("ktir: line {}: an indirect tile other than %X[%IDX[%v0...], %v1 + c] over a "
                    "matrix",
                    o.line));
  }
  // Names: the intermediate variables take their values from `at`; anything else is a known index.
  std::map<std::string, int64_t> at;
  const Lookup lookup = [&](const std::string& n) {
    const auto v = at.find(n);
    return v != at.end() ? v->second : integer(n, o.line);
  };
  const auto with = [&](int64_t v0, int64_t v1) {
    at[vars[0]] = v0;
    at[vars[1]] = v1;
  };
  TileV tile;
  tile.view = *base;
  tile.indirect = true;
  tile.shape = {range[0].second - range[0].first + 1, range[1].second - range[1].first + 1};
  // The direct dim: v1 + c, the same for every v0.
  with(range[0].first, range[1].first);
  const int64_t col0 = eval(subs[1], lookup);
  with(range[0].first, range[1].first + 1);
  if (tile.shape[1] > 1 && eval(subs[1], lookup) != col0 + 1) {
    throw Unsupported(fmt::format("ktir: line {}: the direct subscript must step by one with its variable", o.line));
  }
  tile.origin = {0, col0};
  if (col0 < 0 || col0 + tile.shape[1] > base->sizes[1]) {
    throw Malformed(fmt::format("ktir: line {}: the indirect tile's columns leave the view", o.line));
  }
  // The index source: %IDX at v0's subscripts, a unit step along one of its dims.
  const auto* index = std::get_if<ViewV>(&value(subs[0].name, o.line));
  if (!index || index->local) throw Unsupported(fmt::format("ktir: line {}: an index view in the scratchpad", o.line));
  Indirect& rows = tile.rows;
  rows.index = *index;
  for (size_t d = 0; d < subs[0].args.size(); ++d) {
    with(range[0].first, range[1].first);
    const int64_t first = eval(subs[0].args[d], lookup);
    with(range[0].first + 1, range[1].first);
    const int64_t next = eval(subs[0].args[d], lookup);
    rows.origin.push_back(first);
    rows.shape.push_back(tile.shape[0] > 1 && next == first + 1 ? tile.shape[0] : 1);
    if (tile.shape[0] > 1 && next != first && next != first + 1) {
      throw Unsupported(fmt::format("ktir: line {}: the index view's subscript must step by one", o.line));
    }
  }
  int64_t n = 1;
  for (size_t d = 0; d < rows.shape.size(); ++d) {
    n *= rows.shape[d];
    if (rows.origin[d] < 0 || rows.origin[d] + rows.shape[d] > index->sizes[d]) {
      throw Malformed(fmt::format("ktir: line {}: the indices read leave the index view", o.line));
    }
  }
  if (n != tile.shape[0] || rows.shape.size() != index->sizes.size()) {
    throw Unsupported(fmt::format("ktir: line {}: the index view must give one index per selected row", o.line));
  }
  define(o, {tile});
}

void Lowering::gather(const TileV& t, const TensorV& x, int line) {
  const Indirect& rows = t.rows;
  TileV idx_tile;
  idx_tile.view = rows.index;
  idx_tile.origin = rows.origin;
  idx_tile.shape = rows.shape;
  const auto n = static_cast<uint32_t>(t.shape[0]);
  TensorV idx = new_tensor({static_cast<int64_t>(n)}, rows.index.dtype, line);
  transfer(idx_tile, idx, false, line);
  if (idx.dtype != hw::DType::kI64) {
    if (hw::dtype_is_float(idx.dtype) || idx.dtype == hw::DType::kBool) {
      throw Malformed(fmt::format("ktir: line {}: an index view of {}", line, hw::dtype_name(idx.dtype)));
    }
    TensorV wide = new_tensor({static_cast<int64_t>(n)}, hw::DType::kI64, line);
    copy(idx, wide);
    idx = wide;
  }
  before_read(idx.addr, idx.bytes());
  before_write(x.addr, x.bytes());
  const ViewV& v = t.view;
  const uint32_t esz = hw::dtype_size(v.dtype);
  if (v.strides[1] != 1 && t.shape[1] > 1) {
    throw Unsupported(fmt::format("ktir: line {}: gathered rows must be contiguous", line));
  }
  emit(emit::li(kBoundReg, static_cast<uint64_t>(v.sizes[0])));
  const uint32_t tag = load_tag();
  hw::Instr g = emit::instr(hw::Op::kGather);
  g.dtype = v.dtype;
  g.regs = hw::pack_regs(arg_reg(v.base.arg), kBoundReg);
  g.flags = hw::dma_flags(true, tag);
  g.a = x.addr;
  g.b = static_cast<uint64_t>((v.base.elems + t.origin[1] * v.strides[1]) * esz);
  g.c = emit::pack2(static_cast<uint32_t>(v.strides[0] * esz), idx.addr);
  g.d = n;
  g.e = static_cast<uint32_t>(t.shape[1]) * esz;
  emit(g);
  pending_.push_back(Pending{x.addr, x.addr + x.bytes(), tag, false});
  shared_.work.load_bytes += x.bytes();
}

}  // namespace spyre::compiler::ktir
