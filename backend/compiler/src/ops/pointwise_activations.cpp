// Pointwise rows of the activation functions and their backwards.
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "family.h"
#include "pointwise_rows.h"

namespace spyre::compiler::ops::pointwise {

// Activation functions and their backwards, as torch's CPU kernels write them (the same branches,
// so that NaN and the boundaries go the same way).
void add_activations(std::map<std::string, PointwiseOp, std::less<>>& t) {
  using E = Expr;
  t["leaky_relu"] = row({"self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call& c) {
    const int32_t x = in[0];
    const int32_t neg = e.binary(BinaryFn::kMul, x, e.constant(c.number("negative_slope", 0.01)));
    return e.select(e.binary(BinaryFn::kGt, x, e.constant(0)), x, neg);
  });
  t["leaky_relu_backward"] = row({"grad_output", "self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call& c) {
    if (c.flag("self_is_result", false) && c.number("negative_slope", 0.01) < 0) {
      reject(c, "the backward of an in-place leaky_relu_ with a negative slope is not supported (as in torch)");
    }
    const int32_t neg = e.binary(BinaryFn::kMul, in[0], e.constant(c.number("negative_slope", 0.01)));
    return e.select(e.binary(BinaryFn::kGt, in[1], e.constant(0)), in[0], neg);
  });
  t["hardtanh"] = row({"self"}, Types::kPromote, [](E& e, const Refs& in, const Call& c) {
    // torch's hardtanh is a clamp, whose bounds round to the tensor's type
    const int32_t lo = e.binary(BinaryFn::kMax, in[0], e.constant(rounded_to(c.number("min_val", -1), c.common)));
    return e.binary(BinaryFn::kMin, lo, e.constant(rounded_to(c.number("max_val", 1), c.common)));
  });
  t["hardtanh_backward"] = row({"grad_output", "self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call& c) {
    const int32_t zero = e.constant(0.0);  // 0 at the bounds and at NaN
    const int32_t below = e.select(e.binary(BinaryFn::kLt, in[1], e.constant(c.number("max_val", 1))), in[0], zero);
    return e.select(e.binary(BinaryFn::kGt, in[1], e.constant(c.number("min_val", -1))), below, zero);
  });
  // elu(x, alpha, scale, input_scale) = x scale for x > 0, else (e^(x input_scale) - 1) alpha scale.
  t["elu"] = row({"self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call& c) {
    const double alpha = c.number("alpha", 1), scale = c.number("scale", 1), input_scale = c.number("input_scale", 1);
    const int32_t x = in[0];
    const int32_t neg =
        e.binary(BinaryFn::kMul, e.unary(UnaryFn::kExpm1, e.binary(BinaryFn::kMul, x, e.constant(input_scale))),
                 e.constant(alpha * scale));
    return e.select(e.binary(BinaryFn::kLe, x, e.constant(0)), neg, e.binary(BinaryFn::kMul, x, e.constant(scale)));
  });
  t["elu_backward"] =
      row({"grad_output", "self_or_result"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call& c) {
        const double alpha = c.number("alpha", 1), scale = c.number("scale", 1),
                     input_scale = c.number("input_scale", 1);
        const int32_t g = in[0], y = in[1];
        int32_t slope;
        if (c.flag("is_result", false)) {  // y is elu's result
          slope =
              e.binary(BinaryFn::kMul, e.constant(input_scale), e.binary(BinaryFn::kAdd, y, e.constant(alpha * scale)));
        } else {
          slope = e.binary(BinaryFn::kMul, e.constant(input_scale * alpha * scale),
                           e.unary(UnaryFn::kExp, e.binary(BinaryFn::kMul, y, e.constant(input_scale))));
        }
        return e.select(e.binary(BinaryFn::kGt, y, e.constant(0)), e.binary(BinaryFn::kMul, g, e.constant(scale)),
                        e.binary(BinaryFn::kMul, g, slope));  // NaN takes the exponential side
      });
  // min(max(x + 3, 0), 6) / 6, and x times it.
  const auto relu6_of_x3 = [](E& e, int32_t x) {
    const int32_t lo = e.binary(BinaryFn::kMax, e.binary(BinaryFn::kAdd, x, e.constant(3.0)), e.constant(0.0));
    return e.binary(BinaryFn::kMin, lo, e.constant(6.0));
  };
  t["hardsigmoid"] = row({"self"}, Types::kFloatOnly, [relu6_of_x3](E& e, const Refs& in, const Call&) {
    return e.binary(BinaryFn::kDiv, relu6_of_x3(e, in[0]), e.constant(6.0));
  });
  t["hardswish"] = row({"self"}, Types::kFloatOnly, [relu6_of_x3](E& e, const Refs& in, const Call&) {
    return e.binary(BinaryFn::kDiv, e.binary(BinaryFn::kMul, in[0], relu6_of_x3(e, in[0])), e.constant(6.0));
  });
  t["hardsigmoid_backward"] = row({"grad_output", "self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call&) {
    const int32_t zero = e.constant(0.0), x = in[1];
    const int32_t inside =
        e.select(e.binary(BinaryFn::kLt, x, e.constant(3.0)), e.binary(BinaryFn::kDiv, in[0], e.constant(6.0)), zero);
    return e.select(e.binary(BinaryFn::kGt, x, e.constant(-3.0)), inside, zero);
  });
  t["hardswish_backward"] = row({"grad_output", "self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call&) {
    const int32_t g = in[0], x = in[1];
    const int32_t mid = e.binary(
        BinaryFn::kMul, g, e.binary(BinaryFn::kAdd, e.binary(BinaryFn::kDiv, x, e.constant(3.0)), e.constant(0.5)));
    const int32_t lower = e.select(e.binary(BinaryFn::kGe, x, e.constant(3.0)), g, mid);  // NaN: mid
    return e.select(e.binary(BinaryFn::kLe, x, e.constant(-3.0)), e.constant(0.0), lower);
  });
  t["threshold"] = row({"self"}, Types::kPromote, [](E& e, const Refs& in, const Call& c) {
    const int32_t below = e.binary(BinaryFn::kLe, in[0], e.constant(rounded_to(c.number("threshold", 0), c.common)));
    return e.select(below, e.constant(c.number("value", 0)), in[0]);
  });
  // softshrink moves x towards 0 by lambd (a NaN stays NaN); hardshrink zeroes [-lambd, lambd].
  t["softshrink"] = row({"self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call& c) {
    const double l = c.number("lambd", 0.5);
    const int32_t x = in[0];
    const int32_t mid = e.select(e.binary(BinaryFn::kLt, x, e.constant(-l)), e.binary(BinaryFn::kAdd, x, e.constant(l)),
                                 e.binary(BinaryFn::kMul, x, e.constant(0.0)));
    return e.select(e.binary(BinaryFn::kGt, x, e.constant(l)), e.binary(BinaryFn::kSub, x, e.constant(l)), mid);
  });
  // hardshrink: x outside [-lambd, lambd] (and NaN), 0 inside.
  t["hardshrink"] = row({"self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call& c) {
    const double l = c.number("lambd", 0.5);
    const int32_t x = in[0];
    const int32_t upper = e.select(e.binary(BinaryFn::kLe, x, e.constant(l)), e.constant(0.0), x);
    return e.select(e.binary(BinaryFn::kGe, x, e.constant(-l)), upper, x);
  });
  // Both backwards: the gradient outside [-lambd, lambd], 0 inside and at NaN.
  for (const char* name : {"softshrink_backward", "hardshrink_backward"}) {
    t[name] = row({"grad_output", "self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call& c) {
      const double l = c.number("lambd", 0.5);
      const int32_t x = in[1], g = in[0];
      const int32_t low = e.select(e.binary(BinaryFn::kLt, x, e.constant(-l)), g, e.constant(0.0));
      return e.select(e.binary(BinaryFn::kGt, x, e.constant(l)), g, low);
    });
  }
  t["hardshrink_backward"].inputs = {"grad_out", "self"};
  t["hardshrink_backward"].promoted = {"grad_out", "self"};
  // mish(x) = x tanh(softplus(x)).
  t["mish"] = row({"self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call&) {
    const int32_t sp = e.unary(UnaryFn::kLog1p, e.unary(UnaryFn::kExp, in[0]));
    return e.binary(BinaryFn::kMul, in[0], e.unary(UnaryFn::kTanh, sp));
  });
  // The backwards of silu and mish as CPU's kernels compute them, in float32 with one rounding (for
  // other devices torch composes them of ops, each rounding to an fp16 or bf16 result).
  t["silu_backward"] = row({"grad_output", "self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[1], s = e.unary(UnaryFn::kSigmoid, x);
    const int32_t slope = e.binary(BinaryFn::kAdd, e.constant(1.0),
                                   e.binary(BinaryFn::kMul, x, e.binary(BinaryFn::kSub, e.constant(1.0), s)));
    return e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, in[0], s), slope);
  });
  t["mish_backward"] = row({"grad_output", "self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[1], s = e.unary(UnaryFn::kSigmoid, x);
    const int32_t t = e.unary(UnaryFn::kTanh, e.unary(UnaryFn::kLog1p, e.unary(UnaryFn::kExp, x)));
    const int32_t sech2 = e.binary(BinaryFn::kSub, e.constant(1.0), e.binary(BinaryFn::kMul, t, t));
    return e.binary(BinaryFn::kMul, in[0],
                    e.binary(BinaryFn::kAdd, t, e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, x, s), sech2)));
  });
}

}  // namespace spyre::compiler::ops::pointwise
