#include "pointwise_common.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>

#include <stdexcept>

namespace spyre::backend {

Value value_of(const c10::IValue& v) {
  if (!v.isTensor()) return {std::nullopt, v.toScalar(), std::nullopt};
  const at::Tensor& t = v.toTensor();
  if (t.is_privateuseone()) return {t, {}, std::nullopt};
  TORCH_CHECK(t.dim() == 0, "Expected all tensors to be on the same device, but found at least two devices, ",
              t.device(), " and spyre!");
  return {std::nullopt, t.item(), t};
}

at::ScalarType promote(const Value& a, const Value& b) {
  const std::optional<at::Tensor>& x = a.tensor ? a.tensor : a.host;
  const std::optional<at::Tensor>& y = b.tensor ? b.tensor : b.host;
  if (x && y) return at::result_type(*x, *y);
  if (x) return at::result_type(*x, b.scalar);
  if (y) return at::result_type(a.scalar, *y);
  return at::result_type(a.scalar, b.scalar);
}

bool on_device(std::initializer_list<at::ScalarType> types) {
  for (at::ScalarType t : types) {
    if (!device_dtype(t)) return false;
  }
  return true;
}

std::vector<int64_t> broadcast_shape(const std::vector<const Value*>& values) {
  std::vector<int64_t> shape;
  for (const Value* v : values) {
    if (v->tensor) shape = at::infer_size(shape, v->tensor->sizes());
  }
  return shape;
}

std::optional<at::Tensor> output(const BoxedCall& c, const at::Tensor& like, c10::IntArrayRef shape,
                                 at::ScalarType result, const std::vector<const Value*>& inputs) {
  at::Tensor out;
  if (c.inplace()) {
    out = c.at(0).toTensor();
    TORCH_CHECK(out.sizes() == shape, "output with shape ", out.sizes(), " doesn't match the broadcast shape ", shape);
  } else if (std::optional<at::Tensor> o = c.out()) {
    out = *o;
    if (!device_dtype(out.scalar_type())) return std::nullopt;
    at::native::resize_output(out, shape);
  } else {
    return at::empty(shape, like.options().dtype(result));
  }
  TORCH_CHECK(c10::canCast(result, out.scalar_type()), "result type ", result,
              " can't be cast to the desired output type ", out.scalar_type());
  if (!device_dtype(out.scalar_type())) return std::nullopt;
  at::assert_no_internal_overlap(out);
  for (const Value* v : inputs) {
    if (v->tensor) at::assert_no_partial_overlap(out, *v->tensor);
  }
  return out;
}

}  // namespace spyre::backend
