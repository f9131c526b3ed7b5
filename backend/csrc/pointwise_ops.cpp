// Pointwise ATen ops on the device: one boxed kernel serves every row of the op library's pointwise
// table (backend/compiler/src/ops/pointwise.cpp) and each variant (functional, in-place, out=).
// Here is what is torch's: reading the operands, torch's type promotion and result-type rule, its
// errors, and where the result goes; the expression itself comes from the library, the same one
// torch.compile's programs use. Dtypes the device does not compute in, and calls the library or
// compiler does not take, run on the CPU fallback (which honours TORCH_SPYRE_CPU_FALLBACK).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>
#include <stdexcept>

#include "boxed.h"
#include "compute.h"
#include "pointwise_common.h"

namespace spyre::backend {
namespace {

namespace ops = compiler::ops;
using ops::Types;

at::ScalarType default_float() {
  return c10::typeMetaToScalarType(at::get_default_dtype());
}

bool integral(at::ScalarType t) {
  return at::isIntegralType(t, /*includeBool=*/true);
}

// The result type torch gives a row's call, checking what torch checks.
at::ScalarType result_type(const BoxedCall& c, const ops::PointwiseOp& row, at::ScalarType common) {
  const std::string& op = c.base();
  switch (row.types) {
    case Types::kToFloat:
      return integral(common) ? default_float() : common;
    case Types::kTrueDiv:
      return c.get("rounding_mode") || !integral(common) ? common : default_float();
    case Types::kToBool:
      return at::kBool;
    case Types::kIntegral:
      TORCH_CHECK(integral(common), op, ": not implemented for '", common, "'");
      return common;
    case Types::kSelf:
      return c.get("self")->toTensor().scalar_type();
    default:
      TORCH_CHECK(common != at::kBool || (op != "sub" && op != "rsub"),
                  "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                  "`logical_xor()` operator instead.");
      TORCH_CHECK(common != at::kBool || op != "neg",
                  "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, "
                  "use the `~` or `logical_not()` operator instead.");
      return common;
  }
}

// masked_fill_ of a tensor whose elements share memory (an expanded or unfolded one: CPU allows
// it, with a deprecation warning). Each memory location takes the value when the mask is true at
// any of its aliases: with only expanded dims (stride 0) the mask reduces with any() over them and
// fills the tensor seen without them; otherwise the true positions' memory offsets are computed
// and written through an index_put_ into the span of memory. nullopt: no element is shared.
std::optional<at::Tensor> masked_fill_overlapping(const BoxedCall& c, const at::Tensor& self) {
  if (!c.get("mask")->isTensor() || !may_share(self)) return std::nullopt;
  bool negative = false;
  std::vector<int64_t> sizes = self.sizes().vec(), dims;
  for (int64_t d = 0; d < self.dim(); ++d) {
    negative = negative || self.stride(d) < 0;
    if (self.stride(d) == 0 && self.size(d) > 1) {
      sizes[static_cast<size_t>(d)] = 1;
      dims.push_back(d);
    }
  }
  at::Tensor memory = self.as_strided(sizes, self.strides(), self.storage_offset());
  TORCH_WARN_ONCE(
      "Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing "
      "this operation.");
  const at::Tensor full_mask = c.get("mask")->toTensor().expand(self.sizes());
  const c10::IValue* v = c.get("value");
  const at::Tensor value =
      v->isTensor() ? v->toTensor().to(self.options()) : at::scalar_tensor(v->toScalar(), self.options());
  if (!may_share(memory)) {
    return memory.masked_fill_(full_mask.any(dims, /*keepdim=*/true), value);
  }
  TORCH_CHECK(!negative, "masked_fill_: a tensor with negative strides");
  if (self.numel() == 0) return self;
  int64_t span = 1;
  for (int64_t d = 0; d < self.dim(); ++d) span += (self.size(d) - 1) * self.stride(d);
  const at::Tensor strides = at::tensor(self.strides().vec(), at::kLong).to(self.device());
  const at::Tensor offsets = full_mask.nonzero().mul(strides).sum(1);
  at::Tensor flat = self.as_strided({span}, {1}, self.storage_offset());
  const c10::List<std::optional<at::Tensor>> index({offsets});
  flat.index_put_(index, value);
  return self;
}

// An operand of a complex product as float32 [..., 2] (real, imaginary) on `device`: a complex64
// tensor's view_as_real, a real tensor with a zero imaginary half, a number as one such pair.
// Nullopt for what the card does not hold in float32 (complex128, float64).
std::optional<at::Tensor> complex_parts(const Value& v, c10::Device device) {
  if (!v.tensor) {
    const c10::complex<double> z = (v.host ? v.host->item() : v.scalar).toComplexDouble();
    return at::tensor({z.real(), z.imag()}, at::dtype(at::kFloat)).to(device);
  }
  const at::Tensor& t = *v.tensor;
  if (t.scalar_type() == at::kComplexFloat) return at::view_as_real(t.resolve_conj());
  if (t.is_complex() || !device_dtype(t.scalar_type())) return std::nullopt;
  const at::Tensor re = t.to(at::kFloat);
  return at::stack({re, at::zeros_like(re)}, -1);
}

// mul of complex64 operands, which the card has no arithmetic for: (ac - bd, ad + bc) over the
// float32 halves, as CPU multiplies (a real operand is x + 0i there too), written through
// view_as_real of the result. False when it cannot (the caller falls back).
bool complex_mul(BoxedCall& c, const std::vector<Value>& values) {
  if (c.base() != "mul" || values.size() != 2) return false;
  const std::optional<at::Tensor>&first = values[0].tensor, &second = values[1].tensor;
  if (!first && !second) return false;
  const at::Tensor& like = first ? *first : *second;
  const std::optional<at::Tensor> a = complex_parts(values[0], like.device());
  const std::optional<at::Tensor> b = complex_parts(values[1], like.device());
  if (!a || !b) return false;
  std::vector<const Value*> inputs;
  inputs.reserve(values.size());
  for (const Value& v : values) inputs.push_back(&v);
  const std::vector<int64_t> shape = broadcast_shape(inputs);
  at::Tensor out;
  if (c.inplace()) {
    out = c.at(0).toTensor();
    if (out.sizes() != c10::IntArrayRef(shape)) return false;  // CPU's error, through the fallback
  } else if (const std::optional<at::Tensor> o = c.out()) {
    out = *o;
    if (out.scalar_type() != at::kComplexFloat) return false;
    at::native::resize_output(out, shape);
  } else {
    out = at::empty(shape, like.options().dtype(at::kComplexFloat));
  }
  if (out.scalar_type() != at::kComplexFloat || out.is_conj()) return false;
  if (out.numel() > 0) {
    const at::Tensor ar = a->select(-1, 0), ai = a->select(-1, 1), br = b->select(-1, 0), bi = b->select(-1, 1);
    const at::Tensor re = ar * br - ai * bi, im = ar * bi + ai * br;
    at::view_as_real(out).copy_(at::stack({re.expand(shape), im.expand(shape)}, -1));
  }
  c.finish(out);
  return true;
}

// A 0-dim host tensor as the number it is once converted to `type`, as CPU converts a tensor
// operand (2**40 - 1 in fp32 is 2**40; in bf16 a fill of 2**40 is int32's indefinite value). The
// device types only: the callers fall back for complex and float64 first.
ops::Arg host_number(const at::Tensor& t, at::ScalarType type) {
  const c10::Scalar x = t.to(type).item();
  return at::isFloatingType(type) ? ops::Arg::num(x.toDouble()) : ops::Arg::whole(x.toLong());
}

void pointwise_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  check_types_as_cpu(c);  // torch's refusals for these types (round of bool, an int alpha, ...)
  const ops::PointwiseOp& row = *ops::pointwise_op(c.base());
  std::vector<Value> values;  // the row's inputs that the call has
  std::vector<Value> promoted;
  for (const std::string& name : row.inputs) {
    if (const c10::IValue* v = c.get(name)) values.push_back(value_of(*v));
  }
  for (const std::string& name : row.promoted) {
    if (const c10::IValue* v = c.get(name)) promoted.push_back(value_of(*v));
  }
  TORCH_CHECK(!promoted.empty(), c.base(), ": expected at least one operand");  // clamp without bounds: torch's error
  if (c.base().rfind("clamp", 0) == 0 && promoted.size() == 1) return c.fall_back();
  const bool masked = c.base() == "masked_fill";
  if (masked && c.inplace()) {
    const at::Tensor self = c.at(0).toTensor();
    if (masked_fill_overlapping(c, self)) return c.finish(self);
  }
  // torch.result_type of the first promoted operand with each other (one operand: its own type).
  at::ScalarType common = promote(promoted[0], promoted.size() > 1 ? promoted[1] : promoted[0]);
  for (size_t i = 2; i < promoted.size(); ++i) common = at::promote_types(common, promote(promoted[0], promoted[i]));
  const at::ScalarType result = result_type(c, row, common);
  // Torch's unary ops that keep their input's type write only an out= of that type.
  if (const std::optional<at::Tensor> o = c.out();
      o && row.inputs.size() == 1 && (row.types == Types::kPromote || row.types == Types::kIntegral)) {
    TORCH_CHECK(o->scalar_type() == common, "Found dtype ", o->scalar_type(), " but expected ", common);
  }
  if (result == at::kComplexFloat && complex_mul(c, values)) return;
  for (const Value& v : values) {
    if (v.tensor && !device_dtype(v.tensor->scalar_type())) return c.fall_back();
  }
  if (!on_device({common, result})) return c.fall_back();
  // Torch raises for an integer to a negative integer power; an integer division by zero is not
  // checked on the device (it gives 0, where CUDA gives an undefined value; docs/user-guide.md).
  if (c.base() == "pow" && integral(common)) {
    const c10::IValue* e = c.get("exponent");
    if (e && !e->isTensor() && e->toScalar().toDouble() < 0) return c.fall_back();
  }
  // torch's check: a number bound, fill value or exponent fits the type (an fp32 pow takes any).
  if (c.base().rfind("clamp", 0) == 0 || masked || (c.base() == "pow" && result != at::kFloat)) {
    for (const char* bound : {"min", "max", "value", "exponent"}) {
      const c10::IValue* v = c.get(bound);
      // A host value tensor of masked_fill_ is read as a number there too.
      if (!v || (v->isTensor() && (v->toTensor().is_privateuseone() || !masked))) continue;
      const c10::Scalar s = v->isTensor() ? v->toTensor().item() : v->toScalar();
      AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, result, "clamp", [&] { (void)s.to<scalar_t>(); });
    }
  }
  if (masked || c.base() == "where") {
    const Value mask = value_of(*c.get(masked ? "mask" : "condition"));
    if (!mask.tensor || mask.tensor->scalar_type() != at::kBool) return c.fall_back();
  }
  std::vector<const Value*> inputs;
  inputs.reserve(values.size());
  for (const Value& v : values) inputs.push_back(&v);
  const at::Tensor like = [&] {
    for (const Value& v : values) {
      if (v.tensor) return *v.tensor;
    }
    TORCH_CHECK(false, c.base(), ": expected a spyre tensor operand");
  }();
  std::vector<int64_t> shape = broadcast_shape(inputs);
  if (masked) {
    const at::Tensor self = c.get("self")->toTensor();
    TORCH_CHECK(at::infer_size(shape, self.sizes()) == self.sizes(), "masked_fill_: mask of shape ",
                c.get("mask")->toTensor().sizes(), " does not broadcast to the tensor's shape ", self.sizes());
    shape = self.sizes().vec();
  }
  // The inputs CPU's iterator converts first: promoted ones not of its common type (an integer
  // input of a float op converts to the float result type).
  const at::ScalarType iterated = at::isFloatingType(result) && !at::isFloatingType(common) ? result : common;
  std::vector<bool> cpu_converts;
  for (const std::string& name : row.inputs) {
    const c10::IValue* v = c.get(name);
    if (!v) continue;
    const bool promotes = std::find(row.promoted.begin(), row.promoted.end(), name) != row.promoted.end();
    cpu_converts.push_back(promotes && v->isTensor() && v->toTensor().scalar_type() != iterated);
  }
  const std::optional<at::Tensor> out = output(c, like, shape, result, inputs, cpu_converts);
  if (!out) return c.fall_back();
  if (out->numel() == 0) return c.finish(*out);
  // In fp16 and bf16 torch rounds every operand to the common type first and the result to it
  // last (before an out= of another type takes it): the device computes those in fp32, so the
  // operands of other types are converted here, and such a result goes through a temporary. The
  // exceptions are below: they stay exact, and the call computes in fp32.
  const bool narrow = common == at::kHalf || common == at::kBFloat16;
  const bool round_result = (result == at::kHalf || result == at::kBFloat16) && out->scalar_type() != result;
  const at::Tensor target = round_result ? at::empty(out->sizes(), out->options().dtype(result)) : *out;
  // A one-element tensor as the second operand of mul, div and floor_divide: torch's iterator
  // sees a scalar there and its kernels read it exact (pow and lerp do so for numbers only). It
  // stays as it is, and the lowering computes the call in fp32 (ops::exact_operand).
  const auto exact = [&](const std::string& name, const at::Tensor& t) {
    return name == "other" && t.numel() == 1 &&
           std::find(row.exact_numbers.begin(), row.exact_numbers.end(), name) != row.exact_numbers.end();
  };
  std::vector<at::Tensor> converted;
  std::vector<std::pair<std::string, size_t>> replaced;
  for (const std::string& name : narrow ? row.promoted : std::vector<std::string>{}) {
    const c10::IValue* v = c.get(name);
    if (!v || !v->isTensor() || !v->toTensor().is_privateuseone()) continue;
    if (exact(name, v->toTensor()) || v->toTensor().scalar_type() == common) continue;
    converted.push_back(v->toTensor().to(common));
    replaced.emplace_back(name, converted.size() - 1);
  }
  Launch l;
  ops::Call call = library_call(c, l, {target}, common, result);
  for (const auto& [name, i] : replaced) call.args[name] = ops::Arg::tensor(l.view(converted[i]));
  // CPU's pow reads a 0-dim host tensor operand converted to the common type, as any tensor (a
  // Python number it reads exact): x ** torch.tensor(2**40 - 1) in fp32 is x ** 2**40, even.
  for (const char* name : {"self", "exponent"}) {
    const c10::IValue* v = c.base() == "pow" ? c.get(name) : nullptr;
    if (!v || !v->isTensor() || !v->toTensor().defined() || v->toTensor().is_privateuseone()) continue;
    call.args[name] = host_number(v->toTensor(), common);
  }
  if (!lower_or_fall_back(l, call, c)) return;
  if (round_result) out->copy_(target);
  c.finish(*out);
}

// isinf: of an integer tensor, as CPU, a zeros_like(self, bool) that keeps self's exact strides
// (size-1 dims' too, where the elementwise path lays the result out as its iterator does).
void isinf_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const at::Tensor self = stack->back().toTensor();  // isinf(Tensor self): its one argument
  if (!c10::isIntegralType(self.scalar_type(), /*includeBool=*/true)) return pointwise_kernel(op, stack);
  BoxedCall c(op, stack);
  c.finish(at::zeros_like(self, at::kBool, at::MemoryFormat::Preserve));
}

// The integer type of the card whose elements are `bytes` wide, if it has one.
std::optional<at::ScalarType> same_width_int(int64_t bytes) {
  switch (bytes) {
    case 1:
      return at::kChar;
    case 4:
      return at::kInt;
    case 8:
      return at::kLong;
    default:
      return std::nullopt;
  }
}

// A fill of a type the card has no arithmetic for (float64, complex, unsigned): such a tensor is
// still bytes on the card, so the value's bit pattern, converted by CPU's own fill (its range
// checks and rounding included), is written through an integer view of the same width; a complex
// value is two patterns, one per component. False when no integer type has that width.
bool fill_bit_pattern(BoxedCall& c, const at::Tensor& self) {
  at::Tensor one = at::empty({1}, self.options().device(at::kCPU));
  if (c.base() == "zero") {
    one.zero_();
  } else if (c.at(1).isTensor()) {
    const at::Tensor& v = c.at(1).toTensor();
    if (v.is_privateuseone()) return false;
    one.fill_(v);
  } else {
    one.fill_(c.at(1).toScalar());
  }
  if (self.numel() == 0) return true;
  const bool complex = self.is_complex();
  const at::Tensor cells = complex ? at::view_as_real(self) : self;
  const std::optional<at::ScalarType> as_int = same_width_int(cells.element_size());
  if (!as_int) return false;
  const at::Tensor bits = (complex ? at::view_as_real(one) : one).view(*as_int).reshape({-1});
  const at::Tensor target = cells.view(*as_int);
  if (!complex) {
    target.fill_(bits.item());
  } else {
    target.select(-1, 0).fill_(bits[0].item());
    target.select(-1, 1).fill_(bits[1].item());
  }
  return true;
}

// fill_(self, value), zero_(self): a fill of the value, or a broadcast copy of a 0-dim spyre tensor.
void fill_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  if (!device_dtype(self.scalar_type())) {
    if (fill_bit_pattern(c, self)) return c.finish(self);
    return c.fall_back();
  }
  // torch's check: the value fits the type. CPU's one-element fast path skips it for half (a
  // fill of 2**33 gives inf there), and so do we.
  if (c.base() == "fill" && !c.at(1).isTensor() && !(self.numel() == 1 && self.scalar_type() == at::kHalf)) {
    const c10::Scalar value = c.at(1).toScalar();
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, self.scalar_type(), "fill_",
                               [&] { (void)value.to<scalar_t>(); });
  }
  if (c.base() == "fill" && c.at(1).isTensor()) {
    const at::Tensor& v = c.at(1).toTensor();
    TORCH_CHECK(v.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", v.dim(),
                " dimensions.");
    if (v.is_privateuseone() && !device_dtype(v.scalar_type())) return c.fall_back();
  }
  if (self.numel() == 0) return c.finish(self);
  // As CPU: a number may fill an expanded tensor (every alias takes the same value); a tensor not.
  if (c.at(1).isTensor()) at::assert_no_internal_overlap(self);
  // The memory to write: an expanded dim (stride 0) once.
  std::vector<int64_t> sizes = self.sizes().vec();
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (self.stride(d) == 0) sizes[static_cast<size_t>(d)] = 1;
  }
  const at::Tensor target = self.as_strided(sizes, self.strides(), self.storage_offset());
  Launch l;
  ops::Call call = library_call(c, l, {target}, self.scalar_type(), self.scalar_type());
  if (c.base() == "fill" && c.at(1).isTensor() && !c.at(1).toTensor().is_privateuseone()) {
    // A host value converts as a tensor does (2**40 in bf16 is int32's indefinite value, not 0).
    call.args["value"] = host_number(c.at(1).toTensor(), self.scalar_type());
  }
  if (lower_or_fall_back(l, call, c)) c.finish(self);
}

// arange(start, end, step, out=): an iota over the output.
void arange_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const double start = c.at(0).toScalar().toDouble(), end = c.at(1).toScalar().toDouble();
  const double step = c.at(2).toScalar().toDouble();
  const std::optional<at::Tensor> out_arg = c.out();
  TORCH_CHECK(out_arg, "spyre: internal: arange is registered for its out= variant only");
  const at::Tensor& out = *out_arg;
  TORCH_CHECK(step != 0, "step must be nonzero");
  TORCH_CHECK(std::isfinite(start) && std::isfinite(end), "unsupported range: ", start, " -> ", end);
  TORCH_CHECK((step > 0 && end >= start) || (step < 0 && end <= start),
              "upper bound and larger bound inconsistent with step sign");
  if (!device_dtype(out.scalar_type())) return c.fall_back();
  TORCH_CHECK_NOT_IMPLEMENTED(out.scalar_type() != at::kBool, "\"arange_cpu\" not implemented for 'Bool'");
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  if (out.numel() != n) out.resize_({n});
  if (n == 0) return c.finish(out);
  Launch l;
  if (lower_or_fall_back(l, library_call(c, l, {out}, out.scalar_type(), out.scalar_type()), c)) c.finish(out);
}

const std::vector<std::string> kUnary = {
    "neg",  "abs",   "relu", "sign", "sgn",   "floor",       "ceil",  "round",      "trunc", "exp",
    "exp2", "expm1", "log",  "log2", "log1p", "sqrt",        "rsqrt", "reciprocal", "tanh",  "sigmoid",
    "erf",  "sin",   "cos",  "silu", "gelu",  "logical_not", "isnan", "bitwise_not"};
const std::vector<std::string> kBinary = {
    "add",       "sub",  "rsub",         "mul",        "div",         "maximum",     "minimum",    "pow",
    "remainder", "fmod", "floor_divide", "atan2",      "eq",          "ne",          "lt",         "le",
    "gt",        "ge",   "logical_and",  "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"};

const bool g_registered = [] {
  register_boxed(with_inplace(kUnary), {"", "out"}, &pointwise_kernel);
  register_boxed(with_inplace(kBinary),
                 {"", "Tensor", "Scalar", "out", "Tensor_out", "Scalar_out", "Tensor_mode", "Scalar_mode", "out_mode",
                  "Scalar_mode_out", "Tensor_Tensor", "Tensor_Scalar", "Tensor_Tensor_out", "Tensor_Scalar_out",
                  "Scalar_Tensor", "Scalar_Tensor_out"},
                 &pointwise_kernel);
  register_boxed({"gelu_backward", "sigmoid_backward", "tanh_backward", "threshold_backward", "softplus_backward"},
                 {"", "grad_input"}, &pointwise_kernel);
  register_boxed({"softplus"}, {"", "out"}, &pointwise_kernel);
  register_boxed(with_inplace({"tan", "sinh", "cosh", "log10", "sinc", "frac", "nan_to_num", "leaky_relu", "hardtanh",
                               "elu", "hardsigmoid", "hardswish", "threshold", "mish"}),
                 {"", "out"}, &pointwise_kernel);
  register_boxed({"softshrink", "hardshrink"}, {"", "out"}, &pointwise_kernel);
  register_boxed(with_inplace({"atan", "asin", "acos", "asinh", "acosh", "atanh", "erfc", "erfinv", "lgamma", "digamma",
                               "i0", "copysign"}),
                 {"", "out", "Tensor", "Scalar", "out_Scalar"}, &pointwise_kernel);
  register_boxed(
      {"special_erfcx", "special_i0e", "special_i1", "special_i1e", "signbit", "polygamma", "special_log_ndtr"},
      {"", "out"}, &pointwise_kernel);
  register_boxed(with_inplace({"xlogy", "hypot"}),
                 {"Tensor", "Scalar_Self", "Scalar_Other", "OutTensor", "OutScalar_Self", "OutScalar_Other", "", "out"},
                 &pointwise_kernel);
  register_boxed({"fmax", "fmin", "logaddexp", "logaddexp2", "special_entr", "angle"}, {"", "out"}, &pointwise_kernel);
  // The special functions of backend/compiler/src/ops/special.cpp.
  register_boxed(
      {"special_bessel_j0", "special_bessel_j1", "special_bessel_y0", "special_bessel_y1", "special_modified_bessel_i0",
       "special_modified_bessel_i1", "special_modified_bessel_k0", "special_modified_bessel_k1",
       "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1", "special_spherical_bessel_j0",
       "special_airy_ai", "special_ndtri"},
      {"", "out"}, &pointwise_kernel);
  register_boxed(with_inplace({"igamma", "igammac"}), {"", "out"}, &pointwise_kernel);
  register_boxed({"special_zeta"}, {"", "self_scalar", "other_scalar", "out", "self_scalar_out", "other_scalar_out"},
                 &pointwise_kernel);
  register_boxed(
      {"special_chebyshev_polynomial_t", "special_chebyshev_polynomial_u", "special_chebyshev_polynomial_v",
       "special_chebyshev_polynomial_w", "special_shifted_chebyshev_polynomial_t",
       "special_shifted_chebyshev_polynomial_u", "special_shifted_chebyshev_polynomial_v",
       "special_shifted_chebyshev_polynomial_w", "special_hermite_polynomial_h", "special_hermite_polynomial_he"},
      {"", "x_scalar", "n_scalar", "out", "x_scalar_out", "n_scalar_out"}, &pointwise_kernel);
  register_boxed(with_inplace({"logit", "heaviside"}), {"", "out"}, &pointwise_kernel);
  register_boxed({"logit_backward"}, {"", "grad_input"}, &pointwise_kernel);
  // CompositeImplicitAutograd for non-CPU devices, but run only where grad mode is off (their
  // autograd formulas differentiate other ops): kernels of their own, as CPU has.
  register_boxed({"silu_backward", "mish_backward"}, {""}, &pointwise_kernel);
  register_boxed({"special_xlog1py"}, {"", "self_scalar", "other_scalar", "out", "self_scalar_out", "other_scalar_out"},
                 &pointwise_kernel);
  register_boxed({"leaky_relu_backward", "hardtanh_backward", "elu_backward", "hardsigmoid_backward",
                  "hardswish_backward", "softshrink_backward", "hardshrink_backward"},
                 {"", "grad_input", "out"}, &pointwise_kernel);
  register_boxed(with_inplace({"addcmul", "addcdiv", "lerp"}),
                 {"", "out", "Scalar", "Tensor", "Scalar_out", "Tensor_out"}, &pointwise_kernel);
  register_boxed({"isinf"}, {""}, &isinf_kernel);
  register_boxed({"isinf"}, {"out"}, &pointwise_kernel);
  register_boxed({"isposinf", "isneginf"}, {"", "out"}, &pointwise_kernel);
  register_boxed({"native_dropout_backward"}, {""}, &pointwise_kernel);
  register_boxed({"where"}, {"self", "self_out"}, &pointwise_kernel);
  register_boxed({"masked_fill_"}, {"Scalar", "Tensor"}, &pointwise_kernel);
  register_boxed(with_inplace({"clamp", "clamp_min", "clamp_max"}), {"", "out", "Tensor", "Tensor_out"},
                 &pointwise_kernel);
  register_boxed({"fill_"}, {"Scalar", "Tensor"}, &fill_kernel);
  register_boxed({"zero_"}, {""}, &fill_kernel);
  register_boxed({"arange"}, {"start_out"}, &arange_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
