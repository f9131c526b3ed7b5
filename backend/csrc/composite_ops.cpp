// Elementwise ops that are expressions of several SFP functions, registered by table: activation
// backwards, addcmul, addcdiv, lerp and the isinf family. A row names the tensor arguments and the
// type rule, and builds the expression; the compiler evaluates it in one pass over the data (each
// input loaded once, intermediates in the scratchpad), so each call is one launch. Ops that torch
// decomposes itself (silu_backward, isfinite) need no row: their parts are native.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <functional>
#include <map>

#include "boxed.h"
#include "compute.h"
#include "pointwise_common.h"

namespace spyre::backend {
namespace {

using hw::BinaryFn;
using hw::UnaryFn;
using ir::Expr;

// Builds the expression over the row's inputs (their argument refs, in order); the last step added
// is the result. `c` gives the non-tensor arguments.
using Build = std::function<void(Expr&, const std::vector<int32_t>&, const BoxedCall&)>;

struct CompositeRow {
  std::vector<const char*> inputs;  // argument names, tensors or numbers
  enum Rule : uint8_t { kPromote, kBool } rule;
  Build build;
};

// x * 0.5 * (1 + erf(x / sqrt(2))) differentiated, or its tanh approximation.
void gelu_backward(Expr& e, const std::vector<int32_t>& in, const BoxedCall& c) {
  const int32_t g = in[0], x = in[1];
  const bool tanh = c.get("approximate") && c.get("approximate")->toStringRef() == "tanh";
  if (!tanh) {
    const int32_t cdf = e.binary(BinaryFn::kMul, e.constant(0.5),
                                 e.binary(BinaryFn::kAdd, e.constant(1.0),
                                          e.unary(UnaryFn::kErf, e.binary(BinaryFn::kMul, x, e.constant(M_SQRT1_2)))));
    const int32_t pdf =
        e.binary(BinaryFn::kMul, e.constant(0.5 * M_2_SQRTPI * M_SQRT1_2),
                 e.unary(UnaryFn::kExp, e.binary(BinaryFn::kMul, e.constant(-0.5), e.binary(BinaryFn::kMul, x, x))));
    e.binary(BinaryFn::kMul, g, e.binary(BinaryFn::kAdd, cdf, e.binary(BinaryFn::kMul, x, pdf)));
    return;
  }
  const double k = std::sqrt(2.0 / M_PI), a = 0.044715;
  const int32_t x2 = e.binary(BinaryFn::kMul, x, x);
  const int32_t inner =
      e.binary(BinaryFn::kMul, e.constant(k),
               e.binary(BinaryFn::kAdd, x, e.binary(BinaryFn::kMul, e.constant(a), e.binary(BinaryFn::kMul, x2, x))));
  const int32_t t = e.unary(UnaryFn::kTanh, inner);
  const int32_t left = e.binary(BinaryFn::kMul, e.constant(0.5), e.binary(BinaryFn::kAdd, e.constant(1.0), t));
  const int32_t sech2 = e.binary(BinaryFn::kSub, e.constant(1.0), e.binary(BinaryFn::kMul, t, t));
  const int32_t dinner =
      e.binary(BinaryFn::kMul, e.constant(k),
               e.binary(BinaryFn::kAdd, e.constant(1.0), e.binary(BinaryFn::kMul, e.constant(3 * a), x2)));
  const int32_t right =
      e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, e.constant(0.5), x), e.binary(BinaryFn::kMul, sech2, dinner));
  e.binary(BinaryFn::kMul, g, e.binary(BinaryFn::kAdd, left, right));
}

const std::map<std::string, CompositeRow, std::less<>> kComposite = {
    {"gelu_backward", {{"grad_output", "self"}, CompositeRow::kPromote, gelu_backward}},
    {"sigmoid_backward",  // g * y * (1 - y)
     {{"grad_output", "output"},
      CompositeRow::kPromote,
      [](Expr& e, const std::vector<int32_t>& in, const BoxedCall&) {
        e.binary(BinaryFn::kMul, in[0],
                 e.binary(BinaryFn::kMul, in[1], e.binary(BinaryFn::kSub, e.constant(1.0), in[1])));
      }}},
    {"tanh_backward",  // g * (1 - y^2)
     {{"grad_output", "output"},
      CompositeRow::kPromote,
      [](Expr& e, const std::vector<int32_t>& in, const BoxedCall&) {
        e.binary(BinaryFn::kMul, in[0],
                 e.binary(BinaryFn::kSub, e.constant(1.0), e.binary(BinaryFn::kMul, in[1], in[1])));
      }}},
    {"native_dropout_backward",  // g * mask * scale
     {{"grad_output", "mask"},
      CompositeRow::kPromote,
      [](Expr& e, const std::vector<int32_t>& in, const BoxedCall& c) {
        e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, in[0], in[1]), e.constant(c.scalar("scale", 1)));
      }}},
    {"threshold_backward",  // self <= threshold ? 0 : g
     {{"grad_output", "self"},
      CompositeRow::kPromote,
      [](Expr& e, const std::vector<int32_t>& in, const BoxedCall& c) {
        const int32_t below = e.binary(BinaryFn::kLe, in[1], e.constant(c.scalar("threshold", 0)));
        e.select(below, e.constant(0.0), in[0]);
      }}},
    {"addcmul",  // self + value * t1 * t2
     {{"self", "tensor1", "tensor2"},
      CompositeRow::kPromote,
      [](Expr& e, const std::vector<int32_t>& in, const BoxedCall& c) {
        const int32_t prod = e.binary(BinaryFn::kMul, in[1], in[2]);
        e.binary(BinaryFn::kAdd, in[0], e.binary(BinaryFn::kMul, e.constant(c.scalar("value", 1)), prod));
      }}},
    {"addcdiv",  // self + value * t1 / t2
     {{"self", "tensor1", "tensor2"},
      CompositeRow::kPromote,
      [](Expr& e, const std::vector<int32_t>& in, const BoxedCall& c) {
        const int32_t q = e.binary(BinaryFn::kDiv, in[1], in[2]);
        e.binary(BinaryFn::kAdd, in[0], e.binary(BinaryFn::kMul, e.constant(c.scalar("value", 1)), q));
      }}},
    {"lerp",  // as torch: w < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w)
     {{"self", "end", "weight"},
      CompositeRow::kPromote,
      [](Expr& e, const std::vector<int32_t>& in, const BoxedCall&) {
        const int32_t diff = e.binary(BinaryFn::kSub, in[1], in[0]);
        const int32_t low = e.binary(BinaryFn::kAdd, in[0], e.binary(BinaryFn::kMul, in[2], diff));
        const int32_t high = e.binary(BinaryFn::kSub, in[1],
                                      e.binary(BinaryFn::kMul, diff, e.binary(BinaryFn::kSub, e.constant(1.0), in[2])));
        e.select(e.binary(BinaryFn::kLt, in[2], e.constant(0.5)), low, high);
      }}},
    {"isinf",
     {{"self"},
      CompositeRow::kBool,
      [](Expr& e, const std::vector<int32_t>& in, const BoxedCall&) { e.unary(UnaryFn::kIsInf, in[0]); }}},
    {"isposinf",
     {{"self"},
      CompositeRow::kBool,
      [](Expr& e, const std::vector<int32_t>& in, const BoxedCall&) {
        e.binary(BinaryFn::kEq, in[0], e.constant(INFINITY));
      }}},
    {"isneginf",
     {{"self"},
      CompositeRow::kBool,
      [](Expr& e, const std::vector<int32_t>& in, const BoxedCall&) {
        e.binary(BinaryFn::kEq, in[0], e.constant(-INFINITY));
      }}},
};

void composite_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  BoxedCall c(op, stack);
  const CompositeRow& row = kComposite.at(c.base());
  std::vector<Value> values;
  for (const char* name : row.inputs) values.push_back(value_of(*c.get(name)));
  const at::Tensor like = *values[0].tensor;
  at::ScalarType common = like.scalar_type();
  for (const Value& v : values) common = at::promote_types(common, promote(values[0], v));
  const at::ScalarType result = row.rule == CompositeRow::kBool ? at::kBool : common;
  // Integer inputs of the float-only functions compute in the default float type.
  const bool float_only = row.rule == CompositeRow::kPromote && c.base() != "addcmul";
  at::ScalarType compute = common;
  if (float_only && at::isIntegralType(common, true)) compute = c10::typeMetaToScalarType(at::get_default_dtype());
  for (const Value& v : values) {
    if (v.tensor && !on_device({v.tensor->scalar_type()})) return c.fall_back();
  }
  if (!on_device({result, compute})) return c.fall_back();
  std::vector<int64_t> shape;
  for (const Value& v : values) {
    if (v.tensor) shape = at::infer_size(shape, v.tensor->sizes());
  }
  std::vector<const Value*> inputs;
  for (const Value& v : values) inputs.push_back(&v);
  const std::optional<at::Tensor> out = output(c, like, shape, result, inputs);
  if (!out) return c.fall_back();
  if (out->numel() == 0) return c.finish(*out);
  if (row.rule == CompositeRow::kBool && !at::isFloatingType(common)) {  // integers are finite
    return c.finish(out->fill_(false));
  }
  Launch l;
  Expr e(*device_dtype(compute));
  std::vector<int32_t> refs;
  for (const Value& v : values) refs.push_back(e.input(operand(l, v)));
  row.build(e, refs, c);
  l.pointwise(e.done(l.view(*out)));
  finish(c, l, *out);
}

const bool g_registered = [] {
  register_boxed({"gelu_backward", "sigmoid_backward", "tanh_backward", "threshold_backward"}, {"", "grad_input"},
                 &composite_kernel);
  register_boxed(with_inplace({"addcmul", "addcdiv", "lerp"}),
                 {"", "out", "Scalar", "Tensor", "Scalar_out", "Tensor_out"}, &composite_kernel);
  register_boxed({"isinf", "isposinf", "isneginf"}, {"", "out"}, &composite_kernel);
  register_boxed({"native_dropout_backward"}, {""}, &composite_kernel);
  return true;
}();

}  // namespace
}  // namespace spyre::backend
