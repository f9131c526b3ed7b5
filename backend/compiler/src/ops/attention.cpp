// Scaled dot-product attention, forward and backward (torch's "overrideable" fused kernels), as IR:
//   forward:  S = scale * Q K^T (then the causal mask: keys after the query's position are -inf, or
//             the additive or boolean bias), m = rowmax(S), P = exp(S - m) / rowsum, O = P V,
//             logsumexp = m + log(rowsum);
//   backward: P = exp(S - logsumexp), dV = P^T dO, dP = dO V^T, D = rowsum(dO * O), dS = P (dP - D),
//             dQ = scale dS K, dK = scale dS^T Q, dbias = dS summed to the bias's shape.
// Grouped-query attention views the H query heads as [Hkv, g] so each meets its key head. Scores,
// probabilities and row statistics are temporaries in fp32 (and in the operands' type for the
// products); a row whose every key is masked gives zero weights and a zero output, as torch's math
// path does.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "family.h"

namespace spyre::compiler::ops {
namespace {

using hw::BinaryFn;
using hw::DType;
using hw::ReduceFn;
using hw::UnaryFn;

constexpr double kInf = std::numeric_limits<double>::infinity();

void matmul(Builder& b, uint32_t x, uint32_t y, uint32_t out, double alpha, DType type) {
  ir::Matmul m;
  m.a = x;
  m.b = y;
  m.out = out;
  m.alpha = alpha;
  m.compute = type;
  b.add(m);
}

// A [B, H, rows, cols] view as [B, H / g, g, rows, cols] (the query heads of each key head
// together), or with `repeat`, a [B, Hkv, rows, cols] one as [B, Hkv, g, rows, cols] with each head
// repeated g times; with `swap`, its last two dims swapped.
uint32_t heads(Builder& b, uint32_t v, int64_t g, bool repeat, bool swap = false) {
  const ir::View t = b.view(v);
  const size_t r = swap ? 3 : 2, c = swap ? 2 : 3;
  const int64_t kv = repeat ? t.sizes[1] : t.sizes[1] / g;
  return b.derive(
      v, {t.sizes[0], kv, g, t.sizes[r], t.sizes[c]},
      {t.strides[0], repeat ? t.strides[1] : g * t.strides[1], repeat ? 0 : t.strides[1], t.strides[r], t.strides[c]});
}

// out [B, Hkv, X, Y] = the sum over each key head's g query heads of `full` [B, H, X, Y].
void sum_groups(Builder& b, uint32_t full, uint32_t out, int64_t g) {
  const ir::View o = b.view(out);
  reduce(b, ReduceFn::kSum, DType::kF32, heads(b, full, g, false),
         b.derive(out, {o.sizes[0], o.sizes[1], 1, o.sizes[2], o.sizes[3]},
                  {o.strides[0], o.strides[1], 0, o.strides[2], o.strides[3]}),
         {2});
}

// View `v` broadcast to `sizes` (aligned at the right, as torch's expand).
uint32_t expand(Builder& b, uint32_t v, const std::vector<int64_t>& sizes) {
  const ir::View t = b.view(v);
  std::vector<int64_t> strides(sizes.size(), 0);
  const size_t pad = sizes.size() - t.sizes.size();
  for (size_t i = 0; i < t.sizes.size(); ++i) {
    strides[pad + i] = t.sizes[i] == 1 && sizes[pad + i] != 1 ? 0 : t.strides[i];
  }
  return b.derive(v, sizes, strides);
}

struct Shape {
  int64_t batch = 0, heads = 0, length = 0, keys = 0, group = 1;
};

Shape shape_of(Builder& b, const Call& c, uint32_t q, uint32_t k, uint32_t v) {
  const ir::View &qv = b.view(q), &kv = b.view(k), &vv = b.view(v);
  if (qv.sizes.size() != 4 || kv.sizes.size() != 4 || vv.sizes.size() != 4) reject(c, "expected 4-d query, key, value");
  if (!hw::dtype_is_float(qv.dtype) || kv.dtype != qv.dtype || vv.dtype != qv.dtype) {
    reject(c, "query, key and value must be of one float type");
  }
  if (kv.sizes[1] == 0 || qv.sizes[1] % kv.sizes[1] != 0) reject(c, "query heads must be a multiple of key heads");
  return {qv.sizes[0], qv.sizes[1], qv.sizes[2], kv.sizes[2], qv.sizes[1] / kv.sizes[1]};
}

// The scores [B, H, L, S] in fp32 (`s`): scale * Q K^T, then the causal mask (key j is masked for
// query i when j > i, counted from the top left as torch does) or the bias (additive, or boolean:
// true keeps the score).
void scores(Builder& b, const Call& c, uint32_t q, uint32_t k, const Shape& sh, double scale, uint32_t s) {
  const DType type = b.view(q).dtype;
  matmul(b, heads(b, q, sh.group, false), heads(b, k, sh.group, true, true), heads(b, s, sh.group, false), scale, type);
  const std::vector<int64_t> full = {sh.batch, sh.heads, sh.length, sh.keys};
  if (c.flag("is_causal", false)) {
    const uint32_t rows = b.temp({sh.length}, DType::kF32), cols = b.temp({sh.keys}, DType::kF32);
    for (const uint32_t t : {rows, cols}) {
      ir::Expr iota(DType::kF32);
      iota.iota(0, 1);
      b.add(iota.done(t));
    }
    ir::Expr e(DType::kF32);
    const int32_t x = e.input(ir::Operand::of(s));
    const int32_t row = e.input(ir::Operand::of(b.derive(rows, full, {0, 0, 1, 0})));
    const int32_t col = e.input(ir::Operand::of(b.derive(cols, full, {0, 0, 0, 1})));
    e.select(e.binary(BinaryFn::kGt, col, row), e.constant(-kInf), x);
    b.add(e.done(s));
  } else if (const Arg* bias = c.get("attn_bias")) {
    if (bias->kind != Arg::Kind::kTensor) reject(c, "the bias is not a tensor");
    const uint32_t bv = expand(b, bias->view, full);
    ir::Expr e(DType::kF32);
    if (b.view(bv).dtype == DType::kBool) {
      e.select(e.input(ir::Operand::of(bv)), e.input(ir::Operand::of(s)), e.constant(-kInf));
    } else {
      e.binary(BinaryFn::kAdd, e.input(ir::Operand::of(s)), e.input(ir::Operand::of(bv)));
    }
    b.add(e.done(s));
  }
}

double scale_of(const Call& c, const ir::View& q) {
  return c.number("scale", 1.0 / std::sqrt(static_cast<double>(q.sizes[3])));
}

void check(const Call& c) {
  if (c.number("dropout_p", 0) != 0) reject(c, "dropout is not modelled");
  if (c.flag("is_causal", false) && c.get("attn_bias")) reject(c, "a bias and causal masking together");
}

// The forward as one ir::Attention op (the fused kernel of lower/attention.cpp: no temporaries, the
// scores stay on chip) when its layout allows: every tensor's last dim contiguous, and a bias that
// is bool or float with its keys contiguous. False when the decomposition below must run instead.
bool fused(Builder& b, const Call& c, uint32_t q, uint32_t k, uint32_t v, const Shape& sh) {
  const uint32_t out = c.out(0);
  for (const uint32_t x : {q, k, v, out}) {
    if (b.view(x).strides[3] != 1) return false;
  }
  if (sh.length == 0 || b.view(q).sizes[3] == 0) return false;
  ir::Attention a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.out = out;
  a.causal = c.flag("is_causal", false);
  a.scale = scale_of(c, b.view(q));
  if (const Arg* bias = c.get("attn_bias")) {
    if (bias->kind != Arg::Kind::kTensor) return false;
    const uint32_t bv = expand(b, bias->view, {sh.batch, sh.heads, sh.length, sh.keys});
    const ir::View& x = b.view(bv);
    if (x.strides[3] != 1 || !(x.dtype == DType::kBool || hw::dtype_is_float(x.dtype))) return false;
    a.bias = bv;
  }
  if (c.wants(1)) {
    const ir::View& l = b.view(c.out(1));
    if (l.sizes.size() != 3 || l.dtype != DType::kF32) return false;
    a.lse = c.out(1);
  }
  b.add(a);
  return true;
}

// _scaled_dot_product_fused_attention_overrideable(query, key, value, attn_bias, dropout_p,
// is_causal, return_debug_mask, scale) -> (output, logsumexp, ...): results 0 and 1 are written.
void forward(Builder& b, const Call& c) {
  check(c);
  const uint32_t q = c.tensor("query"), k = c.tensor("key"), v = c.tensor("value");
  const Shape sh = shape_of(b, c, q, k, v);
  const uint32_t out = c.out(0);
  const bool lse = c.wants(1);
  if (b.view(out).numel() == 0) {
    if (lse) fill(b, c.out(1), -kInf);
    return;
  }
  if (sh.keys == 0) {  // no keys: torch's math path gives NaN rows
    fill(b, out, std::numeric_limits<double>::quiet_NaN());
    if (lse) fill(b, c.out(1), -kInf);
    return;
  }
  if (fused(b, c, q, k, v, sh)) return;
  const DType type = b.view(q).dtype;
  const bool f32 = type == DType::kF32;
  const std::vector<int64_t> full = {sh.batch, sh.heads, sh.length, sh.keys}, row = {sh.batch, sh.heads, sh.length, 1};
  const uint32_t s = b.temp(full, DType::kF32);
  scores(b, c, q, k, sh, scale_of(c, b.view(q)), s);
  const uint32_t m = b.temp(row, DType::kF32), sum = b.temp(row, DType::kF32);
  reduce(b, ReduceFn::kMax, DType::kF32, s, m, {3});
  // exp(S - max); a row with every key masked has max -inf and takes 0 instead.
  ir::Expr safe(DType::kF32);
  const int32_t mi = safe.input(ir::Operand::of(m));
  safe.select(safe.binary(BinaryFn::kEq, mi, safe.constant(-kInf)), safe.constant(0.0), mi);
  b.add(safe.done(m));
  ir::Expr ex(DType::kF32);
  ex.unary(UnaryFn::kExp, ex.binary(BinaryFn::kSub, ex.input(ir::Operand::of(s)), ex.input(ir::Operand::of(m))));
  b.add(ex.done(s));
  reduce(b, ReduceFn::kSum, DType::kF32, s, sum, {3});
  const uint32_t p = f32 ? s : b.temp(full, type);
  ir::Expr norm(DType::kF32);
  const int32_t si = norm.input(ir::Operand::of(s)), ti = norm.input(ir::Operand::of(sum));
  norm.select(norm.binary(BinaryFn::kGt, ti, norm.constant(0.0)), norm.binary(BinaryFn::kDiv, si, ti),
              norm.constant(0.0));
  b.add(norm.done(p));
  matmul(b, heads(b, p, sh.group, false), heads(b, v, sh.group, true), heads(b, out, sh.group, false), 1.0, type);
  if (lse) {
    const uint32_t l = c.out(1);
    const ir::View lv = b.view(l);
    if (lv.sizes.size() != 3) reject(c, "the logsumexp must be [batch, heads, length]");
    ir::Expr e(DType::kF32);
    e.binary(BinaryFn::kAdd, e.input(ir::Operand::of(m)), e.unary(UnaryFn::kLog, e.input(ir::Operand::of(sum))));
    b.add(e.done(b.derive(l, row, {lv.strides[0], lv.strides[1], lv.strides[2], 1})));
  }
}

// _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query, key, value, attn_bias,
// grad_input_mask, out, logsumexp, ..., dropout_p, is_causal, ..., scale) -> (dq, dk, dv, dbias).
void backward(Builder& b, const Call& c) {
  check(c);
  const uint32_t go = c.tensor("grad_out"), q = c.tensor("query"), k = c.tensor("key"), v = c.tensor("value");
  const uint32_t o = c.tensor("out"), lse = c.tensor("logsumexp");
  const Shape sh = shape_of(b, c, q, k, v);
  const bool want_dbias = c.wants(3) && c.get("attn_bias");
  if (b.view(go).numel() == 0 || sh.keys == 0) {  // no products: zero gradients
    for (size_t i = 0; i < 3; ++i) {
      if (c.wants(i)) fill(b, c.out(i), 0);
    }
    if (want_dbias) fill(b, c.out(3), 0);
    return;
  }
  const DType type = b.view(q).dtype;
  const bool f32 = type == DType::kF32;
  const double scale = scale_of(c, b.view(q));
  const int64_t g = sh.group;
  const std::vector<int64_t> full = {sh.batch, sh.heads, sh.length, sh.keys};
  const uint32_t p = b.temp(full, DType::kF32), ds = b.temp(full, DType::kF32);
  const uint32_t pc = f32 ? p : b.temp(full, type), dsc = f32 ? ds : b.temp(full, type);
  scores(b, c, q, k, sh, scale, p);
  const ir::View lv = b.view(lse);
  const uint32_t lrow =
      b.derive(lse, {sh.batch, sh.heads, sh.length, 1}, {lv.strides[0], lv.strides[1], lv.strides[2], 1});
  {  // P = exp(S - logsumexp); a row with every key masked: 0
    ir::Expr e(DType::kF32);
    const int32_t si = e.input(ir::Operand::of(p)), li = e.input(ir::Operand::of(lrow));
    e.select(e.binary(BinaryFn::kEq, li, e.constant(-kInf)), e.constant(0.0),
             e.unary(UnaryFn::kExp, e.binary(BinaryFn::kSub, si, li)));
    b.add(e.done(p));
  }
  if (!f32) copy(b, p, pc);
  const ir::View vv = b.view(v), kv = b.view(k);
  if (c.wants(2)) {
    const uint32_t dv = c.out(2);
    if (g == 1) {
      matmul(b, heads(b, pc, 1, false, true), heads(b, go, 1, false), heads(b, dv, 1, false), 1.0, type);
    } else {  // each query head's share, then the sum over each key head's group
      const uint32_t share = b.temp({sh.batch, sh.heads, sh.keys, vv.sizes[3]}, type);
      matmul(b, heads(b, pc, g, false, true), heads(b, go, g, false), heads(b, share, g, false), 1.0, type);
      sum_groups(b, share, dv, g);
    }
  }
  matmul(b, heads(b, go, g, false), heads(b, v, g, true, true), heads(b, ds, g, false), 1.0, type);
  const uint32_t prod = b.temp(b.view(o).sizes, type), d = b.temp({sh.batch, sh.heads, sh.length, 1}, DType::kF32);
  {
    ir::Expr e(DType::kF32);
    e.binary(BinaryFn::kMul, e.input(ir::Operand::of(go)), e.input(ir::Operand::of(o)));
    b.add(e.done(prod));
  }
  reduce(b, ReduceFn::kSum, DType::kF32, prod, d, {3});
  {
    ir::Expr e(DType::kF32);
    const int32_t pi = e.input(ir::Operand::of(p)), di = e.input(ir::Operand::of(ds)), ri = e.input(ir::Operand::of(d));
    e.binary(BinaryFn::kMul, pi, e.binary(BinaryFn::kSub, di, ri));
    b.add(e.done(ds));
  }
  if (!f32) copy(b, ds, dsc);
  if (c.wants(0)) {
    matmul(b, heads(b, dsc, g, false), heads(b, k, g, true), heads(b, c.out(0), g, false), scale, type);
  }
  if (c.wants(1)) {
    const uint32_t dk = c.out(1);
    if (g == 1) {
      matmul(b, heads(b, dsc, 1, false, true), heads(b, q, 1, false), heads(b, dk, 1, false), scale, type);
    } else {
      const uint32_t share = b.temp({sh.batch, sh.heads, sh.keys, kv.sizes[3]}, type);
      matmul(b, heads(b, dsc, g, false, true), heads(b, q, g, false), heads(b, share, g, false), scale, type);
      sum_groups(b, share, dk, g);
    }
  }
  if (want_dbias) {  // dS summed over the dims the bias broadcasts along
    const uint32_t dbias = c.out(3);
    const uint32_t db = expand(b, dbias, full);
    const ir::View dbv = b.view(db);
    std::vector<int64_t> dims, kept = full;
    for (size_t dim = 0; dim < 4; ++dim) {
      if (dbv.strides[dim] == 0 && full[dim] != 1) {
        dims.push_back(int64_t(dim));
        kept[dim] = 1;
      }
    }
    if (dims.empty()) {
      copy(b, ds, db);
    } else {
      reduce(b, ReduceFn::kSum, DType::kF32, ds, b.derive(db, kept, dbv.strides), dims);
    }
  }
}

}  // namespace

const Table& attention_ops() {
  static const Table t = {{"_scaled_dot_product_fused_attention_overrideable", {forward, 2}},
                          {"_scaled_dot_product_fused_attention_overrideable_backward", {backward, 4}}};
  return t;
}

}  // namespace spyre::compiler::ops
