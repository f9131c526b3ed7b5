// Pointwise ATen ops on the device, registered by table: one boxed kernel per family (unary,
// binary, select and fill) serves every op of the family and each of its variants (functional,
// in-place, out=). A row maps the ATen name to the SFP function and its type rule; type promotion
// follows torch (at::result_type); the compiler does broadcasting, strides and conversions.
// Dtypes the device does not compute in, and shapes the compiler does not take, run on the CPU
// fallback (which honours TORCH_SPYRE_CPU_FALLBACK).
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cmath>
#include <map>
#include <stdexcept>

#include "boxed.h"
#include "compute.h"
#include "pointwise_common.h"

namespace spyre::backend {
namespace {

using hw::BinaryFn;
using hw::UnaryFn;

// ---- unary -------------------------------------------------------------------------------------

struct UnaryRow {
  UnaryFn fn;
  enum Rule : uint8_t { kSame, kToFloat, kToBool, kIntegral } rule;
};

const std::map<std::string, UnaryRow, std::less<>> kUnary = {
    {"neg", {UnaryFn::kNeg, UnaryRow::kSame}},         {"abs", {UnaryFn::kAbs, UnaryRow::kSame}},
    {"relu", {UnaryFn::kRelu, UnaryRow::kSame}},       {"sign", {UnaryFn::kSign, UnaryRow::kSame}},
    {"floor", {UnaryFn::kFloor, UnaryRow::kSame}},     {"ceil", {UnaryFn::kCeil, UnaryRow::kSame}},
    {"round", {UnaryFn::kRound, UnaryRow::kSame}},     {"trunc", {UnaryFn::kTrunc, UnaryRow::kSame}},
    {"sgn", {UnaryFn::kSign, UnaryRow::kSame}},        {"exp", {UnaryFn::kExp, UnaryRow::kToFloat}},
    {"exp2", {UnaryFn::kExp2, UnaryRow::kToFloat}},    {"expm1", {UnaryFn::kExpm1, UnaryRow::kToFloat}},
    {"log", {UnaryFn::kLog, UnaryRow::kToFloat}},      {"log2", {UnaryFn::kLog2, UnaryRow::kToFloat}},
    {"log1p", {UnaryFn::kLog1p, UnaryRow::kToFloat}},  {"sqrt", {UnaryFn::kSqrt, UnaryRow::kToFloat}},
    {"rsqrt", {UnaryFn::kRsqrt, UnaryRow::kToFloat}},  {"reciprocal", {UnaryFn::kReciprocal, UnaryRow::kToFloat}},
    {"tanh", {UnaryFn::kTanh, UnaryRow::kToFloat}},    {"sigmoid", {UnaryFn::kSigmoid, UnaryRow::kToFloat}},
    {"erf", {UnaryFn::kErf, UnaryRow::kToFloat}},      {"sin", {UnaryFn::kSin, UnaryRow::kToFloat}},
    {"cos", {UnaryFn::kCos, UnaryRow::kToFloat}},      {"silu", {UnaryFn::kSilu, UnaryRow::kToFloat}},
    {"gelu", {UnaryFn::kGeluErf, UnaryRow::kToFloat}}, {"logical_not", {UnaryFn::kLogicalNot, UnaryRow::kToBool}},
    {"isnan", {UnaryFn::kIsNan, UnaryRow::kToBool}},   {"bitwise_not", {UnaryFn::kBitwiseNot, UnaryRow::kIntegral}},
};

void unary_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const UnaryRow& row = kUnary.at(c.base());
  const at::Tensor self = c.at(0).toTensor();
  const at::ScalarType in = self.scalar_type();
  const bool integral = at::isIntegralType(in, /*includeBool=*/true);
  if (!device_dtype(in)) return c.fall_back();
  TORCH_CHECK(row.rule != UnaryRow::kIntegral || integral, c.base(), ": not implemented for '", in, "'");
  TORCH_CHECK(row.fn != UnaryFn::kNeg || in != at::kBool,
              "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, "
              "use the `~` or `logical_not()` operator instead.");
  UnaryFn fn = row.fn;
  if (fn == UnaryFn::kBitwiseNot && in == at::kBool) fn = UnaryFn::kLogicalNot;
  if (const c10::IValue* approximate = c.get("approximate")) {
    fn = approximate->toStringRef() == "tanh" ? UnaryFn::kGeluTanh : UnaryFn::kGeluErf;
  }
  at::ScalarType result = in;
  if (row.rule == UnaryRow::kToFloat && integral) result = c10::typeMetaToScalarType(at::get_default_dtype());
  if (row.rule == UnaryRow::kToBool) result = at::kBool;
  const Value x{self, {}};
  const std::optional<at::Tensor> out = output(c, self, self.sizes(), result, {&x});
  if (!out) return c.fall_back();
  if (out->numel() == 0) return c.finish(*out);
  Launch l;
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kUnary;
  p.unary = fn;
  p.compute = (row.rule == UnaryRow::kToBool || fn == UnaryFn::kLogicalNot) ? *device_dtype(in) : *device_dtype(result);
  p.inputs = {ir::Operand::of(l.view(self))};
  p.out = l.view(*out);
  l.pointwise(std::move(p));
  finish(c, l, *out);
}

// ---- binary ------------------------------------------------------------------------------------

struct BinaryRow {
  BinaryFn fn;
  enum Rule : uint8_t { kArith, kTrueDiv, kToFloat, kCompare, kIntegral } rule;
};

const std::map<std::string, BinaryRow, std::less<>> kBinary = {
    {"add", {BinaryFn::kAdd, BinaryRow::kArith}},
    {"sub", {BinaryFn::kSub, BinaryRow::kArith}},
    {"rsub", {BinaryFn::kSub, BinaryRow::kArith}},
    {"mul", {BinaryFn::kMul, BinaryRow::kArith}},
    {"div", {BinaryFn::kDiv, BinaryRow::kTrueDiv}},
    {"maximum", {BinaryFn::kMax, BinaryRow::kArith}},
    {"minimum", {BinaryFn::kMin, BinaryRow::kArith}},
    {"pow", {BinaryFn::kPow, BinaryRow::kArith}},
    {"remainder", {BinaryFn::kRemainder, BinaryRow::kArith}},
    {"fmod", {BinaryFn::kFmod, BinaryRow::kArith}},
    {"floor_divide", {BinaryFn::kFloorDiv, BinaryRow::kArith}},
    {"atan2", {BinaryFn::kAtan2, BinaryRow::kToFloat}},
    {"eq", {BinaryFn::kEq, BinaryRow::kCompare}},
    {"ne", {BinaryFn::kNe, BinaryRow::kCompare}},
    {"lt", {BinaryFn::kLt, BinaryRow::kCompare}},
    {"le", {BinaryFn::kLe, BinaryRow::kCompare}},
    {"gt", {BinaryFn::kGt, BinaryRow::kCompare}},
    {"ge", {BinaryFn::kGe, BinaryRow::kCompare}},
    {"logical_and", {BinaryFn::kLogicalAnd, BinaryRow::kCompare}},
    {"logical_or", {BinaryFn::kLogicalOr, BinaryRow::kCompare}},
    {"logical_xor", {BinaryFn::kLogicalXor, BinaryRow::kCompare}},
    {"bitwise_and", {BinaryFn::kBitAnd, BinaryRow::kIntegral}},
    {"bitwise_or", {BinaryFn::kBitOr, BinaryRow::kIntegral}},
    {"bitwise_xor", {BinaryFn::kBitXor, BinaryRow::kIntegral}},
};

void binary_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const BinaryRow& row = kBinary.at(c.base());
  Value a = value_of(c.at(0)), b = value_of(c.at(1));
  const at::Tensor like = a.tensor ? *a.tensor : *b.tensor;
  c10::Scalar alpha = 1;
  if (const c10::IValue* v = c.get("alpha")) alpha = v->toScalar();
  std::string rounding;
  if (const c10::IValue* v = c.get("rounding_mode")) rounding = v->toStringRef();
  if (c.base() == "rsub") std::swap(a, b);  // rsub(x, y, alpha) = y - alpha * x

  const at::ScalarType common = promote(a, b);
  const bool integral = at::isIntegralType(common, /*includeBool=*/true);
  at::ScalarType result = common;
  BinaryFn fn = row.fn;
  bool then_trunc = false;
  switch (row.rule) {
    case BinaryRow::kTrueDiv:
      if (rounding == "floor") {
        fn = BinaryFn::kFloorDiv;
      } else if (rounding == "trunc") {
        then_trunc = !integral;  // integer division already truncates
      } else if (integral) {
        result = c10::typeMetaToScalarType(at::get_default_dtype());
      }
      break;
    case BinaryRow::kToFloat:
      if (integral) result = c10::typeMetaToScalarType(at::get_default_dtype());
      break;
    case BinaryRow::kCompare:
      result = at::kBool;
      break;
    case BinaryRow::kIntegral:
      TORCH_CHECK(integral, c.base(), ": not implemented for '", common, "'");
      break;
    case BinaryRow::kArith:
      TORCH_CHECK(common != at::kBool || fn != BinaryFn::kSub,
                  "Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                  "`logical_xor()` operator instead.");
      break;
  }
  const at::ScalarType compute = row.rule == BinaryRow::kCompare ? common : result;
  const auto tensor_type = [](const Value& v) { return v.tensor ? v.tensor->scalar_type() : at::kFloat; };
  if (!on_device({compute, result, tensor_type(a), tensor_type(b)})) return c.fall_back();
  // Torch raises for an integer to a negative integer power; an integer division by zero is not
  // checked on the device (it gives 0, where CUDA gives an undefined value; docs/user-guide.md).
  if (integral && fn == BinaryFn::kPow && !b.tensor && b.scalar.toDouble() < 0) return c.fall_back();
  const std::vector<int64_t> shape = broadcast_shape({&a, &b});
  const std::optional<at::Tensor> out = output(c, like, shape, result, {&a, &b});
  if (!out) return c.fall_back();
  if (out->numel() == 0) return c.finish(*out);

  Launch l;
  ir::Pointwise p;
  p.compute = *device_dtype(compute);
  p.out = l.view(*out);
  const bool scaled = (fn == BinaryFn::kAdd || fn == BinaryFn::kSub) && alpha.toDouble() != 1.0;
  if (scaled && b.tensor) {  // a + alpha * b = b * alpha + a; a - alpha * b = b * -alpha + a
    p.kind = ir::PointwiseKind::kFma;
    const double k = fn == BinaryFn::kAdd ? alpha.toDouble() : -alpha.toDouble();
    p.inputs = {operand(l, b), ir::Operand::constant(k), operand(l, a)};
  } else {
    if (scaled) b.scalar = b.scalar.toDouble() * alpha.toDouble();
    p.kind = ir::PointwiseKind::kBinary;
    p.binary = fn;
    p.inputs = {operand(l, a), operand(l, b)};
  }
  l.pointwise(p);
  if (then_trunc) {
    ir::Pointwise t;
    t.kind = ir::PointwiseKind::kUnary;
    t.unary = UnaryFn::kTrunc;
    t.compute = p.compute;
    t.inputs = {ir::Operand::of(p.out)};
    t.out = p.out;
    l.pointwise(t);
  }
  finish(c, l, *out);
}

// ---- select, clamp, fill -----------------------------------------------------------------------

// where(condition, self, other) and masked_fill_(self, mask, value).
void select_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const bool masked = c.base() == "masked_fill";
  const Value mask = value_of(c.at(masked ? 1 : 0));
  const Value x = masked ? value_of(c.at(2)) : value_of(c.at(1));
  const Value y = masked ? value_of(c.at(0)) : value_of(c.at(2));
  if (!mask.tensor || mask.tensor->scalar_type() != at::kBool) return c.fall_back();
  const at::ScalarType result = masked ? y.tensor->scalar_type() : promote(x, y);
  const auto tensor_type = [](const Value& v) { return v.tensor ? v.tensor->scalar_type() : at::kFloat; };
  if (!on_device({result, tensor_type(x), tensor_type(y)})) return c.fall_back();
  const std::vector<int64_t> shape = masked ? y.tensor->sizes().vec() : broadcast_shape({&mask, &x, &y});
  TORCH_CHECK(at::infer_size(shape, mask.tensor->sizes()) == shape, "masked_fill_: mask of shape ",
              mask.tensor->sizes(), " does not broadcast to the tensor's shape ", shape);
  const std::optional<at::Tensor> out = output(c, *mask.tensor, shape, result, {&mask, &x, &y});
  if (!out) return c.fall_back();
  if (out->numel() == 0) return c.finish(*out);
  Launch l;
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kSelect;
  p.compute = *device_dtype(result);
  p.inputs = {operand(l, mask), operand(l, x), operand(l, y)};
  p.out = l.view(*out);
  l.pointwise(std::move(p));
  finish(c, l, *out);
}

// clamp(self, min, max), clamp_min(self, min), clamp_max(self, max), with scalar or tensor bounds:
// max with the lower bound, then min with the upper one (NaN propagates, as in torch).
void clamp_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const Value x = value_of(c.at(0));
  std::optional<Value> lo, hi;
  if (c.base() == "clamp_max") {
    hi = value_of(c.at(1));
  } else if (c.base() == "clamp_min") {
    lo = value_of(c.at(1));
  } else {
    if (const c10::IValue* v = c.get("min")) lo = value_of(*v);
    if (const c10::IValue* v = c.get("max")) hi = value_of(*v);
  }
  if (!lo && !hi) return c.fall_back();  // torch's error
  at::ScalarType result = x.tensor->scalar_type();
  for (const auto& bound : {lo, hi}) {
    if (bound) result = at::promote_types(result, promote(x, *bound));
  }
  const auto tensor_type = [](const std::optional<Value>& v) {
    return v && v->tensor ? v->tensor->scalar_type() : at::kFloat;
  };
  if (!on_device({result, x.tensor->scalar_type(), tensor_type(lo), tensor_type(hi)})) return c.fall_back();
  const Value none;
  const Value& l_ref = lo ? *lo : none;
  const Value& h_ref = hi ? *hi : none;
  const std::vector<int64_t> shape = broadcast_shape({&x, &l_ref, &h_ref});
  const std::optional<at::Tensor> out = output(c, *x.tensor, shape, result, {&x, &l_ref, &h_ref});
  if (!out) return c.fall_back();
  if (out->numel() == 0) return c.finish(*out);
  Launch l;
  ir::Operand src = operand(l, x);
  const uint32_t dst = l.view(*out);
  for (const auto& [bound, fn] : {std::pair{lo, BinaryFn::kMax}, std::pair{hi, BinaryFn::kMin}}) {
    if (!bound) continue;
    ir::Pointwise p;
    p.kind = ir::PointwiseKind::kBinary;
    p.binary = fn;
    p.compute = *device_dtype(result);
    p.inputs = {src, operand(l, *bound)};
    p.out = dst;
    l.pointwise(p);
    src = ir::Operand::of(dst);
  }
  finish(c, l, *out);
}

// fill_(self, value), zero_(self).
void fill_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const at::Tensor self = c.at(0).toTensor();
  if (!device_dtype(self.scalar_type())) return c.fall_back();
  double value = 0;
  if (c.base() == "fill") {
    const c10::IValue& v = c.at(1);
    if (v.isTensor()) {
      TORCH_CHECK(v.toTensor().dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
                  v.toTensor().dim(), " dimensions.");
      value = v.toTensor().item().toDouble();
    } else {
      value = v.toScalar().toDouble();
    }
  }
  if (self.numel() == 0) return c.finish(self);
  at::assert_no_internal_overlap(self);
  Launch l;
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kFill;
  p.compute = *device_dtype(self.scalar_type());
  p.start = value;
  p.out = l.view(self);
  l.pointwise(std::move(p));
  finish(c, l, self);
}

// arange(start, end, step, out=): an IOTA over the output.
void arange_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const double start = c.at(0).toScalar().toDouble(), end = c.at(1).toScalar().toDouble();
  const double step = c.at(2).toScalar().toDouble();
  at::Tensor out = *c.out();
  TORCH_CHECK(step != 0, "step must be nonzero");
  TORCH_CHECK(std::isfinite(start) && std::isfinite(end), "unsupported range: ", start, " -> ", end);
  TORCH_CHECK((step > 0 && end >= start) || (step < 0 && end <= start),
              "upper bound and larger bound inconsistent with step sign");
  if (!device_dtype(out.scalar_type())) return c.fall_back();
  const auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  if (out.numel() != n) out.resize_({n});
  if (n == 0) return c.finish(out);
  Launch l;
  ir::Pointwise p;
  p.kind = ir::PointwiseKind::kIota;
  p.compute = *device_dtype(out.scalar_type());
  p.start = start;
  p.step = step;
  p.out = l.view(out);
  l.pointwise(std::move(p));
  finish(c, l, out);
}

const bool g_registered = [] {
  std::vector<std::string> unary;
  for (const auto& [name, row] : kUnary) unary.push_back(name);
  register_boxed(with_inplace(unary), {"", "out"}, &unary_kernel);
  std::vector<std::string> binary;
  for (const auto& [name, row] : kBinary) binary.push_back(name);
  register_boxed(with_inplace(binary),
                 {"", "Tensor", "Scalar", "out", "Tensor_out", "Scalar_out", "Tensor_mode", "Scalar_mode", "out_mode",
                  "Scalar_mode_out", "Tensor_Tensor", "Tensor_Scalar", "Tensor_Tensor_out", "Tensor_Scalar_out",
                  "Scalar_Tensor", "Scalar_Tensor_out"},
                 &binary_kernel);
  register_boxed({"where"}, {"self", "self_out"}, &select_kernel);
  register_boxed({"masked_fill_"}, {"Scalar", "Tensor"}, &select_kernel);
  register_boxed(with_inplace({"clamp", "clamp_min", "clamp_max"}), {"", "out", "Tensor", "Tensor_out"}, &clamp_kernel);
  register_boxed({"fill_"}, {"Scalar", "Tensor"}, &fill_kernel);
  register_boxed({"zero_"}, {""}, &fill_kernel);
  register_boxed({"arange"}, {"start_out"}, &arange_kernel);
  return true;
}();

}  // namespace
std::map<std::string, int> unary_functions() {
  std::map<std::string, int> m;
  for (const auto& [name, row] : kUnary) m[name] = static_cast<int>(row.fn);
  return m;
}

std::map<std::string, int> binary_functions() {
  std::map<std::string, int> m;
  for (const auto& [name, row] : kBinary) m[name] = static_cast<int>(row.fn);
  return m;
}

}  // namespace spyre::backend
