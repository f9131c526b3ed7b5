// Indexing by an index vector (indirect DMA, every index bounds-checked by the core): index_select,
// embedding (index_select of the weight's rows) and embedding_dense_backward (the gradient's rows
// added at their indices into a zero table). Views are arranged so that the indexed dim is the
// table's row dim and the rest one contiguous run; what is not laid out so is copied first.
#include <optional>

#include <fmt/format.h>

#include "family.h"

namespace spyre::compiler::ops {
namespace {

using Kind = ir::Index::Kind;

void index_op(Builder& b, Kind kind, uint32_t table, uint32_t index, uint32_t rows) {
  ir::Index x;
  x.kind = kind;
  x.table = table;
  x.index = index;
  x.rows = rows;
  b.add(x);
}

// The indices as one contiguous int64 vector: a view of them when they are one, else a copy
// (which converts int32 ones).
uint32_t index_vector(Builder& b, const Call& c, uint32_t v) {
  const ir::View x = b.view(v);
  if (x.dtype != hw::DType::kI64 && x.dtype != hw::DType::kI32) {
    reject(c, fmt::format("indices must be int64 or int32, not {}", hw::dtype_name(x.dtype)));
  }
  const int64_t n = x.numel();
  if (x.dtype == hw::DType::kI64 && is_contiguous(x)) return b.derive(v, {n}, {1});
  const uint32_t t = b.temp(x.sizes, hw::DType::kI64);
  copy(b, v, t);
  return b.derive(t, {n}, {1});
}

// `v` seen as [dims before `dim`..., size(dim), the rest as one run] when that run is contiguous.
std::optional<ir::View> rows_of(const ir::View& v, size_t dim) {
  ir::View r = v;
  r.sizes.assign(v.sizes.begin(), v.sizes.begin() + static_cast<std::ptrdiff_t>(dim) + 1);
  r.strides.assign(v.strides.begin(), v.strides.begin() + static_cast<std::ptrdiff_t>(dim) + 1);
  int64_t inner = 1, expect = 1;
  for (size_t d = v.sizes.size(); d-- > dim + 1;) {
    if (v.sizes[d] != 1 && v.strides[d] != expect) return std::nullopt;
    expect *= v.sizes[d];
    inner *= v.sizes[d];
  }
  r.sizes.push_back(inner);
  r.strides.push_back(1);
  return r;
}

uint32_t as_rows(Builder& b, uint32_t v, size_t dim) {
  const std::optional<ir::View> r = rows_of(b.view(v), dim);
  if (!r) return as_rows(b, packed(b, v), dim);
  return b.derive(v, r->sizes, r->strides);
}

// `v` as [its dims but `dim`..., size(dim), 1]: rows of one element, the other dims in front.
uint32_t as_elements(Builder& b, uint32_t v, size_t dim) {
  const ir::View x = b.view(v);
  std::vector<int64_t> sizes, strides;
  for (size_t d = 0; d < x.sizes.size(); ++d) {
    if (d == dim) continue;
    sizes.push_back(x.sizes[d]);
    strides.push_back(x.strides[d]);
  }
  sizes.insert(sizes.end(), {x.sizes[dim], 1});
  strides.insert(strides.end(), {x.strides[dim], 1});
  return b.derive(v, sizes, strides);
}

// out[..., i, ...] = table[..., index[i], ...] along `dim`, with a 1-d index vector.
void select_rows(Builder& b, uint32_t table, size_t dim, uint32_t index, uint32_t out) {
  const ir::View o = b.view(out);
  if (!rows_of(b.view(table), dim) && o.numel() < b.view(table).numel()) {
    // Rows that are not runs in memory (an unfolded or permuted table): gathered one element a row,
    // so only what is selected moves; packing the table first could take more than the card holds.
    const uint32_t t = as_elements(b, table, dim), r = as_elements(b, out, dim);
    const ir::View tv = b.view(t);
    std::vector<int64_t> is(tv.sizes.begin(), tv.sizes.end() - 2), it(is.size(), 0);
    is.push_back(b.view(index).sizes[0]);
    it.push_back(1);
    index_op(b, Kind::kGather, t, b.derive(index, is, it), r);
    return;
  }
  const bool direct = rows_of(o, dim).has_value();
  const uint32_t target = direct ? out : b.temp(o.sizes, o.dtype);
  const uint32_t t = as_rows(b, table, dim), r = as_rows(b, target, dim);
  const ir::View tv = b.view(t);
  // The index vector is shared by every leading position: stride 0 over those dims.
  std::vector<int64_t> is(tv.sizes.begin(), tv.sizes.end() - 2), it(is.size(), 0);
  is.push_back(b.view(index).sizes[0]);
  it.push_back(1);
  index_op(b, Kind::kGather, t, b.derive(index, is, it), r);
  if (!direct) copy(b, target, out);
}

// A 0-dim view as the 1-element vector the kernels index.
uint32_t one_d(Builder& b, uint32_t v) {
  return b.view(v).sizes.empty() ? b.derive(v, {1}, {1}) : v;
}

// index_select(self, dim, index).
void index_select(Builder& b, const Call& c) {
  const uint32_t out = c.out();
  if (b.view(out).numel() == 0) return;
  const uint32_t self = one_d(b, c.tensor("self"));
  const std::vector<int64_t> dim = wrap_dims({c.integer("dim", 0)}, b.view(self).sizes.size());
  select_rows(b, self, static_cast<size_t>(dim.at(0)), index_vector(b, c, c.tensor("index")), one_d(b, out));
}

// take(self, index): the flattened self at each index (negative ones count from the end), in the
// index's shape.
void take(Builder& b, const Call& c) {
  const uint32_t out = c.out();
  const ir::View o = b.view(out);
  if (o.numel() == 0) return;
  const uint32_t self = packed(b, c.tensor("self"));
  const int64_t n = b.view(self).numel();
  const uint32_t idx = index_vector(b, c, c.tensor("index"));
  const int64_t k = b.view(idx).sizes[0];
  const uint32_t wrapped = b.temp({k}, hw::DType::kI64);
  ir::Expr e(hw::DType::kI64);
  const int32_t i = e.input(ir::Operand::of(idx));
  e.select(e.binary(hw::BinaryFn::kLt, i, e.constant_int(0)), e.binary(hw::BinaryFn::kAdd, i, e.constant_int(n)), i);
  b.add(e.done(wrapped));
  const uint32_t flat = is_contiguous(o) ? b.derive(out, {k}, {1}) : b.temp({k}, o.dtype);
  select_rows(b, b.derive(self, {n}, {1}), 0, wrapped, flat);
  if (!is_contiguous(o)) copy(b, b.derive(flat, o.sizes, contiguous_strides(o.sizes)), out);
}

// embedding(weight, indices): out[*indices.shape, D] = weight[indices].
void embedding(Builder& b, const Call& c) {
  const uint32_t out = c.out(), weight = c.tensor("weight");
  const ir::View w = b.view(weight);
  if (w.sizes.size() != 2) reject(c, "the weight must be 2-d");
  const uint32_t idx = index_vector(b, c, c.tensor("indices"));
  const int64_t n = b.view(idx).sizes[0];
  if (n == 0 || b.view(out).numel() == 0) return;
  const ir::View o = b.view(out);
  const uint32_t rows =
      is_contiguous(o) ? b.derive(out, {n, w.sizes[1]}, {w.sizes[1], 1}) : b.temp({n, w.sizes[1]}, w.dtype);
  select_rows(b, weight, 0, idx, rows);
  if (!is_contiguous(o)) copy(b, b.derive(rows, o.sizes, contiguous_strides(o.sizes)), out);
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq): a
// zero table, then each row of the gradient added at its index (repeated indices add up), the rows
// of padding_idx left out.
void embedding_backward(Builder& b, const Call& c) {
  if (c.flag("scale_grad_by_freq", false)) reject(c, "scale_grad_by_freq is not modelled");
  const uint32_t out = c.out();
  const ir::View o = b.view(out);
  if (o.sizes.size() != 2 || !is_contiguous(o)) reject(c, "the result must be a contiguous [num_weights, D] table");
  fill(b, out, 0);
  const uint32_t idx = index_vector(b, c, c.tensor("indices"));
  const int64_t n = b.view(idx).sizes[0], d = o.sizes[1];
  if (n == 0 || o.numel() == 0) return;
  const uint32_t grad = packed(b, c.tensor("grad_output"));
  uint32_t rows = b.derive(grad, {n, d}, {d, 1});
  if (b.view(grad).numel() != n * d) reject(c, "the gradient's rows do not match the indices");
  const int64_t padding = c.integer("padding_idx", -1);
  if (padding >= 0) {  // rows of the padding index add zero
    const uint32_t is_pad = b.temp({n, 1}, hw::DType::kBool), masked = b.temp({n, d}, b.view(rows).dtype);
    ir::Expr eq(hw::DType::kI64);  // the indices compared exactly
    eq.binary(hw::BinaryFn::kEq, eq.input(ir::Operand::of(b.derive(idx, {n, 1}, {1, 0}))),
              eq.constant(double(padding)));
    b.add(eq.done(is_pad));
    ir::Expr sel(b.view(rows).dtype);
    sel.select(sel.input(ir::Operand::of(is_pad)), sel.constant(0.0), sel.input(ir::Operand::of(rows)));
    b.add(sel.done(masked));
    rows = masked;
  }
  index_op(b, Kind::kScatterAdd, out, idx, rows);
}

// histc(self, bins, min, max): counts of the elements in `bins` equal bins over [min, max]; an
// element equal to max counts in the last bin, one outside the range (or NaN) in none. As CPU: the
// range's ends rounded to the input's type, the bin of each element in range
// floor((x - min) * bins / (max - min)) in fp32, each step rounded to fp16 or bf16 for those types
// (integers exactly, in int64), and a bin past the
// last (x just below max, where the quotient rounds up to bins) is the last; then ones added at
// those bins into a zero int64 table with one more bin for the elements that count nowhere.
void histc(Builder& b, const Call& c) {
  const uint32_t out = c.out();
  const ir::View o = b.view(out);
  const int64_t bins = c.integer("bins", 100);
  const uint32_t x = c.tensor("self");
  const ir::View xv = b.view(x);
  const double lo = rounded_to(c.number("min", 0), xv.dtype), hi = rounded_to(c.number("max", 0), xv.dtype);
  if (bins <= 0 || o.numel() != bins) reject(c, "the result must have one element per bin");
  if (!(lo < hi)) reject(c, "the range comes from the data when min >= max: the front door finds it first");
  fill(b, out, 0);
  const int64_t n = xv.numel();
  if (n == 0) return;
  const bool is_float = hw::dtype_is_float(xv.dtype);
  const hw::DType compute = is_float ? hw::DType::kF32 : hw::DType::kI64;
  const uint32_t flat = b.derive(packed(b, x), {n}, {1});
  const uint32_t at = b.temp({n}, hw::DType::kI64);
  {
    using hw::BinaryFn;
    ir::Expr e(compute);
    const int32_t v = e.input(ir::Operand::of(flat)), mn = e.constant(lo), mx = e.constant(hi);
    // fp16 and bf16 as CPU's kernel computes in them: each step (the bin count too) rounded.
    const bool narrow = xv.dtype == hw::DType::kF16 || xv.dtype == hw::DType::kBF16;
    const auto r = [&](int32_t a) { return narrow ? e.round(xv.dtype, a) : a; };
    const int32_t scaled = r(e.binary(
        BinaryFn::kDiv,
        r(e.binary(BinaryFn::kMul, r(e.binary(BinaryFn::kSub, v, mn)), r(e.constant(static_cast<double>(bins))))),
        r(e.binary(BinaryFn::kSub, mx, mn))));
    const int32_t bin = is_float ? e.unary(hw::UnaryFn::kFloor, scaled) : scaled;
    const int32_t last = e.binary(BinaryFn::kMin, bin, e.constant(static_cast<double>(bins - 1)));
    const int32_t inside =
        e.binary(BinaryFn::kLogicalAnd, e.binary(BinaryFn::kGe, v, mn), e.binary(BinaryFn::kLe, v, mx));
    e.select(inside, last, e.constant(static_cast<double>(bins)));  // NaN compares false: no bin
    b.add(e.done(at));
  }
  // Counted in int64 and converted once: fp32 ones stop adding at 2^24.
  const uint32_t ones = b.temp({n, 1}, hw::DType::kI64), table = b.temp({bins + 1, 1}, hw::DType::kI64);
  fill(b, ones, 1);
  fill(b, table, 0);
  index_op(b, Kind::kScatterAdd, table, at, ones);
  copy(b, b.derive(table, {bins}, {1}), out);
}

}  // namespace

const Table& index_ops() {
  static const Table t = {{"index_select", index_select},
                          {"take", take},
                          {"embedding", embedding},
                          {"embedding_dense_backward", embedding_backward},
                          {"histc", histc}};
  return t;
}

}  // namespace spyre::compiler::ops
