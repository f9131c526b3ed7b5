// Convolutions on the device. Torch routes every convolution of a PrivateUse1 tensor to
// convolution_overrideable (and its backward to convolution_backward_overrideable), which CPU has
// no kernel for: here they run the op library's lowering (backend/compiler/src/ops/conv.cpp) for
// float tensors, and CPU's own convolution and convolution_backward otherwise (other dtypes,
// shapes the library does not take), under the CPU fallback policy.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten_util.h"
#include "boxed.h"
#include "compute.h"

namespace spyre::backend {
namespace {

bool float_device_type(const at::Tensor& t) {
  return at::isFloatingType(t.scalar_type()) && device_dtype(t.scalar_type());
}

c10::OperatorHandle cpu_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

// The result's shape, as torch's convolution computes it.
std::vector<int64_t> output_shape(const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
                                  c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                                  c10::IntArrayRef output_padding, int64_t groups) {
  const int64_t dims = input.dim() - 2;
  const auto at = [](c10::IntArrayRef v, int64_t i, int64_t fallback) {
    return v.empty() ? fallback : v[v.size() == 1 ? 0 : static_cast<size_t>(i)];
  };
  std::vector<int64_t> out = {input.size(0), transposed ? weight.size(1) * groups : weight.size(0)};
  for (int64_t i = 0; i < dims; ++i) {
    const int64_t span = at(dilation, i, 1) * (weight.size(2 + i) - 1) + 1;
    out.push_back(transposed ? (input.size(2 + i) - 1) * at(stride, i, 1) - 2 * at(padding, i, 0) + span +
                                   at(output_padding, i, 0)
                             : (input.size(2 + i) + 2 * at(padding, i, 0) - span) / at(stride, i, 1) + 1);
  }
  return out;
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups): the same arguments as convolution, so the fallback is CPU's convolution.
void convolution_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor input = c.at(0).toTensor(), weight = c.at(1).toTensor();
  const c10::IValue* b = c.get("bias");
  const at::Tensor bias = b ? b->toTensor() : at::Tensor();
  const auto fall_back = [&] { run_on_cpu_as(op, cpu_op("aten::convolution"), stack); };
  const bool same =
      weight.scalar_type() == input.scalar_type() && (!bias.defined() || bias.scalar_type() == input.scalar_type());
  if (!float_device_type(input) || !same || input.dim() < 3 || input.dim() > 5) return fall_back();
  const std::vector<int64_t> shape =
      output_shape(input, weight, c.at(3).toIntVector(), c.at(4).toIntVector(), c.at(5).toIntVector(), c.at(6).toBool(),
                   c.at(7).toIntVector(), c.at(8).toInt());
  const at::Tensor out = at::empty(shape, input.options());
  Launch l;
  if (!try_lower(l, library_call(c, l, {out}, input.scalar_type(), input.scalar_type()), c)) return fall_back();
  c.finish(out);
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
// transposed, output_padding, groups, output_mask); CPU's convolution_backward takes the bias's
// sizes after the weight.
void convolution_backward_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor grad = c.at(0).toTensor(), input = c.at(1).toTensor(), weight = c.at(2).toTensor();
  const bool transposed = c.at(6).toBool();
  const int64_t groups = c.at(8).toInt();
  const std::vector<bool> mask = c.at(9).toBoolList().vec();
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  const auto fall_back = [&] {
    stack->insert(stack->end() - 7, c10::IValue(std::vector<int64_t>{channels}));  // bias_sizes
    run_on_cpu_as(op, cpu_op("aten::convolution_backward"), stack);
  };
  const bool same = grad.scalar_type() == input.scalar_type() && weight.scalar_type() == input.scalar_type();
  if (!float_device_type(input) || !same || input.dim() < 3 || input.dim() > 5) return fall_back();
  const at::Tensor gi = mask[0] ? at::empty_like(input, at::MemoryFormat::Contiguous) : at::Tensor();
  const at::Tensor gw = mask[1] ? at::empty_like(weight, at::MemoryFormat::Contiguous) : at::Tensor();
  const at::Tensor gb = mask[2] ? at::empty({channels}, grad.options()) : at::Tensor();
  Launch l;
  if (!try_lower(l, library_call(c, l, {gi, gw, gb}, input.scalar_type(), input.scalar_type()), c)) {
    return fall_back();
  }
  c.finish({gi, gw, gb});
}

const bool g_registered = [] {
  register_boxed({"convolution_overrideable"}, {""}, &convolution_kernel);
  register_boxed({"convolution_backward_overrideable"}, {""}, &convolution_backward_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
