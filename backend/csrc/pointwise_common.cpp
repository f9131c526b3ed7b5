#include "pointwise_common.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace spyre::backend {

Value value_of(const c10::IValue& v) {
  if (!v.isTensor()) return {std::nullopt, v.toScalar(), std::nullopt};
  const at::Tensor& t = v.toTensor();
  if (t.is_privateuseone()) return {t, {}, std::nullopt};
  TORCH_CHECK(t.dim() == 0, "Expected all tensors to be on the same device, but found at least two devices, ",
              t.device(), " and spyre!");
  return {std::nullopt, t.item(), t};
}

namespace {

// A stand-in for argument `v` on the CPU: same dtype and rank, no elements (a 0-dim tensor keeps
// its one element, a one: a zero would make integer division raise where the data may not).
c10::IValue stand_in(const c10::IValue& v) {
  if (!v.isTensor()) return v;
  const at::Tensor& t = v.toTensor();
  if (!t.defined()) return v;
  const at::TensorOptions cpu = t.options().device(c10::kCPU);
  if (t.dim() == 0) return at::ones({}, cpu);
  return at::empty(std::vector<int64_t>(static_cast<size_t>(t.dim()), 0), cpu);
}

void append_type(std::string& key, const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    key += t.defined() ? c10::str(t.scalar_type(), ':', t.dim()) : "u";  // the stand-in's type and rank
  } else if (v.isScalar()) {
    key += v.isDouble() ? 'd' : (v.isBool() ? 'b' : (v.isComplexDouble() ? 'c' : 'i'));
  } else if (v.isString()) {
    key += v.toStringRef();
  } else {
    key += v.tagKind();
  }
  key += ',';
}

}  // namespace

void check_types_as_cpu(const BoxedCall& c) {
  struct Verdict {
    bool ok = true;
    bool type_error = false;
    bool not_implemented = false;
    std::string message;
  };
  static std::mutex mu;
  static std::unordered_map<std::string, Verdict> seen;
  std::string key = c.name() + ':';
  for (size_t i = 0; i < c.size(); ++i) append_type(key, c.at(i));
  // Numbers go in as they are, and may decide (an integer fmod by False raises): they key too.
  for (size_t i = 0; i < c.size(); ++i) {
    if (c.at(i).isScalar()) key += c10::str(c.at(i).toScalar(), ',');
  }
  Verdict verdict;
  {
    const std::lock_guard lock(mu);
    const auto it = seen.find(key);
    if (it != seen.end()) verdict = it->second;
  }
  if (!seen.count(key)) {
    torch::jit::Stack stack;
    for (size_t i = 0; i < c.size(); ++i) stack.push_back(stand_in(c.at(i)));
    try {
      const c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
      c.op().callBoxed(&stack);
    } catch (const c10::NotImplementedError& e) {
      verdict = {false, false, true, e.what_without_backtrace()};
    } catch (const c10::TypeError& e) {
      verdict = {false, true, false, e.what_without_backtrace()};
    } catch (const c10::Error& e) {
      verdict = {false, false, false, e.what_without_backtrace()};
    }
    const std::lock_guard lock(mu);
    if (seen.size() > 4096) seen.clear();  // distinct numbers must not grow it without end
    seen.emplace(key, verdict);
  }
  if (verdict.ok) return;
  if (verdict.not_implemented) TORCH_CHECK_NOT_IMPLEMENTED(false, verdict.message);
  if (verdict.type_error) TORCH_CHECK_TYPE(false, verdict.message);
  TORCH_CHECK(false, verdict.message);
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

namespace {

// The strides CPU gives a new output of `shape` from these inputs (TensorIterator's layout: the
// inputs' dim order, so the sum of two transposed tensors is transposed), or none when that is
// the contiguous layout. TensorIterator answers it over meta stand-ins, which hold no memory.
std::vector<int64_t> output_strides(const BoxedCall& c, c10::IntArrayRef shape,
                                    const std::vector<const Value*>& inputs) {
  if (shape.size() < 2) return {};
  // Torch's masked_fill clones self contiguously, and pow of a number makes a contiguous result.
  const std::string& op = c.base();
  if (op == "masked_fill" || (op == "pow" && !inputs.empty() && !inputs[0]->tensor && !inputs[0]->host)) return {};
  // The number operands of most ops are 0-dim tensors in torch's iterator; clamp's bounds, pow's
  // exponent and lerp's weight are parameters of the kernel instead.
  const bool numbers = op.rfind("clamp", 0) != 0 && op != "pow" && op != "lerp";
  // Even the strides of size-1 dims, which views of the result show (a diagonal, a select).
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).set_check_mem_overlap(false);
  config.add_owned_output(at::Tensor());
  bool any = false;
  // 0-dim tensors (on the device or the host) take part, as in torch.
  for (const Value* v : inputs) {
    const std::optional<at::Tensor>& t = v->tensor ? v->tensor : v->host;
    if (!t && !numbers) continue;
    const at::TensorOptions meta = at::TensorOptions().device(c10::kMeta);
    config.add_owned_const_input(t ? at::empty_strided(t->sizes(), t->strides(), meta) : at::empty({}, meta));
    any = any || (t && t->dim() > 0);
  }
  if (!any) return {};
  const at::TensorIterator iter = config.build();
  const at::Tensor& out = iter.output();
  if (out.sizes() != shape) return {};
  return out.strides().vec();
}

}  // namespace

std::optional<at::Tensor> output(const BoxedCall& c, const at::Tensor& like, c10::IntArrayRef shape,
                                 at::ScalarType result, const std::vector<const Value*>& inputs) {
  at::Tensor out;
  if (c.inplace()) {
    out = c.at(0).toTensor();
    TORCH_CHECK(out.sizes() == shape, "output with shape ", out.sizes(), " doesn't match the broadcast shape ", shape);
  } else if (std::optional<at::Tensor> o = c.out()) {
    out = *o;
    if (!device_dtype(out.scalar_type())) return std::nullopt;
    at::assert_no_internal_overlap(out);          // as torch, before out= is resized
    if (at::native::resize_output(out, shape)) {  // a resized out= takes the layout a new output would
      const std::vector<int64_t> strides = output_strides(c, shape, inputs);
      if (!strides.empty()) out.as_strided_(shape, strides);
    }
  } else {
    const std::vector<int64_t> strides = output_strides(c, shape, inputs);
    if (strides.empty()) return at::empty(shape, like.options().dtype(result));
    return at::empty_strided(shape, strides, like.options().dtype(result));
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
