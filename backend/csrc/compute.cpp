#include "compute.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <stdexcept>

#include "aten_util.h"
#include "runtime.h"
#include "spyre/compiler/program.h"

namespace spyre::backend {

std::optional<hw::DType> device_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return hw::DType::kF32;
    case c10::ScalarType::Half:
      return hw::DType::kF16;
    case c10::ScalarType::BFloat16:
      return hw::DType::kBF16;
    case c10::ScalarType::Int:
      return hw::DType::kI32;
    case c10::ScalarType::Char:
      return hw::DType::kI8;
    case c10::ScalarType::Bool:
      return hw::DType::kBool;
    case c10::ScalarType::Long:
      return hw::DType::kI64;
    default:
      return std::nullopt;
  }
}

uint32_t Launch::view(const at::Tensor& t) {
  return view(t, t.sizes(), t.strides());
}

uint32_t Launch::view(const at::Tensor& t, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  return view(t, 0, sizes, strides);
}

uint32_t Launch::view(const at::Tensor& t, int64_t offset, c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  TORCH_CHECK(t.is_privateuseone(), "spyre: expected a spyre tensor, got one on ", t.device());
  if (device_ < 0) device_ = t.device().index();
  TORCH_CHECK(t.device().index() == device_, "spyre: expected all tensors on spyre:", device_, ", got one on ",
              t.device());
  const std::optional<hw::DType> type = device_dtype(t.scalar_type());
  TORCH_CHECK(type, "spyre: internal: no device type for ", t.scalar_type());
  const uint64_t addr = device_addr(t);
  scratch_.push_back(t);
  uint32_t arg = 0;
  while (arg < args_.size() && (args_[arg] != addr || (arg < scalar_.size() && scalar_[arg]))) ++arg;
  if (arg == args_.size()) args_.push_back(addr);
  ir::View v;
  v.arg = arg;
  v.offset = offset;
  v.sizes.assign(sizes.begin(), sizes.end());
  v.strides.assign(strides.begin(), strides.end());
  v.dtype = *type;
  for (uint32_t i = 0; i < graph_.views.size(); ++i) {
    const ir::View& w = graph_.views[i];
    if (w.arg == v.arg && w.offset == v.offset && w.sizes == v.sizes && w.strides == v.strides && w.dtype == v.dtype) {
      return i;
    }
  }
  return graph_.add_view(std::move(v));
}

at::Tensor Launch::scratch(c10::IntArrayRef sizes, const at::Tensor& like, at::ScalarType type) {
  return scratch_.emplace_back(at::empty(sizes, like.options().dtype(type)));
}

void Launch::run(const std::string& op) {
  TORCH_CHECK(device_ >= 0, "spyre: internal: a launch without device tensors");
  graph_.num_args = static_cast<uint32_t>(args_.size());
  if (args_.size() > hw::kMaxLaunchArgs) {  // a graph the compiler cannot take: callers fall back
    throw std::invalid_argument(c10::str("spyre: a kernel needs ", args_.size(), " launch arguments, more than the ",
                                         hw::kMaxLaunchArgs, " a launch has"));
  }
  const c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device_)));
  DeviceRuntime& rt = DeviceRuntime::get(device_);
  rt.launch(graph_.signature(), [&] { return compiler::compile(graph_, rt.target()); }, args_, op);
}

bool try_run(Launch& l, const BoxedCall& c) {
  try {
    l.run(c.name());
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

bool run_or_fall_back(Launch& l, BoxedCall& c) {
  if (try_run(l, c)) return true;
  c.fall_back();
  return false;
}

void expr(Launch& l, const std::vector<uint32_t>& inputs, uint32_t out,
          const std::function<void(ir::Expr&, const std::vector<int32_t>&)>& build) {
  ir::Expr e(hw::DType::kF32);
  std::vector<int32_t> refs;
  for (uint32_t v : inputs) refs.push_back(e.input(ir::Operand::of(v)));
  build(e, refs);
  l.pointwise(e.done(out));
}

void reduce(Launch& l, hw::ReduceFn fn, uint32_t in, uint32_t out, std::vector<int64_t> dims, hw::DType compute) {
  ir::Reduce r;
  r.fn = fn;
  r.compute = compute;
  r.in = in;
  r.out = out;
  r.dims = std::move(dims);
  l.reduce(r);
}

bool device_copy(const at::Tensor& dst, const at::Tensor& src) {
  const std::optional<hw::DType> from = device_dtype(src.scalar_type()), to = device_dtype(dst.scalar_type());
  if (!from || !to) return false;
  if (dst.numel() == 0) return true;
  Launch l;
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kCopy;
  p.compute = *to;
  p.inputs = {ir::Operand::of(l.view(src))};
  p.out = l.view(dst);
  l.pointwise(std::move(p));
  l.run("aten::copy_");
  return true;
}

}  // namespace spyre::backend
