// Scans on the device: cumsum and cumprod along any dim (moved last, contiguous), one launch each,
// accumulating fp16 and bf16 in fp32 and integers in int64, as torch does.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

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
  try {
    l.run(c.name());
  } catch (const std::invalid_argument&) {
    return c.fall_back();
  }
  if (!direct) (out.dim() == 0 ? out.view({1}) : out).copy_(result.movedim(-1, dim));
  c.finish(out);
}

const bool g_registered = [] {
  register_boxed(with_inplace({"cumsum", "cumprod"}), {"", "out"}, &scan_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
