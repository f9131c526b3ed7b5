// Convolutions (1-, 2- and 3-d, transposed, strided, padded, dilated, grouped and depthwise) and
// their backward, on the PT array:
//   forward            out = W @ im2col(pad(x))             (one batched matmul per call)
//   transposed         out = col2im(W^T @ x)                (the matmul, then one add per kernel tap)
//   grad of the input  the other of the two, with the same weight
//   grad of the weight dW = dY @ im2col(x)^T over batch and positions, per group
//   grad of the bias   the sum of dY over batch and positions
// im2col is a copy of a strided view of the padded input (each kernel tap and output position is
// an element at a fixed stride); col2im adds each tap's columns into a strided view of an fp32
// accumulator, so fp16 and bf16 round once. Views, not loops, carry the geometry.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "family.h"

namespace spyre::compiler::ops {
namespace {

using hw::DType;

struct Geometry {
  size_t dims = 0;                     // spatial dims
  int64_t n = 0, c = 0, o = 0, g = 1;  // batch, input and output channels (of the convolution), groups
  std::vector<int64_t> in, k, out;     // spatial sizes: input, kernel, output
  std::vector<int64_t> stride, pad, dil, out_pad;
  bool transposed = false;
};

int64_t product(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{1}, std::multiplies<>());
}

std::vector<int64_t> per_dim(const Call& c, const char* name, size_t dims, int64_t fallback) {
  const Arg* a = c.get(name);
  std::vector<int64_t> v = a && a->kind == Arg::Kind::kInts ? a->ints : std::vector<int64_t>{};
  if (v.empty()) v.assign(dims, fallback);
  if (v.size() == 1 && dims > 1) v.assign(dims, v[0]);
  if (v.size() != dims) reject(c, fmt::format("'{}' has {} values for {} spatial dims", name, v.size(), dims));
  return v;
}

// The convolution's shapes from its input (x: [N, C, *S]) and weight ([O, C/G, *K], or transposed
// [C, O/G, *K]).
Geometry geometry(Builder& b, const Call& c, uint32_t x, uint32_t w) {
  const ir::View &xv = b.view(x), &wv = b.view(w);
  Geometry g;
  if (xv.sizes.size() < 3 || xv.sizes.size() > 5 || wv.sizes.size() != xv.sizes.size()) {
    reject(c, "expected [batch, channels, 1 to 3 spatial dims] input and a weight of the same rank");
  }
  g.dims = xv.sizes.size() - 2;
  g.transposed = c.flag("transposed", false);
  g.g = c.integer("groups", 1);
  if (g.g < 1) reject(c, "groups must be positive");
  g.n = xv.sizes[0];
  g.c = xv.sizes[1];
  g.o = g.transposed ? wv.sizes[1] * g.g : wv.sizes[0];
  g.in.assign(xv.sizes.begin() + 2, xv.sizes.end());
  g.k.assign(wv.sizes.begin() + 2, wv.sizes.end());
  g.stride = per_dim(c, "stride", g.dims, 1);
  g.pad = per_dim(c, "padding", g.dims, 0);
  g.dil = per_dim(c, "dilation", g.dims, 1);
  g.out_pad = per_dim(c, "output_padding", g.dims, 0);
  if (g.c % g.g != 0 || g.o % g.g != 0) reject(c, "channels do not divide into the groups");
  if ((g.transposed ? wv.sizes[0] : wv.sizes[1] * g.g) != g.c)
    reject(c, "the weight's channels do not match the input");
  for (size_t i = 0; i < g.dims; ++i) {
    if (g.stride[i] < 1 || g.dil[i] < 1 || g.pad[i] < 0 || g.out_pad[i] < 0) reject(c, "a negative geometry");
    const int64_t span = g.dil[i] * (g.k[i] - 1) + 1;
    g.out.push_back(g.transposed ? (g.in[i] - 1) * g.stride[i] - 2 * g.pad[i] + span + g.out_pad[i]
                                 : (g.in[i] + 2 * g.pad[i] - span) / g.stride[i] + 1);
    if (g.out.back() < 0) reject(c, "the kernel is larger than the padded input");
  }
  return g;
}

// `v` ([N, C, *S]) inside zeros: `before[i]` and `after[i]` more along each spatial dim.
uint32_t padded(Builder& b, uint32_t v, const std::vector<int64_t>& before, const std::vector<int64_t>& after) {
  bool any = false;
  for (size_t i = 0; i < before.size(); ++i) any |= before[i] > 0 || after[i] > 0;
  if (!any) return v;
  const ir::View t = b.view(v);
  std::vector<int64_t> sizes = t.sizes;
  for (size_t i = 0; i < before.size(); ++i) sizes[2 + i] += before[i] + after[i];
  const uint32_t p = b.temp(sizes, t.dtype);
  fill(b, p, 0);
  const std::vector<int64_t> strides = contiguous_strides(sizes);
  int64_t offset = 0;
  for (size_t i = 0; i < before.size(); ++i) offset += before[i] * strides[2 + i];
  copy(b, v, b.derive(p, offset, t.sizes, strides));
  return p;
}

// The columns of padded input `xp` ([N, C, *P]) for kernel taps `k` at output positions `out`:
// an element per (n, g, c, tap, position), a view at fixed strides. `order` lists those dims (0 n,
// 1 g, 2 c, 3.. taps, then positions) in the order the contiguous copy lays them out.
uint32_t columns(Builder& b, uint32_t xp, const Geometry& geo, const std::vector<int64_t>& k,
                 const std::vector<int64_t>& out, const std::vector<size_t>& order) {
  const ir::View t = b.view(xp);
  const int64_t cg = t.sizes[1] / geo.g;
  std::vector<int64_t> sizes = {t.sizes[0], geo.g, cg}, strides = {t.strides[0], t.strides[1] * cg, t.strides[1]};
  for (size_t i = 0; i < geo.dims; ++i) {
    sizes.push_back(k[i]);
    strides.push_back(geo.dil[i] * t.strides[2 + i]);
  }
  for (size_t i = 0; i < geo.dims; ++i) {
    sizes.push_back(out[i]);
    strides.push_back(geo.stride[i] * t.strides[2 + i]);
  }
  std::vector<int64_t> ps, pst;
  for (size_t d : order) {
    ps.push_back(sizes[d]);
    pst.push_back(strides[d]);
  }
  const uint32_t col = b.temp(ps, t.dtype);
  copy(b, b.derive(xp, ps, pst), col);  // as several copies when it walks too many dims
  return col;
}

// View `v` with its dims in `order`, copied into a contiguous temporary.
uint32_t permuted(Builder& b, uint32_t v, const std::vector<size_t>& order) {
  const ir::View t = b.view(v);
  std::vector<int64_t> s, st;
  for (size_t d : order) {
    s.push_back(t.sizes[d]);
    st.push_back(t.strides[d]);
  }
  const uint32_t p = b.temp(s, t.dtype);
  copy(b, b.derive(v, s, st), p);
  return p;
}

void matmul(Builder& b, uint32_t a, uint32_t w, uint32_t out, DType type, int64_t bias = -1) {
  ir::Matmul m;
  m.a = a;
  m.b = w;
  m.out = out;
  m.compute = type;
  m.bias = bias;
  b.add(m);
}

// `v` as [*lead, rows, cols] from its contiguous layout of sizes [*lead, *row dims, *col dims].
uint32_t as_matrix(Builder& b, uint32_t v, size_t lead, size_t row_dims) {
  const ir::View t = b.view(v);
  std::vector<int64_t> sizes(t.sizes.begin(), t.sizes.begin() + static_cast<std::ptrdiff_t>(lead));
  const std::vector<int64_t> rows(t.sizes.begin() + static_cast<std::ptrdiff_t>(lead),
                                  t.sizes.begin() + static_cast<std::ptrdiff_t>(lead + row_dims));
  const std::vector<int64_t> cols(t.sizes.begin() + static_cast<std::ptrdiff_t>(lead + row_dims), t.sizes.end());
  sizes.push_back(product(rows));
  sizes.push_back(product(cols));
  return b.derive(v, sizes, contiguous_strides(sizes));
}

// A view contiguous in the layout the matmuls read it: itself, or a contiguous copy.
uint32_t dense(Builder& b, uint32_t v) {
  return packed(b, v);
}

// The weight [R, X, *K] (R rows split into groups) as per-group matrices [G, R/G, X * taps].
uint32_t weight_rows(Builder& b, uint32_t w, int64_t groups) {
  const uint32_t d = dense(b, w);
  const ir::View t = b.view(d);
  const int64_t rows = t.sizes[0] / groups, cols = t.numel() / t.sizes[0];
  return b.derive(d, {groups, rows, cols}, {rows * cols, cols, 1});
}

// The weight [R, X, *K] (R rows split into groups) as per-group transposed matrices
// [G, X * taps, R/G]: column r of group g is row g * R/G + r.
uint32_t weight_cols(Builder& b, uint32_t w, int64_t groups) {
  const uint32_t d = dense(b, w);
  const ir::View t = b.view(d);
  const int64_t rows = t.sizes[0] / groups, cols = t.numel() / t.sizes[0];
  return b.derive(d, {groups, cols, rows}, {rows * cols, 1, cols});
}

// dst ([N, C, *S], a spatially contiguous view) = the convolution of x with w (both of one float
// type), plus the bias: the im2col matmul.
void conv(Builder& b, const Geometry& geo, uint32_t x, uint32_t w, int64_t bias, uint32_t dst) {
  const DType type = b.view(x).dtype;
  const size_t dims = geo.dims;
  bool direct = true;  // a 1x1 kernel at stride 1 without padding reads the input as it is
  for (size_t i = 0; i < dims; ++i) direct &= geo.k[i] == 1 && geo.stride[i] == 1 && geo.pad[i] == 0;
  uint32_t cols;
  if (direct) {
    const uint32_t xd = dense(b, x);
    const int64_t cg = geo.c / geo.g, sp = product(geo.in);
    cols = b.derive(xd, {geo.n, geo.g, cg, sp}, {geo.c * sp, cg * sp, sp, 1});  // [N, G, C/G, S]
  } else {
    const uint32_t xp = padded(b, x, geo.pad, geo.pad);
    std::vector<size_t> order(3 + 2 * dims);
    std::iota(order.begin(), order.end(), 0);  // [N, G, C/G, *K, *O]
    cols = as_matrix(b, columns(b, xp, geo, geo.k, geo.out, order), 2, 1 + dims);
  }
  const uint32_t a = weight_rows(b, w, geo.g);  // [G, O/G, C/G * taps]
  const ir::View dv = b.view(dst);
  const int64_t og = geo.o / geo.g, sp = product(geo.out);
  const uint32_t out = b.derive(dst, {geo.n, geo.g, og, sp}, {dv.strides[0], og * dv.strides[1], dv.strides[1], 1});
  int64_t bv = -1;
  if (bias >= 0) {
    const ir::View t = b.view(static_cast<uint32_t>(bias));
    bv = b.derive(static_cast<uint32_t>(bias), {1, geo.g, og, 1}, {0, og * t.strides[0], t.strides[0], 0});
  }
  matmul(b, b.derive(a, {1, geo.g, og, b.view(a).sizes[2]}, {0, b.view(a).strides[0], b.view(a).strides[1], 1}), cols,
         out, type, bv);
}

// dst ([N, R, *T]) = col2im(W^T @ x) cropped by `crop`: the matmul gives each input position's
// contribution to every tap of the R channels; each tap's is added into a strided view of an fp32
// accumulator covering [N, R, *(T + 2 crop)]. `w_cols` is the weight as [G, R/G * taps, X/G].
void transposed_conv(Builder& b, const Geometry& geo, uint32_t x, uint32_t w_cols, int64_t rows,
                     const std::vector<int64_t>& target, const std::vector<int64_t>& crop, int64_t bias, uint32_t dst) {
  const DType type = b.view(x).dtype;
  const size_t dims = geo.dims;
  const ir::View xv = b.view(x);
  const int64_t xg = xv.sizes[1] / geo.g, rg = rows / geo.g, taps = product(geo.k);
  std::vector<int64_t> src(xv.sizes.begin() + 2, xv.sizes.end());
  const int64_t sp = product(src);
  const uint32_t xd = dense(b, x);
  const uint32_t bm = b.derive(xd, {xv.sizes[0], geo.g, xg, sp}, {xg * geo.g * sp, xg * sp, sp, 1});
  // fp32 columns: each tap's contribution joins the accumulator as the PT array summed it, so an
  // fp16 or bf16 result rounds once (bf16 columns had rounded every tap, up to 2 ulps off).
  const uint32_t col = b.temp({xv.sizes[0], geo.g, rg * taps, sp}, DType::kF32);
  const ir::View wv = b.view(w_cols);
  matmul(b, b.derive(w_cols, {1, geo.g, wv.sizes[1], wv.sizes[2]}, {0, wv.strides[0], wv.strides[1], wv.strides[2]}),
         bm, col, type);
  std::vector<int64_t> full = {xv.sizes[0], rows};
  for (size_t i = 0; i < dims; ++i) full.push_back(target[i] + 2 * crop[i]);
  const uint32_t acc = b.temp(full, DType::kF32);
  fill(b, acc, 0);
  const std::vector<int64_t> ast = contiguous_strides(full);
  // col as [N, R, *K, *src]: taps of a channel contiguous, then positions.
  std::vector<int64_t> cs = {xv.sizes[0], rows}, cst;
  cs.insert(cs.end(), geo.k.begin(), geo.k.end());
  cs.insert(cs.end(), src.begin(), src.end());
  cst = contiguous_strides(cs);
  std::vector<int64_t> tap(dims, 0);
  for (int64_t t = 0; t < taps; ++t) {
    int64_t at = 0, from = 0;
    std::vector<int64_t> sizes = {xv.sizes[0], rows}, strides = {ast[0], ast[1]}, csz = sizes, cstr = {cst[0], cst[1]};
    for (size_t i = 0; i < dims; ++i) {
      at += tap[i] * geo.dil[i] * ast[2 + i];
      from += tap[i] * cst[2 + i];
      sizes.push_back(src[i]);
      strides.push_back(geo.stride[i] * ast[2 + i]);
      cstr.push_back(cst[2 + dims + i]);
    }
    csz = sizes;
    const uint32_t into = b.derive(acc, at, sizes, strides);
    ir::Expr e(DType::kF32);
    e.binary(hw::BinaryFn::kAdd, e.input(ir::Operand::of(into)),
             e.input(ir::Operand::of(b.derive(col, from, csz, cstr))));
    b.add(e.done(into));
    for (size_t i = dims; i-- > 0;) {  // the next tap, in row-major order
      if (++tap[i] < geo.k[i]) break;
      tap[i] = 0;
    }
  }
  int64_t offset = 0;
  std::vector<int64_t> sizes = {xv.sizes[0], rows};
  for (size_t i = 0; i < dims; ++i) {
    offset += crop[i] * ast[2 + i];
    sizes.push_back(target[i]);
  }
  const uint32_t inner = b.derive(acc, offset, sizes, ast);
  if (bias < 0) return copy(b, inner, dst);
  const ir::View bvw = b.view(static_cast<uint32_t>(bias));
  std::vector<int64_t> bs = sizes, bst(sizes.size(), 0);
  bst[1] = bvw.strides[0];
  ir::Expr e(DType::kF32);
  e.binary(hw::BinaryFn::kAdd, e.input(ir::Operand::of(inner)),
           e.input(ir::Operand::of(b.derive(static_cast<uint32_t>(bias), bs, bst))));
  b.add(e.done(dst));
}

// A result view the lowerings write directly (its spatial dims contiguous), or a temporary the
// caller copies into it.
uint32_t writable(Builder& b, uint32_t v, bool& through_temp) {
  const ir::View t = b.view(v);
  const std::vector<int64_t> spatial(t.sizes.begin() + 2, t.sizes.end());
  const std::vector<int64_t> want = contiguous_strides(spatial);
  bool ok = true;
  for (size_t i = 0; i < spatial.size(); ++i) ok &= spatial[i] == 1 || t.strides[2 + i] == want[i];
  through_temp = !ok;
  return ok ? v : b.temp(t.sizes, t.dtype);
}

void check_float(const Call& c, Builder& b, std::initializer_list<uint32_t> views) {
  const DType t = b.view(*views.begin()).dtype;
  for (uint32_t v : views) {
    if (!hw::dtype_is_float(b.view(v).dtype) || b.view(v).dtype != t) {
      reject(c, "the PT array convolves float tensors of one type");
    }
  }
}

// convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups).
void convolution(Builder& b, const Call& c) {
  const uint32_t x = c.tensor("input"), w = c.tensor("weight");
  check_float(c, b, {x, w});
  const Geometry geo = geometry(b, c, x, w);
  const uint32_t result = c.out();
  if (b.view(result).numel() == 0) return;
  const ir::View rv = b.view(result);
  if (rv.sizes.size() != geo.dims + 2 || rv.sizes[0] != geo.n || rv.sizes[1] != geo.o ||
      !std::equal(geo.out.begin(), geo.out.end(), rv.sizes.begin() + 2)) {
    reject(c, "the result's shape is not the convolution's");
  }
  const Arg* bias_arg = c.get("bias");
  const int64_t bias = bias_arg && bias_arg->kind == Arg::Kind::kTensor ? int64_t{bias_arg->view} : -1;
  if (geo.c == 0 || b.view(x).numel() == 0) {  // no input: the bias alone
    if (bias < 0) return fill(b, result, 0);
    const ir::View r = b.view(result);
    std::vector<int64_t> st(r.sizes.size(), 0);
    st[1] = b.view(static_cast<uint32_t>(bias)).strides[0];
    return copy(b, b.derive(static_cast<uint32_t>(bias), r.sizes, st), result);
  }
  bool through_temp = false;
  const uint32_t dst = writable(b, result, through_temp);
  if (!geo.transposed) {
    conv(b, geo, x, w, bias, dst);
  } else {
    transposed_conv(b, geo, x, weight_cols(b, w, geo.g), geo.o, geo.out, geo.pad, bias, dst);
  }
  if (through_temp) copy(b, dst, result);
}

// convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias).
void convolution_backward(Builder& b, const Call& c) {
  const uint32_t gy = c.tensor("grad_output"), x = c.tensor("input");
  // Only the input's gradient reads the weight; without it the weight's shape is its gradient's,
  // so a compiled graph need not pass a weight nothing reads.
  const Arg* given = c.get("weight");
  const bool shape_only = !c.wants(0) && c.wants(1) && (!given || given->kind != Arg::Kind::kTensor);
  const uint32_t w = shape_only ? c.out(1) : c.tensor("weight");
  check_float(c, b, {gy, x, w});
  const Geometry geo = geometry(b, c, x, w);
  const DType type = b.view(x).dtype;
  const size_t dims = geo.dims;
  const bool empty = b.view(gy).numel() == 0 || b.view(x).numel() == 0;
  if (c.wants(0) && b.view(c.out(0)).numel() > 0) {  // the input's gradient
    const uint32_t gi = c.out(0);
    if (empty) {
      fill(b, gi, 0);
    } else {
      bool through_temp = false;
      const uint32_t dst = writable(b, gi, through_temp);
      if (!geo.transposed) {  // col2im(W^T dY): W [O, C/G, *K] as [G, C/G * taps, O/G]
        transposed_conv(b, geo, gy, weight_cols(b, w, geo.g), geo.c, geo.in, geo.pad, -1, dst);
      } else {  // a transposed convolution's input gradient is the convolution of dY with W
        Geometry inv = geo;
        inv.transposed = false;
        std::swap(inv.c, inv.o);
        inv.in = geo.out;
        inv.out = geo.in;
        conv(b, inv, gy, w, -1, dst);
      }
      if (through_temp) copy(b, dst, gi);
    }
  }
  if (c.wants(1) && b.view(c.out(1)).numel() > 0) {  // the weight's gradient, per group
    const uint32_t gw = c.out(1);
    if (empty) {
      fill(b, gw, 0);
    } else {
      // The columns of one side and the other side's channels, both as [G, rows, N * positions].
      const uint32_t side = geo.transposed ? x : gy;      // [N, R, *P]
      const uint32_t unfolded = geo.transposed ? gy : x;  // im2col'd: [N, X, *S]
      const std::vector<int64_t>& positions = geo.transposed ? geo.in : geo.out;
      std::vector<size_t> order = {1, 2};  // [G, X/G, *K, N, *P]
      for (size_t i = 0; i < dims; ++i) order.push_back(3 + i);
      order.push_back(0);
      for (size_t i = 0; i < dims; ++i) order.push_back(3 + dims + i);
      const uint32_t xp = padded(b, unfolded, geo.pad, geo.pad);
      const uint32_t cols = as_matrix(b, columns(b, xp, geo, geo.k, positions, order), 1, 1 + dims);
      const ir::View sv = b.view(side);
      const int64_t rg = sv.sizes[1] / geo.g, sp = product(positions);
      std::vector<size_t> perm = {1, 2, 0, 3};  // [N, G, R/G, P] -> [G, R/G, N, P]
      const uint32_t sg = b.derive(dense(b, side), {sv.sizes[0], geo.g, rg, sp}, {sv.sizes[1] * sp, rg * sp, sp, 1});
      const uint32_t rowsm = as_matrix(b, permuted(b, sg, perm), 2, 0);
      const ir::View rv = b.view(rowsm);
      const uint32_t rows_nm = b.derive(rowsm, {geo.g, rg, sv.sizes[0] * sp}, {rv.strides[0], sv.sizes[0] * sp, 1});
      const ir::View cv = b.view(cols);  // [G, X/G * taps, N * P]
      const uint32_t cols_t = b.derive(cols, {cv.sizes[0], cv.sizes[2], cv.sizes[1]}, {cv.strides[0], 1, cv.sizes[2]});
      const bool through_temp = !is_contiguous(b.view(gw));
      const uint32_t dst = through_temp ? b.temp(b.view(gw).sizes, b.view(gw).dtype) : gw;
      const ir::View dv = b.view(dst);
      const int64_t per = dv.numel() / geo.g;
      // convolution: dW [O, C/G, *K] = dY [G, O/G, NP] @ cols^T [G, NP, C/G*K]
      // transposed:  dW [C, O/G, *K] = x [G, C/G, NP] @ cols^T [G, NP, O/G*K]
      matmul(b, rows_nm, cols_t, b.derive(dst, {geo.g, rg, per / rg}, {per, per / rg, 1}), type);
      if (through_temp) copy(b, dst, gw);
    }
  }
  if (c.wants(2) && b.view(c.out(2)).numel() > 0) {  // the bias's gradient: dY summed but over channels
    const uint32_t gb = c.out(2);
    if (empty) return fill(b, gb, 0);
    const ir::View yv = b.view(gy);
    std::vector<int64_t> keep(yv.sizes.size(), 1), kst(yv.sizes.size(), 0), red = {0};
    keep[1] = yv.sizes[1];
    kst[1] = b.view(gb).strides[0];
    for (size_t i = 0; i < dims; ++i) red.push_back(int64_t(2 + i));
    const uint32_t acc = b.temp(keep, DType::kF32);
    reduce(b, hw::ReduceFn::kSum, DType::kF32, gy, acc, red);
    copy(b, acc, b.derive(gb, keep, kst));
  }
}

}  // namespace

const Table& conv_ops() {
  static const Table t = {{"convolution", convolution},
                          {"convolution_overrideable", convolution},
                          {"convolution_backward", {convolution_backward, 3}},
                          {"convolution_backward_overrideable", {convolution_backward, 3}}};
  return t;
}

}  // namespace spyre::compiler::ops
