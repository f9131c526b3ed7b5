// Scans and selection on the device: cumsum and cumprod along any dim (moved last, contiguous),
// accumulating fp16 and bf16 in fp32 and integers in int64 as torch does; and topk, by k rounds of
// max (or min) and arg-max, each masking the element it took. One launch each.
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
  at::Tensor out = c.inplace() ? self : (c.out() ? *c.out() : at::empty(self.sizes(), self.options().dtype(type)));
  if (c.out()) at::native::resize_output(out, self.sizes());
  if (out.numel() == 0) return c.finish(out);
  const at::Tensor x = (self.dim() == 0 ? self.view({1}) : self).movedim(dim, -1).contiguous();
  const bool direct = out.dim() > 0 && dim == out.dim() - 1 && out.stride(-1) == 1 && !c.inplace();
  const at::Tensor result = direct ? out : at::empty(x.sizes(), out.options());
  const hw::DType t = *device_dtype(type);
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

// topk(self, k, dim, largest, sorted) -> (values, indices), sorted; NaN counts as the largest.
void topk_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  const int64_t k = c.at(1).toInt();
  const int64_t dim = at::maybe_wrap_dim(c.at(2).toInt(), std::max<int64_t>(self.dim(), 1));
  const bool largest = c.at(3).toBool();
  const int64_t n = self.dim() == 0 ? 1 : self.size(dim);
  TORCH_CHECK(k >= 0 && k <= n, "selected index k out of range");
  // Each round is a few ops of one launch: beyond 64 rounds, a sort would serve better.
  if (!device_dtype(self.scalar_type()) || self.scalar_type() == at::kBool || k > 64 || c.out()) return c.fall_back();
  std::vector<int64_t> sizes = self.sizes().vec();
  if (self.dim() > 0) sizes[static_cast<size_t>(dim)] = k;
  at::Tensor values = at::empty(sizes, self.options()), indices = at::empty(sizes, self.options().dtype(at::kLong));
  if (values.numel() == 0) return c.finish({values, indices});
  const at::Tensor x = (self.dim() == 0 ? self.view({1}) : self).movedim(dim, -1).contiguous();
  const int64_t rows = x.numel() / n;
  const at::Tensor vals = at::empty({rows, k}, self.options()),
                   idx = at::empty({rows, k}, self.options().dtype(at::kLong));
  const hw::DType t = *device_dtype(self.scalar_type());
  // What replaces a taken element: the type's far end, so that it is never taken again.
  double taken = largest ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  if (!at::isFloatingType(self.scalar_type())) {
    AT_DISPATCH_INTEGRAL_TYPES(self.scalar_type(), "topk", [&] {
      taken =
          static_cast<double>(largest ? std::numeric_limits<scalar_t>::lowest() : std::numeric_limits<scalar_t>::max());
    });
  }
  Launch l;
  const at::Tensor work = l.scratch({rows, n}, self, self.scalar_type());
  const at::Tensor mask = l.scratch({rows, 1}, self, self.scalar_type());
  ir::Pointwise copy;
  copy.kind = ir::PointwiseKind::kCopy;
  copy.compute = t;
  copy.inputs = {ir::Operand::of(l.view(x.view({rows, n})))};
  copy.out = l.view(work);
  l.pointwise(copy);
  ir::Pointwise fill;
  fill.kind = ir::PointwiseKind::kFill;
  fill.compute = t;
  fill.start = taken;
  fill.out = l.view(mask);
  l.pointwise(fill);
  const uint32_t wv = l.view(work);
  for (int64_t i = 0; i < k; ++i) {
    for (const bool arg : {false, true}) {
      ir::Reduce r;
      r.fn = arg ? (largest ? hw::ReduceFn::kArgMax : hw::ReduceFn::kArgMin)
                 : (largest ? hw::ReduceFn::kMax : hw::ReduceFn::kMin);
      r.compute = t;
      r.in = wv;
      r.out = l.view(arg ? idx.narrow(1, i, 1) : vals.narrow(1, i, 1));
      r.dims = {1};
      l.reduce(r);
    }
    if (i + 1 == k) break;
    ir::Op s;  // mask what this round took
    s.family = ir::Op::Family::kIndex;
    s.index.kind = ir::Index::Kind::kScatter;
    s.index.table = l.view(work, {rows, n, 1}, {n, 1, 1});
    s.index.index = l.view(idx.narrow(1, i, 1));
    s.index.rows = l.view(mask, {rows, 1, 1}, {1, 1, 1});
    l.graph().ops.push_back(s);
  }
  if (!run_or_fall_back(l, c)) return;
  std::vector<int64_t> moved = x.sizes().vec();
  moved.back() = k;
  values.copy_(vals.view(moved).movedim(-1, self.dim() == 0 ? 0 : dim).view(values.sizes()));
  indices.copy_(idx.view(moved).movedim(-1, self.dim() == 0 ? 0 : dim).view(indices.sizes()));
  c.finish({values, indices});
}

const bool g_registered = [] {
  register_boxed({"topk"}, {""}, &topk_kernel);
  register_boxed(with_inplace({"cumsum", "cumprod"}), {"", "out"}, &scan_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
