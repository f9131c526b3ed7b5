// Losses on the device: nll_loss forward and backward (cross_entropy is log_softmax + nll_loss),
// each one launch: the target's log-probability of each row is gathered by index (one element per
// sample), masked where the target is ignore_index, weighted, and reduced; the backward scatters
// the scaled gradient back to the same positions of a zero tensor.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <limits>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend {
namespace {

using hw::BinaryFn;
constexpr hw::DType kF32 = hw::DType::kF32;
enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

void index_op(Launch& l, ir::Index::Kind kind, uint32_t table, uint32_t index, uint32_t rows) {
  ir::Op op;
  op.family = ir::Op::Family::kIndex;
  op.index.kind = kind;
  op.index.table = table;
  op.index.index = index;
  op.index.rows = rows;
  l.graph().ops.push_back(op);
}

// What forward and backward share: the samples as [N, C], the targets made safe for indexing
// (ignored ones point at class 0) and each sample's weight (0 where ignored), both [N, 1].
struct Targets {
  at::Tensor input, safe, weight;
  int64_t n = 0, classes = 0;
};

Targets prepare(Launch& l, const at::Tensor& self, const at::Tensor& target, const c10::IValue* class_weight,
                int64_t ignore_index) {
  Targets p;
  p.input = self.dim() == 1 ? self.unsqueeze(0) : self;
  p.n = p.input.size(0);
  p.classes = p.input.size(1);
  const uint32_t tv = l.view(target.reshape({p.n, 1}));
  p.safe = l.scratch({p.n, 1}, self, at::kLong);
  p.weight = l.scratch({p.n, 1}, self);
  const double ignore = static_cast<double>(ignore_index);
  ir::Expr safe(hw::DType::kI64);
  const int32_t ti = safe.input(ir::Operand::of(tv));
  safe.select(safe.binary(BinaryFn::kEq, ti, safe.constant(ignore)), safe.constant(0), ti);
  l.add(safe.done(l.view(p.safe)));
  ir::Expr w(kF32);
  const int32_t valid = w.binary(BinaryFn::kNe, w.input(ir::Operand::of(tv)), w.constant(ignore));
  int32_t per_class = w.constant(1.0);
  if (class_weight) {  // the weight of each sample's class: a gather of one-element rows
    const at::Tensor& cw = class_weight->toTensor();
    const at::Tensor gathered = l.scratch({p.n, 1}, self, cw.scalar_type());
    index_op(l, ir::Index::Kind::kGather, l.view(cw, {cw.size(0), 1}, {cw.stride(0), 1}), l.view(p.safe, {p.n}, {1}),
             l.view(gathered));
    per_class = w.input(ir::Operand::of(l.view(gathered)));
  }
  w.select(valid, per_class, w.constant(0.0));
  l.add(w.done(l.view(p.weight)));
  return p;
}

// The [N, C] input as a table of one-element rows per sample: [N, C, 1] against indices [N, 1].
uint32_t per_sample_table(Launch& l, const at::Tensor& t) {
  return l.view(t, {t.size(0), t.size(1), 1}, {t.stride(0), t.stride(1), 1});
}

void sum_all(Launch& l, uint32_t in, uint32_t out) {
  reduce(l, hw::ReduceFn::kSum, in, out, {0, 1});
}

bool supported(const at::Tensor& self, const at::Tensor& target, const c10::IValue* weight) {
  return at::isFloatingType(self.scalar_type()) && device_dtype(self.scalar_type()) && self.dim() >= 1 &&
         target.scalar_type() == at::kLong && target.is_privateuseone() &&
         (!weight || weight->toTensor().is_privateuseone());
}

// nll_loss2d's [N, C, d...] input as nll_loss's [N * d..., C] (the class dim moved last).
at::Tensor samples_by_classes(const at::Tensor& self) {
  return self.dim() <= 2 ? self : self.movedim(1, -1).reshape({-1, self.size(1)});
}

// nll_loss_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight):
// loss_i = -self[i, target_i] * w_i, summed, or divided by sum(w) for the mean, or kept per sample.
void nll_loss_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor original = c.at(0).toTensor(), spatial_target = c.at(1).toTensor();
  const c10::IValue* weight = c.get("weight");
  const int64_t reduction = c.at(3).toInt(), ignore = c.at(4).toInt();
  if (!supported(original, spatial_target, weight) || c.out()) return c.fall_back();
  const at::Tensor self = samples_by_classes(original);
  const at::Tensor target = original.dim() > 2 ? spatial_target.reshape({-1}) : spatial_target;
  const int64_t n = self.dim() == 1 ? 1 : self.size(0);
  TORCH_CHECK(target.numel() == n, "nll_loss: expected ", n, " targets, got ", target.numel());
  const bool per_sample = reduction == kNone && self.dim() == 2;
  at::Tensor output = per_sample ? at::empty({n}, self.options()) : at::empty({}, self.options());
  at::Tensor total = at::empty({}, self.options());
  if (n == 0) {
    output.fill_(reduction == kMean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    total.zero_();
    return c.finish({output, total});
  }
  Launch l;
  const Targets p = prepare(l, self, target, weight, ignore);
  const at::Tensor picked = l.scratch({p.n, 1}, self, self.scalar_type());
  index_op(l, ir::Index::Kind::kGather, per_sample_table(l, p.input), l.view(p.safe),
           l.view(picked, {p.n, 1, 1}, {1, 1, 1}));
  const at::Tensor loss = per_sample ? output.view({n, 1}) : l.scratch({p.n, 1}, self);
  ir::Expr e(kF32);
  e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, e.input(ir::Operand::of(l.view(picked))), e.constant(-1.0)),
           e.input(ir::Operand::of(l.view(p.weight))));
  l.add(e.done(l.view(loss)));
  const at::Tensor tw = l.scratch({1, 1}, self);
  sum_all(l, l.view(p.weight), l.view(tw));
  if (!per_sample) {
    const at::Tensor s = l.scratch({1, 1}, self);
    sum_all(l, l.view(loss), l.view(s));
    ir::Expr r(kF32);
    const int32_t sv = r.input(ir::Operand::of(l.view(s)));
    if (reduction == kMean) {
      r.binary(BinaryFn::kDiv, sv, r.input(ir::Operand::of(l.view(tw))));
    } else {
      r.unary(hw::UnaryFn::kCopy, sv);
    }
    l.add(r.done(l.view(output.view({1, 1}))));
  }
  ir::Expr t(kF32);
  t.unary(hw::UnaryFn::kCopy, t.input(ir::Operand::of(l.view(tw))));
  l.add(t.done(l.view(total.view({1, 1}))));
  if (!run_or_fall_back(l, c)) return;
  c.finish({per_sample ? output.view(spatial_target.sizes()) : output, total});
}

// nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight):
// grad_input[i, target_i] = -grad_i * w_i (/ total_weight for the mean), zero elsewhere.
void nll_loss_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor original = c.at(1).toTensor(), spatial_target = c.at(2).toTensor();
  const c10::IValue* weight = c.get("weight");
  const int64_t reduction = c.at(4).toInt(), ignore = c.at(5).toInt();
  const at::Tensor total = c.at(6).toTensor();
  if (!supported(original, spatial_target, weight) || c.out() || !c.at(0).toTensor().is_privateuseone()) {
    return c.fall_back();
  }
  const at::Tensor self = samples_by_classes(original);
  const at::Tensor target = original.dim() > 2 ? spatial_target.reshape({-1}) : spatial_target;
  const at::Tensor grad =
      original.dim() > 2 && reduction == kNone ? c.at(0).toTensor().reshape({-1}) : c.at(0).toTensor();
  at::Tensor grad_input = at::empty(self.sizes(), self.options());
  grad_input.zero_();
  const int64_t n = self.dim() == 1 ? 1 : self.size(0);
  if (n == 0) return c.finish(grad_input);
  Launch l;
  const Targets p = prepare(l, self, target, weight, ignore);
  const at::Tensor values = l.scratch({p.n, 1}, self, self.scalar_type());
  const bool per_sample = reduction == kNone && self.dim() == 2;
  // CPU's order: scale = -(grad / total_weight) for the mean, value = scale * weight; an ignored
  // sample's value is zero, even when every sample is ignored (scale 0 / 0).
  const at::Tensor scale = per_sample ? grad.reshape({n, 1}) : l.scratch({1, 1}, self, self.scalar_type());
  if (!per_sample) {
    ir::Expr s(kF32);
    int32_t v = s.binary(BinaryFn::kMul, s.input(ir::Operand::of(l.view(grad.reshape({1, 1})))), s.constant(-1.0));
    if (reduction == kMean) v = s.binary(BinaryFn::kDiv, v, s.input(ir::Operand::of(l.view(total.reshape({1, 1})))));
    l.add(s.done(l.view(scale)));
  }
  ir::Expr e(kF32);
  int32_t v =
      e.binary(BinaryFn::kMul, e.input(ir::Operand::of(l.view(scale))), e.input(ir::Operand::of(l.view(p.weight))));
  if (per_sample) v = e.binary(BinaryFn::kMul, v, e.constant(-1.0));
  const int32_t target_value = e.input(ir::Operand::of(l.view(target.reshape({n, 1}))));
  e.select(e.binary(BinaryFn::kNe, target_value, e.constant(static_cast<double>(ignore))), v, e.constant(0.0));
  l.add(e.done(l.view(values)));
  const at::Tensor gi = self.dim() == 1 ? grad_input.unsqueeze(0) : grad_input;
  index_op(l, ir::Index::Kind::kScatter, per_sample_table(l, gi), l.view(p.safe),
           l.view(values, {p.n, 1, 1}, {1, 1, 1}));
  if (!run_or_fall_back(l, c)) return;
  if (original.dim() > 2) {  // back to [N, C, d...]
    std::vector<int64_t> moved = original.movedim(1, -1).sizes().vec();
    grad_input = grad_input.view(moved).movedim(-1, 1).contiguous();
  }
  c.finish(grad_input);
}

const bool g_registered = [] {
  register_boxed({"nll_loss_forward", "nll_loss2d_forward"}, {""}, &nll_loss_kernel);
  register_boxed({"nll_loss_backward", "nll_loss2d_backward"}, {""}, &nll_loss_backward_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
