// Normalisation on the device: native_layer_norm and its backward, each one launch of reduce and
// pointwise steps (a composite kernel) over the input viewed as [rows, normalized elements], in
// fp32 with one rounding into each result. RMS norm needs no kernel of its own: torch decomposes
// it into ops that are native here.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend {
namespace {

using hw::BinaryFn;
using hw::UnaryFn;
// Rows x normalized elements of a layer norm over the trailing `normalized` dims.
std::pair<int64_t, int64_t> rows_cols(const at::Tensor& x, c10::IntArrayRef normalized) {
  const int64_t axis = x.dim() - static_cast<int64_t>(normalized.size());
  TORCH_CHECK(axis >= 0 && x.sizes().slice(static_cast<size_t>(axis)) == normalized,
              "layer_norm: the input's trailing dims ", x.sizes(), " are not the normalized shape ", normalized);
  int64_t cols = 1;
  for (int64_t s : normalized) cols *= s;
  return {cols == 0 ? 0 : x.numel() / cols, cols};
}

// The shape of mean and rstd: the input's, with the normalized dims of size 1.
std::vector<int64_t> stat_shape(const at::Tensor& x, size_t normalized) {
  std::vector<int64_t> s = x.sizes().vec();
  for (size_t d = s.size() - normalized; d < s.size(); ++d) s[d] = 1;
  return s;
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd):
//   mean = sum(x) / N;  rstd = rsqrt(sum((x - mean)^2) / N + eps);  out = (x - mean) * rstd * w + b.
void layer_norm_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor input = c.at(0).toTensor();
  const std::vector<int64_t> normalized = c.at(1).toIntVector();
  const c10::IValue* w = c.get("weight");
  const c10::IValue* b = c.get("bias");
  const double eps = c.get("eps")->toDouble();
  if (!at::isFloatingType(input.scalar_type()) || !device_dtype(input.scalar_type()) || c.out()) {
    return c.fall_back();
  }
  const auto [M, N] = rows_cols(input, normalized);
  at::Tensor out = at::empty(input.sizes(), input.options());
  const std::vector<int64_t> stats = stat_shape(input, normalized.size());
  at::Tensor mean = at::empty(stats, input.options()), rstd = at::empty(stats, input.options());
  if (M == 0 || N == 0) {
    if (N == 0) {
      mean.fill_(std::numeric_limits<double>::quiet_NaN());
      rstd.fill_(std::numeric_limits<double>::quiet_NaN());
    }
    return c.finish({out, mean, rstd});
  }
  const at::Tensor x = input.contiguous().view({M, N});
  Launch l;
  const uint32_t xv = l.view(x), ov = l.view(out.view({M, N}));
  const uint32_t m = l.view(l.scratch({M, 1}, x)), s = l.view(l.scratch({M, 1}, x));
  const uint32_t sq = l.view(l.scratch({M, N}, x));
  sum(l, xv, m, 1);
  expr(l, {m}, m, [&](ir::Expr& e, auto in) { e.binary(BinaryFn::kMul, in[0], e.constant(1.0 / N)); });
  expr(l, {xv, m}, sq, [](ir::Expr& e, auto in) {
    const int32_t d = e.binary(BinaryFn::kSub, in[0], in[1]);
    e.binary(BinaryFn::kMul, d, d);
  });
  sum(l, sq, s, 1);
  expr(l, {s}, s, [&](ir::Expr& e, auto in) {
    e.unary(UnaryFn::kRsqrt,
            e.binary(BinaryFn::kAdd, e.binary(BinaryFn::kMul, in[0], e.constant(1.0 / N)), e.constant(eps)));
  });
  // (x - mean) * rstd, then * w + b: a pointwise op takes at most three tensors and its output.
  const uint32_t xn = (w || b) ? l.view(l.scratch({M, N}, x)) : ov;
  expr(l, {xv, m, s}, xn,
       [](ir::Expr& e, auto in) { e.binary(BinaryFn::kMul, e.binary(BinaryFn::kSub, in[0], in[1]), in[2]); });
  if (w || b) {
    std::vector<uint32_t> args = {xn};
    if (w) args.push_back(l.view(w->toTensor().reshape({1, N})));
    if (b) args.push_back(l.view(b->toTensor().reshape({1, N})));
    expr(l, args, ov, [&](ir::Expr& e, auto in) {
      const int32_t y = w ? e.binary(BinaryFn::kMul, in[0], in[1]) : in[0];
      if (b) e.binary(BinaryFn::kAdd, y, in[w ? 2 : 1]);
    });
  }
  expr(l, {m}, l.view(mean.view({M, 1})), [](ir::Expr& e, auto in) { e.unary(UnaryFn::kCopy, in[0]); });
  expr(l, {s}, l.view(rstd.view({M, 1})), [](ir::Expr& e, auto in) { e.unary(UnaryFn::kCopy, in[0]); });
  if (!run_or_fall_back(l, c)) return;
  c.finish({out, mean, rstd});
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, mask):
//   xhat = (x - mean) * rstd;  gw = g * w;  A = sum(gw) / N;  B = sum(gw * xhat) / N per row;
//   dx = rstd * (gw - A - xhat * B);  dw = sum over rows of g * xhat;  db = sum over rows of g.
void layer_norm_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor grad = c.at(0).toTensor(), input = c.at(1).toTensor();
  const std::vector<int64_t> normalized = c.at(2).toIntVector();
  const at::Tensor mean_t = c.at(3).toTensor(), rstd_t = c.at(4).toTensor();
  const c10::IValue* w = c.get("weight");
  const std::vector<bool> mask = c.at(7).toBoolList().vec();
  if (!at::isFloatingType(input.scalar_type()) || !device_dtype(input.scalar_type()) || c.out()) {
    return c.fall_back();
  }
  const auto [M, N] = rows_cols(input, normalized);
  at::Tensor dx = mask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor();
  at::Tensor dw = mask[1] && w ? at::empty(w->toTensor().sizes(), w->toTensor().options()) : at::Tensor();
  at::Tensor db =
      mask[2] && c.get("bias") ? at::empty(c.get("bias")->toTensor().sizes(), input.options()) : at::Tensor();
  if (M == 0 || N == 0) {
    for (at::Tensor* t : {&dw, &db}) {
      if (t->defined()) t->zero_();
    }
    return c.finish({dx, dw, db});
  }
  const at::Tensor x = input.contiguous().view({M, N}), g = grad.contiguous().view({M, N});
  Launch l;
  const uint32_t xv = l.view(x), gv = l.view(g);
  const uint32_t mv = l.view(mean_t.contiguous().view({M, 1})), rv = l.view(rstd_t.contiguous().view({M, 1}));
  const uint32_t xhat = l.view(l.scratch({M, N}, x)), t = l.view(l.scratch({M, N}, x));
  expr(l, {xv, mv, rv}, xhat,
       [](ir::Expr& e, auto in) { e.binary(BinaryFn::kMul, e.binary(BinaryFn::kSub, in[0], in[1]), in[2]); });
  if (dx.defined()) {
    uint32_t gw = gv;
    if (w) {
      gw = l.view(l.scratch({M, N}, x));
      expr(l, {gv, l.view(w->toTensor().reshape({1, N}))}, gw,
           [](ir::Expr& e, auto in) { e.binary(BinaryFn::kMul, in[0], in[1]); });
    }
    const uint32_t a = l.view(l.scratch({M, 1}, x)), bsum = l.view(l.scratch({M, 1}, x));
    sum(l, gw, a, 1);
    expr(l, {gw, xhat}, t, [](ir::Expr& e, auto in) { e.binary(BinaryFn::kMul, in[0], in[1]); });
    sum(l, t, bsum, 1);
    // dx = rstd * gw - rstd * A / N, then - xhat * rstd * B / N (one pass takes three inputs).
    const double inv = 1.0 / static_cast<double>(N);
    expr(l, {gw, rv, a}, t, [&](ir::Expr& e, auto in) {
      e.binary(BinaryFn::kMul, in[1],
               e.binary(BinaryFn::kSub, in[0], e.binary(BinaryFn::kMul, in[2], e.constant(inv))));
    });
    expr(l, {rv, bsum}, bsum, [&](ir::Expr& e, auto in) {
      e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, in[0], in[1]), e.constant(inv));
    });
    expr(l, {t, xhat, bsum}, l.view(dx.view({M, N})),
         [](ir::Expr& e, auto in) { e.binary(BinaryFn::kSub, in[0], e.binary(BinaryFn::kMul, in[1], in[2])); });
  }
  if (dw.defined()) {
    const uint32_t gx = l.view(l.scratch({M, N}, x));
    expr(l, {gv, xhat}, gx, [](ir::Expr& e, auto in) { e.binary(BinaryFn::kMul, in[0], in[1]); });
    const uint32_t acc = l.view(l.scratch({1, N}, x));
    sum(l, gx, acc, 0);
    expr(l, {acc}, l.view(dw.view({1, N})), [](ir::Expr& e, auto in) { e.unary(UnaryFn::kCopy, in[0]); });
  }
  if (db.defined()) {
    const uint32_t acc = l.view(l.scratch({1, N}, x));
    sum(l, gv, acc, 0);
    expr(l, {acc}, l.view(db.view({1, N})), [](ir::Expr& e, auto in) { e.unary(UnaryFn::kCopy, in[0]); });
  }
  if (!run_or_fall_back(l, c)) return;
  c.finish({dx, dw, db});
}

const bool g_registered = [] {
  register_boxed({"native_layer_norm"}, {""}, &layer_norm_kernel);
  register_boxed({"native_layer_norm_backward"}, {""}, &layer_norm_backward_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
