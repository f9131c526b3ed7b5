#include "compute.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <stdexcept>

#include "aten_util.h"
#include "runtime.h"
#include "spyre/compiler/errors.h"
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

hw::DType checked_device_dtype(c10::ScalarType t) {
  const std::optional<hw::DType> type = device_dtype(t);
  TORCH_CHECK(type, "spyre: internal: no device type for ", t);
  return *type;
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
  TORCH_CHECK(t.device().index() == device_, "spyre: expected all tensors on spyre:", static_cast<int>(device_),
              ", got one on ", t.device());
  const hw::DType type = checked_device_dtype(t.scalar_type());
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
  v.dtype = type;
  return add_view(std::move(v));
}

at::Tensor Launch::scratch(c10::IntArrayRef sizes, const at::Tensor& like, at::ScalarType type) {
  return scratch_.emplace_back(at::empty(sizes, like.options().dtype(type)));
}

uint32_t Launch::temp(const std::vector<int64_t>& sizes, hw::DType dtype) {
  if (temp_arg_ < 0) temp_arg_ = scalar_arg(0);  // the block's address is known at run()
  const uint64_t es = hw::dtype_size(dtype), align = compiler::ops::kTempAlign;
  temp_bytes_ = (temp_bytes_ + align - 1) / align * align;
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1, numel = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(sizes[i], 1);
    numel *= sizes[i];
  }
  ir::View v{static_cast<uint32_t>(temp_arg_), static_cast<int64_t>(temp_bytes_ / es), sizes, std::move(strides),
             dtype};
  temp_bytes_ += static_cast<uint64_t>(numel) * es;
  return add_view(std::move(v));
}

namespace {
// The title of a program launched for ATen op `op`: "aten::add_.Tensor" is "add",
// "aten::_softmax" "softmax" (the namespace, overload, in-place mark and leading underscores go).
std::string kernel_title(const std::string& op) {
  size_t begin = op.rfind("::");
  begin = begin == std::string::npos ? 0 : begin + 2;
  size_t end = op.find('.', begin);
  if (end == std::string::npos) end = op.size();
  while (begin < end && op[begin] == '_') ++begin;
  if (end > begin && op[end - 1] == '_') --end;
  return op.substr(begin, end - begin);
}
}  // namespace

void Launch::run(const std::string& op) {
  TORCH_CHECK(device_ >= 0, "spyre: internal: a launch without device tensors");
  graph_.num_args = static_cast<uint32_t>(args_.size());
  // A pointwise or reduction program's own name says how it runs; the op says what it is.
  if (graph_.title.empty() && !graph_.ops.empty() &&
      (graph_.ops.front().family == ir::Op::Family::kPointwise ||
       graph_.ops.front().family == ir::Op::Family::kReduce)) {
    graph_.title = kernel_title(op);
  }
  if (args_.size() > hw::kMaxLaunchArgs) {  // a graph the compiler cannot take: callers fall back
    throw compiler::Unsupported(c10::str("spyre: a kernel needs ", args_.size(), " launch arguments, more than the ",
                                         hw::kMaxLaunchArgs, " a launch has"));
  }
  const c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device_));
  if (temp_arg_ >= 0) {
    const at::Tensor block =
        at::empty({static_cast<int64_t>(std::max<uint64_t>(temp_bytes_, 1))},
                  at::TensorOptions().dtype(at::kByte).device(c10::DeviceType::PrivateUse1, device_));
    args_[static_cast<size_t>(temp_arg_)] = device_addr(block);
    scratch_.push_back(block);
  }
  DeviceRuntime& rt = DeviceRuntime::get(device_);
  rt.launch(graph_.signature(), [&] { return compiler::compile(graph_, rt.target()); }, args_, op);
}

bool try_run(Launch& l, const BoxedCall& c) {
  try {
    l.run(c.name());
    return true;
  } catch (const compiler::Unsupported& e) {  // a compiler::Malformed is a bug: it raises
    note_rejection(e.what());
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
  refs.reserve(inputs.size());
  for (uint32_t v : inputs) refs.push_back(e.input(ir::Operand::of(v)));
  build(e, refs);
  l.add(e.done(out));
}

void reduce(Launch& l, hw::ReduceFn fn, uint32_t in, uint32_t out, std::vector<int64_t> dims, hw::DType compute) {
  ir::Reduce r;
  r.fn = fn;
  r.compute = compute;
  r.in = in;
  r.out = out;
  r.dims = std::move(dims);
  l.add(r);
}

bool device_copy(const at::Tensor& dst, const at::Tensor& src) {
  const std::optional<hw::DType> from = device_dtype(src.scalar_type()), to = device_dtype(dst.scalar_type());
  if (!from || !to) return false;
  if (dst.numel() == 0) return true;
  Launch l;
  compiler::ops::Call call;
  call.op = "copy";
  call.args["src"] = compiler::ops::Arg::tensor(l.view(src));
  call.outs = {l.view(dst)};
  call.common = *from;
  call.result = *to;
  compiler::ops::lower(l, call);
  l.run("aten::copy_");
  return true;
}

namespace {

compiler::ops::Arg library_arg(const c10::IValue& v, Launch& l) {
  using compiler::ops::Arg;
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return {};
    if (t.is_privateuseone()) return Arg::tensor(l.view(t), t.numel() == 1);
    TORCH_CHECK(t.dim() == 0, "Expected all tensors to be on the same device, but found at least two devices, ",
                t.device(), " and spyre!");
    const c10::Scalar x = t.item();
    return x.isIntegral(/*includeBool=*/true) ? Arg::whole(x.toLong()) : Arg::num(x.toDouble());
  }
  if (v.isBool()) return Arg::boolean(v.toBool());
  if (v.isScalar()) {
    const c10::Scalar x = v.toScalar();
    return x.isIntegral(/*includeBool=*/false) ? Arg::whole(x.toLong()) : Arg::num(x.toDouble());
  }
  if (v.isString()) return Arg::string(v.toStringRef());
  if (v.isIntList()) return Arg::list(v.toIntVector());
  if (v.isTensorList()) {
    std::vector<uint32_t> views;
    for (const at::Tensor& t : v.toTensorVector()) views.push_back(l.view(t));
    return Arg::tensors(std::move(views));
  }
  return {};  // None, dtypes, layouts, devices: nothing a lowering reads
}

}  // namespace

compiler::ops::Call library_call(const BoxedCall& c, Launch& l, const std::vector<at::Tensor>& outs,
                                 at::ScalarType common, at::ScalarType result) {
  compiler::ops::Call call;
  call.op = c.base();
  const auto& args = c.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (c.is_out(i)) continue;
    call.args[args[i].name()] = library_arg(c.at(i), l);
  }
  for (const at::Tensor& t : outs) call.outs.push_back(t.defined() ? int64_t{l.view(t)} : -1);
  if (const std::optional<hw::DType> t = device_dtype(common)) call.common = *t;
  if (const std::optional<hw::DType> t = device_dtype(result)) call.result = *t;
  return call;
}

bool try_lower(Launch& l, const compiler::ops::Call& call, const BoxedCall& c) {
  try {
    compiler::ops::lower(l, call);
  } catch (const compiler::Unsupported& e) {
    note_rejection(e.what());
    return false;
  }
  return l.graph().ops.empty() || try_run(l, c);
}

bool lower_or_fall_back(Launch& l, const compiler::ops::Call& call, BoxedCall& c) {
  if (try_lower(l, call, c)) return true;
  c.fall_back();
  return false;
}

}  // namespace spyre::backend
