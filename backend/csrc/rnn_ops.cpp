// LSTM and GRU cells on the device. Torch computes an RNN cell's gate matmuls itself (linear),
// then hands the pointwise rest of a PrivateUse1 cell to its fused kernels: _thnn_fused_lstm_cell
// and _thnn_fused_gru_cell, and their backwards. CPU has none of them, so without these an
// nn.LSTM or nn.GRU could not run on spyre even with the fallback allowed. Each is one launch of
// pointwise steps over column slices of the [batch, k * hidden] gate tensors (and sums over the
// batch for bias gradients), computed in fp32. The activated gates are stored in the workspace
// (the input's type) and the states are computed from those stored values, so for fp16 and bf16
// a state sees the gates rounded once, as the backward does.
//
// The workspace a forward returns (and its backward reads) is this backend's own layout:
//   LSTM [batch, 4H]: the activated gates i, f, g, o;
//   GRU  [batch, 5H]: r, z, n, hx and the hidden gates' n part (with its bias).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend {
namespace {

using hw::BinaryFn;
using hw::UnaryFn;
using Refs = std::vector<int32_t>;

// Column block k of width h of a [batch, n * h] tensor, as a view of `l` that shares the
// tensor's launch argument (a launch has at most 16).
uint32_t block(Launch& l, const at::Tensor& t, int64_t k, int64_t h) {
  return l.view(t, k * h * t.stride(1), {t.size(0), h}, {t.stride(0), t.stride(1)});
}

int32_t sigmoid_grad(ir::Expr& e, int32_t y) {  // y * (1 - y)
  return e.binary(BinaryFn::kMul, y, e.binary(BinaryFn::kSub, e.constant(1.0), y));
}

int32_t tanh_grad(ir::Expr& e, int32_t y) {  // 1 - y^2
  return e.binary(BinaryFn::kSub, e.constant(1.0), e.binary(BinaryFn::kMul, y, y));
}

// True when every tensor is a 2-d float tensor of a type the device computes in.
bool supported(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts) {
    if (t->defined() && (t->dim() != 2 || !at::isFloatingType(t->scalar_type()) || !device_dtype(t->scalar_type()))) {
      return false;
    }
  }
  return true;
}

at::Tensor optional_tensor(const BoxedCall& c, const char* name) {
  const c10::IValue* v = c.get(name);
  return v ? v->toTensor() : at::Tensor();
}

// The arguments of a fused cell of `gates` gate blocks: (input_gates, hidden_gates, state,
// input_bias?, hidden_bias?), checked; nullopt when the device does not take their types.
struct CellArgs {
  at::Tensor ig, hg, state, ib, hb;
  int64_t hidden = 0;
};

std::optional<CellArgs> cell_args(const BoxedCall& c, const char* name, int64_t gates) {
  CellArgs a{c.at(0).toTensor(), c.at(1).toTensor(), c.at(2).toTensor(), optional_tensor(c, "input_bias"),
             optional_tensor(c, "hidden_bias")};
  TORCH_CHECK(a.ib.defined() == a.hb.defined(), name, ": give both biases or neither");
  if (!supported({&a.ig, &a.hg, &a.state}) || c.out()) return std::nullopt;
  a.hidden = a.state.size(1);
  TORCH_CHECK(a.ig.sizes() == a.hg.sizes() && a.ig.size(1) == gates * a.hidden && a.ig.size(0) == a.state.size(0), name,
              ": gates ", a.ig.sizes(), " and ", a.hg.sizes(), " do not match the state ", a.state.sizes());
  TORCH_CHECK(!a.ib.defined() || (a.ib.numel() == gates * a.hidden && a.hb.numel() == gates * a.hidden), name,
              ": biases must have ", gates, " * hidden elements");
  return a;
}

// The gate sums ig + hg (+ ib + hb), [batch, n * H] in fp32: a scratch of `l`.
at::Tensor gate_sum(Launch& l, const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& ib, const at::Tensor& hb) {
  const at::Tensor pre = l.scratch(ig.sizes(), ig);
  const uint32_t pv = l.view(pre);
  if (!ib.defined()) {
    expr(l, {l.view(ig), l.view(hg)}, pv, [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kAdd, in[0], in[1]); });
    return pre;
  }
  const int64_t n = ig.size(1);
  expr(l, {l.view(ig), l.view(hg), l.view(ib.reshape({1, n}))}, pv,
       [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kAdd, e.binary(BinaryFn::kAdd, in[0], in[1]), in[2]); });
  expr(l, {pv, l.view(hb.reshape({1, n}))}, pv,
       [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kAdd, in[0], in[1]); });
  return pre;
}

// The bias gradient: the sum over the batch of `grad` [batch, n], into `out` [n].
void bias_grad(Launch& l, const at::Tensor& grad, const at::Tensor& out) {
  const uint32_t acc = l.view(l.scratch({1, grad.size(1)}, grad));
  sum(l, l.view(grad), acc, 0);
  expr(l, {acc}, l.view(out.view({1, grad.size(1)})),
       [](ir::Expr& e, const Refs& in) { e.unary(UnaryFn::kCopy, in[0]); });
}

void copy(Launch& l, uint32_t src, uint32_t dst) {
  expr(l, {src}, dst, [](ir::Expr& e, const Refs& in) { e.unary(UnaryFn::kCopy, in[0]); });
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?) -> (hy, cy, workspace):
//   i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the gate sums' four column blocks;
//   cy = f * cx + i * g;  hy = o * tanh(cy).
void lstm_cell_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const std::optional<CellArgs> a = cell_args(c, "_thnn_fused_lstm_cell", 4);
  if (!a) return c.fall_back();
  const at::Tensor &ig = a->ig, &hg = a->hg, &cx = a->state, &ib = a->ib, &hb = a->hb;
  const int64_t H = a->hidden;
  at::Tensor ws = at::empty(ig.sizes(), ig.options()), cy = at::empty(cx.sizes(), cx.options());
  at::Tensor hy = at::empty(cx.sizes(), cx.options());
  if (cx.numel() == 0) return c.finish({hy, cy, ws});
  Launch l;
  const at::Tensor pre = gate_sum(l, ig.contiguous(), hg.contiguous(), ib, hb);
  for (int64_t k = 0; k < 4; ++k) {
    const UnaryFn f = k == 2 ? UnaryFn::kTanh : UnaryFn::kSigmoid;
    expr(l, {block(l, pre, k, H)}, block(l, ws, k, H), [f](ir::Expr& e, const Refs& in) { e.unary(f, in[0]); });
  }
  const uint32_t i = block(l, ws, 0, H), f = block(l, ws, 1, H), g = block(l, ws, 2, H), o = block(l, ws, 3, H);
  const at::Tensor ig_prod = l.scratch(cx.sizes(), cx);
  expr(l, {i, g}, l.view(ig_prod), [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kMul, in[0], in[1]); });
  expr(l, {f, l.view(cx), l.view(ig_prod)}, l.view(cy),
       [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kAdd, e.binary(BinaryFn::kMul, in[0], in[1]), in[2]); });
  expr(l, {o, l.view(cy)}, l.view(hy),
       [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kMul, in[0], e.unary(UnaryFn::kTanh, in[1])); });
  if (!run_or_fall_back(l, c)) return;
  c.finish({hy, cy, ws});
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//   -> (grad_gates, grad_cx, grad_bias): with t = tanh(cy),
//   gc = grad_hy * o * (1 - t^2) + grad_cy;  grad_cx = gc * f;
//   grad gates = (gc * g * i(1-i), gc * cx * f(1-f), gc * i * (1-g^2), grad_hy * t * o(1-o)).
void lstm_cell_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor cx = c.at(2).toTensor(), cy = c.at(3).toTensor(), ws = c.at(4).toTensor();
  const bool has_bias = c.at(5).toBool();
  at::Tensor gh = optional_tensor(c, "grad_hy"), gc_in = optional_tensor(c, "grad_cy");
  if (!supported({&gh, &gc_in, &cx, &cy, &ws}) || c.out()) return c.fall_back();
  const int64_t H = cx.size(1);
  TORCH_CHECK(ws.size(1) == 4 * H && cy.sizes() == cx.sizes(), "_thnn_fused_lstm_cell_backward: workspace ", ws.sizes(),
              " does not match cx ", cx.sizes());
  at::Tensor grad_gates = at::empty(ws.sizes(), ws.options()), grad_cx = at::empty(cx.sizes(), cx.options());
  at::Tensor grad_bias = has_bias ? at::empty({4 * H}, ws.options()) : at::Tensor();
  if (cx.numel() == 0) {
    if (has_bias) grad_bias.zero_();
    return c.finish({grad_gates, grad_cx, grad_bias});
  }
  if (!gh.defined()) gh = at::zeros_like(cx);
  Launch l;
  const uint32_t i = block(l, ws, 0, H), f = block(l, ws, 1, H), g = block(l, ws, 2, H), o = block(l, ws, 3, H);
  const at::Tensor t = l.scratch(cx.sizes(), cx), gc = l.scratch(cx.sizes(), cx);
  expr(l, {l.view(cy)}, l.view(t), [](ir::Expr& e, const Refs& in) { e.unary(UnaryFn::kTanh, in[0]); });
  expr(l, {l.view(gh), o, l.view(t)}, l.view(gc), [](ir::Expr& e, const Refs& in) {
    e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, in[0], in[1]), tanh_grad(e, in[2]));
  });
  if (gc_in.defined()) {
    expr(l, {l.view(gc), l.view(gc_in)}, l.view(gc),
         [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kAdd, in[0], in[1]); });
  }
  const auto product = [](ir::Expr& e, int32_t a, int32_t b, int32_t d) {
    return e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, a, b), d);
  };
  expr(l, {l.view(gc), g, i}, block(l, grad_gates, 0, H),
       [&](ir::Expr& e, const Refs& in) { product(e, in[0], in[1], sigmoid_grad(e, in[2])); });
  expr(l, {l.view(gc), l.view(cx), f}, block(l, grad_gates, 1, H),
       [&](ir::Expr& e, const Refs& in) { product(e, in[0], in[1], sigmoid_grad(e, in[2])); });
  expr(l, {l.view(gc), i, g}, block(l, grad_gates, 2, H),
       [&](ir::Expr& e, const Refs& in) { product(e, in[0], in[1], tanh_grad(e, in[2])); });
  expr(l, {l.view(gh), l.view(t), o}, block(l, grad_gates, 3, H),
       [&](ir::Expr& e, const Refs& in) { product(e, in[0], in[1], sigmoid_grad(e, in[2])); });
  expr(l, {l.view(gc), f}, l.view(grad_cx),
       [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kMul, in[0], in[1]); });
  if (has_bias) bias_grad(l, grad_gates, grad_bias);
  if (!run_or_fall_back(l, c)) return;
  c.finish({grad_gates, grad_cx, grad_bias});
}

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?) -> (hy, workspace):
//   with a = input_gates + input_bias and b = hidden_gates + hidden_bias in blocks r, z, n:
//   r = sigmoid(a_r + b_r);  z = sigmoid(a_z + b_z);  n = tanh(a_n + r * b_n);  hy = n + z * (hx - n).
void gru_cell_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const std::optional<CellArgs> args = cell_args(c, "_thnn_fused_gru_cell", 3);
  if (!args) return c.fall_back();
  const at::Tensor &ig = args->ig, &hg = args->hg, &hx = args->state, &ib = args->ib, &hb = args->hb;
  const int64_t H = args->hidden;
  at::Tensor ws = at::empty({hx.size(0), 5 * H}, ig.options()), hy = at::empty(hx.sizes(), hx.options());
  if (hx.numel() == 0) return c.finish({hy, ws});
  Launch l;
  at::Tensor a = ig.contiguous(), b = hg.contiguous();
  if (ib.defined()) {  // each gate tensor with its own bias: b_n is scaled by r on its own
    const auto add_bias = [&](const at::Tensor& x, const at::Tensor& bias) {
      const at::Tensor sum = l.scratch(x.sizes(), x);
      expr(l, {l.view(x), l.view(bias.reshape({1, 3 * H}))}, l.view(sum),
           [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kAdd, in[0], in[1]); });
      return sum;
    };
    a = add_bias(a, ib);
    b = add_bias(b, hb);
  }
  const uint32_t r = block(l, ws, 0, H), z = block(l, ws, 1, H), n = block(l, ws, 2, H);
  for (int64_t k = 0; k < 2; ++k) {
    expr(l, {block(l, a, k, H), block(l, b, k, H)}, block(l, ws, k, H),
         [](ir::Expr& e, const Refs& in) { e.unary(UnaryFn::kSigmoid, e.binary(BinaryFn::kAdd, in[0], in[1])); });
  }
  expr(l, {block(l, a, 2, H), r, block(l, b, 2, H)}, n, [](ir::Expr& e, const Refs& in) {
    e.unary(UnaryFn::kTanh, e.binary(BinaryFn::kAdd, in[0], e.binary(BinaryFn::kMul, in[1], in[2])));
  });
  copy(l, l.view(hx), block(l, ws, 3, H));
  copy(l, block(l, b, 2, H), block(l, ws, 4, H));
  expr(l, {n, z, l.view(hx)}, l.view(hy), [](ir::Expr& e, const Refs& in) {
    e.binary(BinaryFn::kAdd, in[0], e.binary(BinaryFn::kMul, in[1], e.binary(BinaryFn::kSub, in[2], in[0])));
  });
  if (!run_or_fall_back(l, c)) return;
  c.finish({hy, ws});
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias):
//   dn = g (1 - z)(1 - n^2);  dz = g (hx - n) z(1 - z);  dr = dn * b_n * r(1 - r);
//   input gates (dr, dz, dn); hidden gates (dr, dz, dn * r); grad_hx = g * z.
void gru_cell_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor gh = c.at(0).toTensor(), ws = c.at(1).toTensor();
  const bool has_bias = c.at(2).toBool();
  if (!supported({&gh, &ws}) || c.out()) return c.fall_back();
  const int64_t H = gh.size(1);
  TORCH_CHECK(ws.size(1) == 5 * H && ws.size(0) == gh.size(0), "_thnn_fused_gru_cell_backward: workspace ", ws.sizes(),
              " does not match grad_hy ", gh.sizes());
  const auto opts = ws.options();
  at::Tensor gi = at::empty({gh.size(0), 3 * H}, opts), ghg = at::empty({gh.size(0), 3 * H}, opts);
  at::Tensor ghx = at::empty(gh.sizes(), gh.options());
  at::Tensor gib = has_bias ? at::empty({3 * H}, opts) : at::Tensor();
  at::Tensor ghb = has_bias ? at::empty({3 * H}, opts) : at::Tensor();
  if (gh.numel() == 0) {
    for (at::Tensor* t : {&gib, &ghb}) {
      if (t->defined()) t->zero_();
    }
    return c.finish({gi, ghg, ghx, gib, ghb});
  }
  Launch l;
  const uint32_t r = block(l, ws, 0, H), z = block(l, ws, 1, H), n = block(l, ws, 2, H), hx = block(l, ws, 3, H),
                 bn = block(l, ws, 4, H);
  const uint32_t dr = block(l, gi, 0, H), dz = block(l, gi, 1, H), dn = block(l, gi, 2, H);
  expr(l, {l.view(gh), z, n}, dn, [](ir::Expr& e, const Refs& in) {
    e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, in[0], e.binary(BinaryFn::kSub, e.constant(1.0), in[1])),
             tanh_grad(e, in[2]));
  });
  const at::Tensor t = l.scratch(gh.sizes(), gh);
  expr(l, {l.view(gh), hx, n}, l.view(t),
       [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kMul, in[0], e.binary(BinaryFn::kSub, in[1], in[2])); });
  expr(l, {l.view(t), z}, dz,
       [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kMul, in[0], sigmoid_grad(e, in[1])); });
  expr(l, {dn, bn, r}, dr, [](ir::Expr& e, const Refs& in) {
    e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, in[0], in[1]), sigmoid_grad(e, in[2]));
  });
  copy(l, l.view(gi, 0, {gh.size(0), 2 * H}, {3 * H, 1}), l.view(ghg, 0, {gh.size(0), 2 * H}, {3 * H, 1}));
  expr(l, {dn, r}, block(l, ghg, 2, H), [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kMul, in[0], in[1]); });
  expr(l, {l.view(gh), z}, l.view(ghx), [](ir::Expr& e, const Refs& in) { e.binary(BinaryFn::kMul, in[0], in[1]); });
  if (has_bias) {
    bias_grad(l, gi, gib);
    bias_grad(l, ghg, ghb);
  }
  if (!run_or_fall_back(l, c)) return;
  c.finish({gi, ghg, ghx, gib, ghb});
}

const bool g_registered = [] {
  register_boxed({"_thnn_fused_lstm_cell"}, {""}, &lstm_cell_kernel);
  register_boxed({"_thnn_fused_lstm_cell_backward_impl"}, {""}, &lstm_cell_backward_kernel);
  register_boxed({"_thnn_fused_gru_cell"}, {""}, &gru_cell_kernel);
  register_boxed({"_thnn_fused_gru_cell_backward"}, {""}, &gru_cell_backward_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
