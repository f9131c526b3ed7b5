#include "pointwise_common.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>

#include <algorithm>
#include <cstdlib>
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

template <typename T>
void append_bits(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// The key is bytes, not text: built on every call, it must cost nanoseconds, not a stream's
// microseconds.
void append_type(std::string& key, const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.defined()) {  // the stand-in's type and rank
      key += 't';
      append_bits(key, static_cast<int8_t>(t.scalar_type()));
      append_bits(key, t.dim());
    } else {
      key += 'u';
    }
  } else if (v.isScalar()) {
    key += v.isDouble() ? 'd' : (v.isBool() ? 'b' : (v.isComplexDouble() ? 'c' : 'i'));
  } else if (v.isString()) {
    key += 's';
    append_bits(key, v.toStringRef().size());
    key += v.toStringRef();
  } else {
    key += 'k';
    append_bits(key, static_cast<int>(v.tag));
  }
}

// A number exactly, by its bits.
void append_number(std::string& key, const c10::Scalar& s) {
  if (s.isComplex()) {
    append_bits(key, s.toComplexDouble());
  } else if (s.isFloatingPoint()) {
    append_bits(key, s.toDouble());
  } else if (s.isBoolean()) {
    append_bits(key, s.toBool());
  } else {
    append_bits(key, s.toLong());
  }
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
  std::string key = c.name();
  key += '\0';
  for (size_t i = 0; i < c.size(); ++i) append_type(key, c.at(i));
  // Numbers go in as they are, and may decide (an integer fmod by False raises): they key too.
  for (size_t i = 0; i < c.size(); ++i) {
    if (c.at(i).isScalar()) append_number(key, c.at(i).toScalar());
  }
  Verdict verdict;
  bool known = false;
  {
    const std::lock_guard lock(mu);
    const auto it = seen.find(key);
    known = it != seen.end();
    if (known) verdict = it->second;
  }
  if (!known) {
    torch::jit::Stack stack;
    for (size_t i = 0; i < c.size(); ++i) stack.push_back(stand_in(c.at(i)));
    try {
      // CPU's own kernel decides, not a Python mode that may be active (the fake tensors of
      // torch.compile's tracing take any type): its answer is kept for every later call.
      const c10::impl::ExcludeDispatchKeyGuard no_autograd(
          c10::autograd_dispatch_keyset |
          c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
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

// Whether two elements of t may share memory: its dims of more than one element, by stride, each
// step past everything the smaller ones reach (a sufficient test; strides below 0 count as shared).
bool may_share(const at::Tensor& t) {
  if (t.numel() <= 1) return false;               // an empty tensor's strides place nothing
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // the furthest offset the smaller dims reach
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return true;
    reach += stride * (size - 1);
  }
  return false;
}

namespace {

// The strides CPU gives a new output of `shape` from these inputs (TensorIterator's layout: the
// inputs' dim order, so the sum of two transposed tensors is transposed), or none when that is
// the contiguous layout. TensorIterator answers it over meta stand-ins, which hold no memory.
std::vector<int64_t> output_strides(const BoxedCall& c, c10::IntArrayRef shape, const std::vector<const Value*>& inputs,
                                    const std::vector<bool>& converted) {
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
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::optional<at::Tensor>& t = inputs[i]->tensor ? inputs[i]->tensor : inputs[i]->host;
    if (!t && !numbers) continue;
    const at::TensorOptions meta = at::TensorOptions().device(c10::kMeta);
    at::Tensor stand_in = t ? at::empty_strided(t->sizes(), t->strides(), meta) : at::empty({}, meta);
    // CPU's converted copy (Tensor.to): a non-dense input's dims packed in their order, a size-1
    // dim's stride that of its neighbour (a diagonal of shape (1, 7) and strides (1, 9) becomes
    // (1, 1), whose result is then (7, 1)).
    if (t && i < converted.size() && converted[i]) stand_in = stand_in.to(at::kDouble).to(at::kFloat);
    config.add_owned_const_input(stand_in);
    any = any || (t && t->dim() > 0);
  }
  if (!any) return {};
  const at::TensorIterator iter = config.build();
  const at::Tensor& out = iter.output();
  if (out.sizes() != shape) return {};
  return out.strides().vec();
}

// The most elements whose offsets an overlap check lists one by one (128 MiB of int64).
constexpr int64_t kListedUpTo = int64_t{1} << 24;

// The storage offsets of t's elements, in the row-major order of t's indices (CPU int64).
at::Tensor element_offsets(const at::Tensor& t) {
  at::Tensor offsets = at::full({1}, t.storage_offset(), at::kLong);
  for (int64_t d = 0; d < t.dim(); ++d) {
    const at::Tensor steps = at::arange(t.size(d), at::kLong) * t.stride(d);
    offsets = (offsets.unsqueeze(1) + steps.unsqueeze(0)).reshape({-1});
  }
  return offsets;
}

}  // namespace

// An output whose elements share memory where torch's check cannot see it (an unfolded view: only
// stride 0 reads as overlap there): CPU then writes, and reads back, each location in its loop order,
// so the result depends on that order (an exp_ of overlapping windows exponentiates the shared
// elements twice); refused with torch's own error for the overlap it sees.
// More elements than the locations their span covers share some (an unfold of 10^10 windows over
// 10^5 elements), and a view too large to list its elements' offsets counts as shared.
bool has_hidden_internal_overlap(const at::Tensor& out) {
  if (!may_share(out)) return false;
  int64_t locations = 1;
  for (int64_t d = 0; d < out.dim(); ++d) locations += std::abs(out.stride(d)) * (out.size(d) - 1);
  if (out.numel() > locations || out.numel() > kListedUpTo) return true;
  const at::Tensor offsets = element_offsets(out);
  return std::get<0>(at::_unique(offsets)).numel() != offsets.numel();
}

void assert_no_hidden_internal_overlap(const at::Tensor& out) {
  TORCH_CHECK(!has_hidden_internal_overlap(out),
              "unsupported operation: more than one element of the written-to tensor refers to a single memory "
              "location. Please clone() the tensor before performing the operation.");
}

namespace {

// CPU's overlap check gives up on layouts it cannot reason about (non-contiguous views: TOO_HARD)
// and then computes in its loop order, reading elements it has already written; the device reads
// its inputs tile by tile, so such an op has no answer both would agree on. It is refused with the
// error CPU gives the overlaps it can see. An input that is the output element for element, or
// that only interleaves with it (x[:, 0] and x[:, 1]), is fine.
void assert_no_hidden_overlap(const at::Tensor& out, const at::Tensor& in) {
  if (out.numel() == 0 || in.numel() == 0 || !out.storage().is_alias_of(in.storage())) return;
  if (in.sizes().equals(out.sizes()) && in.strides().equals(out.strides()) &&
      in.storage_offset() == out.storage_offset() && in.element_size() == out.element_size()) {
    return;  // the input is the output, element for element (x.add_(1)): without building a view
  }
  if (!at::is_expandable_to(in.sizes(), out.sizes())) return;
  const at::Tensor wide = in.expand(out.sizes());
  const auto bytes = [](const at::Tensor& t, int64_t n) { return n * static_cast<int64_t>(t.element_size()); };
  bool same = wide.storage_offset() == out.storage_offset() && wide.element_size() == out.element_size();
  for (int64_t d = 0; same && d < out.dim(); ++d) same = out.size(d) == 1 || wide.stride(d) == out.stride(d);
  if (same) return;
  const auto span = [&](const at::Tensor& t) {  // [first, last] byte the view touches
    int64_t lo = bytes(t, t.storage_offset()), hi = lo;
    for (int64_t d = 0; d < t.dim(); ++d) (t.stride(d) < 0 ? lo : hi) += bytes(t, (t.size(d) - 1) * t.stride(d));
    return std::pair{lo, hi + static_cast<int64_t>(t.element_size()) - 1};
  };
  const auto [a0, a1] = span(out);
  const auto [b0, b1] = span(wide);
  if (a1 < b0 || b1 < a0) return;
  // Past kListedUpTo elements, crossing spans count as overlap.
  if (out.element_size() == wide.element_size() && out.numel() <= kListedUpTo) {
    const at::Tensor written = element_offsets(out), read = element_offsets(wide);
    if (!at::isin(read, written).any().item<bool>()) return;
  }
  TORCH_CHECK(false,
              "unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
              "memory location. Please clone() the tensor before performing the operation.");
}

}  // namespace

std::optional<at::Tensor> output(const BoxedCall& c, const at::Tensor& like, c10::IntArrayRef shape,
                                 at::ScalarType result, const std::vector<const Value*>& inputs,
                                 const std::vector<bool>& converted) {
  at::Tensor out;
  if (c.inplace()) {
    out = c.at(0).toTensor();
    TORCH_CHECK(out.sizes() == shape, "output with shape ", out.sizes(), " doesn't match the broadcast shape ", shape);
  } else if (std::optional<at::Tensor> o = c.out()) {
    out = *o;
    if (!device_dtype(out.scalar_type())) return std::nullopt;
    at::assert_no_internal_overlap(out);          // as torch, before out= is resized
    if (at::native::resize_output(out, shape)) {  // a resized out= takes the layout a new output would
      const std::vector<int64_t> strides = output_strides(c, shape, inputs, converted);
      if (!strides.empty()) out.as_strided_(shape, strides);
    }
  } else {
    const std::vector<int64_t> strides = output_strides(c, shape, inputs, converted);
    if (strides.empty()) return at::empty(shape, like.options().dtype(result));
    return at::empty_strided(shape, strides, like.options().dtype(result));
  }
  TORCH_CHECK(c10::canCast(result, out.scalar_type()), "result type ", result,
              " can't be cast to the desired output type ", out.scalar_type());
  if (!device_dtype(out.scalar_type())) return std::nullopt;
  at::assert_no_internal_overlap(out);
  assert_no_hidden_internal_overlap(out);
  for (const Value* v : inputs) {
    if (v->tensor) {
      at::assert_no_partial_overlap(out, *v->tensor);
      assert_no_hidden_overlap(out, *v->tensor);
    }
  }
  return out;
}

}  // namespace spyre::backend
