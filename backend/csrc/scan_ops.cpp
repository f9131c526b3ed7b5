// Scans, sorting and selection on the device: cumsum and cumprod along any dim (moved last,
// contiguous), accumulating fp16 and bf16 in fp32 and integers in int64 as torch does; sort (so
// argsort and msort), stable, each row sorted whole in a core's scratchpad; and topk, by k rounds
// of max (or min) and arg-max, each masking the element it took, or for a larger k by a sort.
// One launch each.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <limits>

#include "boxed.h"
#include "compute.h"

namespace spyre::backend {
namespace {

void scan_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const int64_t dim = at::maybe_wrap_dim(c.at(1).toInt(), std::max<int64_t>(self.dim(), 1));
  at::ScalarType type = at::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type();
  if (const c10::IValue* d = c.get("dtype")) type = d->toScalarType();
  if (c.inplace()) type = self.scalar_type();
  if (!device_dtype(type) || !device_dtype(self.scalar_type()) || type == at::kBool) return c.fall_back();
  const at::Tensor out =
      c.inplace() ? self : c.out_or(self.sizes(), [&] { return at::empty(self.sizes(), self.options().dtype(type)); });
  if (out.numel() == 0) return c.finish(out);
  const at::Tensor x = (self.dim() == 0 ? self.view({1}) : self).movedim(dim, -1).contiguous();
  const bool direct = out.dim() > 0 && dim == out.dim() - 1 && out.stride(-1) == 1 && !c.inplace();
  const at::Tensor result = direct ? out : at::empty(x.sizes(), out.options());
  const hw::DType t = checked_device_dtype(type);
  Launch l;
  ir::Op o;
  o.family = ir::Op::Family::kScan;
  o.scan.fn = c.base() == "cumprod" ? hw::ScanFn::kProd : hw::ScanFn::kSum;
  o.scan.compute = t == hw::DType::kF16 || t == hw::DType::kBF16 ? hw::DType::kF32
                   : hw::dtype_is_float(t)                       ? t
                                                                 : hw::DType::kI64;
  o.scan.in = l.view(x);
  o.scan.out = l.view(result);
  l.graph().ops.push_back(o);
  if (!run_or_fall_back(l, c)) return;
  if (!direct) (out.dim() == 0 ? out.view({1}) : out).copy_(result.movedim(-1, dim));
  c.finish(out);
}

// Sorts each row of x [..., n] (contiguous) into vals and idx of its shape, stable, NaN counting
// as the largest. False when the compiler does not take it (a row longer than a scratchpad holds).
bool sort_rows(const at::Tensor& x, bool descending, const at::Tensor& vals, const at::Tensor& idx,
               const BoxedCall& c) {
  Launch l;
  ir::Op op;
  op.family = ir::Op::Family::kSort;
  op.sort.in = l.view(x);
  op.sort.values = l.view(vals);
  op.sort.indices = l.view(idx);
  op.sort.descending = descending;
  l.graph().ops.push_back(op);
  return try_run(l, c);
}

// sort(self, stable?, dim, descending) -> (values, indices): always stable, as CPU torch's is, so
// tied elements keep their order and the indices match CPU's.
void sort_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const int64_t dim = at::maybe_wrap_dim(c.get("dim")->toInt(), std::max<int64_t>(self.dim(), 1));
  const bool descending = c.get("descending")->toBool();
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  const bool out = c.overload().rfind("values", 0) == 0;
  // New results take self's layout, as CPU's.
  at::Tensor values = out ? c.get("values")->toTensor() : at::empty_like(self);
  at::Tensor indices = out ? c.get("indices")->toTensor() : at::empty_like(self, self.options().dtype(at::kLong));
  if (out) {
    TORCH_CHECK(values.scalar_type() == self.scalar_type() && indices.scalar_type() == at::kLong,
                "sort: expected values of the input's type and int64 indices");
    at::native::resize_output(values, self.sizes());
    at::native::resize_output(indices, self.sizes());
  }
  if (self.numel() == 0) return c.finish({values, indices});
  const at::Tensor x = (self.dim() == 0 ? self.view({1}) : self).movedim(dim, -1).contiguous();
  const at::Tensor vals = at::empty(x.sizes(), x.options()), idx = at::empty(x.sizes(), x.options().dtype(at::kLong));
  if (!sort_rows(x, descending, vals, idx, c)) return c.fall_back();
  const int64_t back = self.dim() == 0 ? 0 : dim;
  values.copy_(vals.movedim(-1, back).view(self.sizes()));
  indices.copy_(idx.movedim(-1, back).view(self.sizes()));
  c.finish({values, indices});
}

// topk(self, k, dim, largest, sorted) -> (values, indices), sorted; NaN counts as the largest.
// Each of k rounds finds the best value m among the elements not yet taken, then the first such
// element equal to m: a flag per element says which are still in play, so a real element equal to
// the value that replaces taken ones (-inf, say) is never confused with a taken one.
void topk_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const int64_t k = c.at(1).toInt();
  const int64_t dim = at::maybe_wrap_dim(c.at(2).toInt(), std::max<int64_t>(self.dim(), 1));
  const bool largest = c.at(3).toBool();
  const int64_t n = self.dim() == 0 ? 1 : self.size(dim);
  TORCH_CHECK(k >= 0 && k <= n, "selected index k out of range");
  if (!device_dtype(self.scalar_type()) || self.scalar_type() == at::kBool || c.out()) return c.fall_back();
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim() > 0) sizes[static_cast<size_t>(dim)] = k;
  at::Tensor values = at::empty(sizes, self.options()), indices = at::empty(sizes, self.options().dtype(at::kLong));
  if (values.numel() == 0) return c.finish({values, indices});
  const at::Tensor x = (self.dim() == 0 ? self.view({1}) : self).movedim(dim, -1).contiguous();
  const int64_t rows = x.numel() / n;
  std::vector<int64_t> moved = x.sizes().vec();
  moved.back() = k;
  const auto finish = [&](const at::Tensor& vals, const at::Tensor& idx) {
    values.copy_(vals.reshape(moved).movedim(-1, self.dim() == 0 ? 0 : dim).view(values.sizes()));
    indices.copy_(idx.reshape(moved).movedim(-1, self.dim() == 0 ? 0 : dim).view(indices.sizes()));
    c.finish({values, indices});
  };
  // Each round is a few ops of one launch: beyond 64 rounds a sort serves better. The smallest
  // of a float row sort too: the rounds' minimum lets a NaN win, where NaN counts as largest.
  if (k > 64 || (!largest && at::isFloatingType(self.scalar_type()))) {
    const at::Tensor sv = at::empty({rows, n}, self.options()),
                     si = at::empty({rows, n}, self.options().dtype(at::kLong));
    if (!sort_rows(x.view({rows, n}), largest, sv, si, c)) return c.fall_back();
    return finish(sv.narrow(1, 0, k), si.narrow(1, 0, k));
  }
  const at::Tensor vals = at::empty({rows, k}, self.options()),
                   idx = at::empty({rows, k}, self.options().dtype(at::kLong));
  const hw::DType t = checked_device_dtype(self.scalar_type());
  const bool is_float = at::isFloatingType(self.scalar_type());
  // What replaces a taken element (the type's far end), so that it never is the best value again.
  double taken = largest ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  std::optional<int64_t> taken_int;  // for integers, exactly (INT64_MAX is no double)
  if (!is_float) {
    AT_DISPATCH_INTEGRAL_TYPES(self.scalar_type(), "topk", [&] {
      taken_int = static_cast<int64_t>(largest ? std::numeric_limits<scalar_t>::lowest()
                                               : std::numeric_limits<scalar_t>::max());
      taken = static_cast<double>(*taken_int);
    });
  }
  Launch l;
  const at::Tensor work = l.scratch({rows, n}, self, self.scalar_type());
  const at::Tensor in_play = l.scratch({rows, n}, self, self.scalar_type());  // 1, then 0 once taken
  const at::Tensor best = l.scratch({rows, 1}, self, self.scalar_type());
  const at::Tensor score = l.scratch({rows, n}, self, self.scalar_type());
  const at::Tensor fills = l.scratch({rows, 2}, self, self.scalar_type());  // [taken, 0] per row
  // A launch names at most kMaxLaunchArgs tensors and a column of idx would be one more each, so
  // each round's index lands in `chosen` and is selected into its column of idx by column number.
  const at::Tensor chosen = l.scratch({rows, 1}, self, at::kLong);
  const at::Tensor column = l.scratch({1, k}, self, at::kLong);
  const auto fill = [&](const at::Tensor& dst, double value, std::optional<int64_t> exact = std::nullopt) {
    ir::Pointwise f;
    f.kind = ir::PointwiseKind::kFill;
    f.compute = t;
    f.start = value;
    f.start_int = exact ? exact : ir::Operand::exact(value);
    f.out = l.view(dst);
    l.add(f);
  };
  {  // work = x; the smallest first puts NaN last, so NaN plays as +inf there (values come from x)
    ir::Expr e(t);
    const int32_t v = e.input(ir::Operand::of(l.view(x.view({rows, n}))));
    if (is_float && !largest) {
      e.select(e.binary(hw::BinaryFn::kNe, v, v), e.constant(std::numeric_limits<double>::infinity()), v);
    } else {
      e.unary(hw::UnaryFn::kCopy, v);
    }
    l.add(e.done(l.view(work)));
  }
  {
    ir::Pointwise iota;
    iota.kind = ir::PointwiseKind::kIota;
    iota.compute = hw::DType::kI64;
    iota.out = l.view(column);
    l.add(iota);
  }
  fill(in_play, 1.0);
  {  // idx = 0: each round selects into one column and keeps the others, which must be defined
    ir::Pointwise zero;
    zero.kind = ir::PointwiseKind::kFill;
    zero.compute = hw::DType::kI64;
    zero.start = 0.0;
    zero.start_int = 0;
    zero.out = l.view(idx);
    l.add(zero);
  }
  fill(fills.narrow(1, 0, 1), taken, taken_int);
  fill(fills.narrow(1, 1, 1), 0.0);
  const uint32_t wv = l.view(work);
  const auto reduce_rows = [&](hw::ReduceFn fn, uint32_t in, const at::Tensor& out) {
    reduce(l, fn, in, l.view(out), {1}, t);
  };
  const auto scatter = [&](const at::Tensor& table, const at::Tensor& at, const at::Tensor& value) {
    ir::Op s;
    s.family = ir::Op::Family::kIndex;
    s.index.kind = ir::Index::Kind::kScatter;
    s.index.table = l.view(table, {rows, n, 1}, {n, 1, 1});
    s.index.index = l.view(at);
    s.index.rows = l.view(value, {rows, 1, 1}, {2, 1, 1});
    l.graph().ops.push_back(s);
  };
  for (int64_t i = 0; i < k; ++i) {
    reduce_rows(largest ? hw::ReduceFn::kMax : hw::ReduceFn::kMin, wv, best);
    {  // score = in_play where work == best (NaN matching a NaN best), else 0; its argmax is the first
      ir::Expr e(t);
      const int32_t w = e.input(ir::Operand::of(wv));
      const int32_t m = e.input(ir::Operand::of(l.view(best, {rows, n}, {1, 0})));
      int32_t hit = e.binary(hw::BinaryFn::kEq, w, m);
      if (is_float && largest) {
        const int32_t both_nan =
            e.binary(hw::BinaryFn::kLogicalAnd, e.binary(hw::BinaryFn::kNe, w, w), e.binary(hw::BinaryFn::kNe, m, m));
        hit = e.binary(hw::BinaryFn::kLogicalOr, hit, both_nan);
      }
      e.select(hit, e.input(ir::Operand::of(l.view(in_play))), e.constant(0));
      l.add(e.done(l.view(score)));
    }
    reduce_rows(hw::ReduceFn::kArgMax, l.view(score), chosen);
    {  // idx[:, i] = chosen
      ir::Expr e(hw::DType::kI64);
      const int32_t col = e.input(ir::Operand::of(l.view(column, {rows, k}, {0, 1})));
      e.select(e.binary(hw::BinaryFn::kEq, col, e.constant(static_cast<double>(i))),
               e.input(ir::Operand::of(l.view(chosen, {rows, k}, {1, 0}))), e.input(ir::Operand::of(l.view(idx))));
      l.add(e.done(l.view(idx)));
    }
    if (i + 1 == k) break;
    scatter(work, chosen, fills.narrow(1, 0, 1));
    scatter(in_play, chosen, fills.narrow(1, 1, 1));
  }
  {  // values = x[row, idx]
    ir::Op g;
    g.family = ir::Op::Family::kIndex;
    g.index.kind = ir::Index::Kind::kGather;
    g.index.table = l.view(x.view({rows, n}), {rows, n, 1}, {n, 1, 1});
    g.index.index = l.view(idx);
    g.index.rows = l.view(vals, {rows, k, 1}, {k, 1, 1});
    l.graph().ops.push_back(g);
  }
  if (!run_or_fall_back(l, c)) return;
  finish(vals, idx);
}

const bool g_registered = [] {
  register_boxed({"topk"}, {""}, &topk_kernel);
  register_boxed({"sort"}, {"", "stable", "values", "values_stable"}, &sort_kernel);
  register_boxed(with_inplace({"cumsum", "cumprod"}), {"", "out"}, &scan_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
