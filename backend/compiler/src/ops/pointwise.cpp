// Pointwise ops, one table: each row names the arguments the op reads, torch's type rule for it and
// the expression of one element. An eager call is one expression; under torch.compile a chain of
// them is one expression (a fused producer arrives as an argument of kind kExpr), so a row is the
// only place an op's arithmetic is written. Unary and binary rows map straight to SFP functions;
// the rest (activation backwards, addcmul, lerp, clamp, where, fills) are small expressions.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "family.h"
#include "pointwise_rows.h"

namespace spyre::compiler::ops {
namespace pointwise {

PointwiseOp row(std::vector<std::string> inputs, Types types, Build build) {
  PointwiseOp p;
  p.promoted = inputs;
  p.inputs = std::move(inputs);
  p.types = types;
  p.build = std::move(build);
  return p;
}

PointwiseOp unary(UnaryFn fn, Types types) {
  return row({"self"}, types, [fn](Expr& e, const Refs& in, const Call&) { return e.unary(fn, in[0]); });
}

PointwiseOp binary(BinaryFn fn, Types types) {
  return row({"self", "other"}, types,
             [fn](Expr& e, const Refs& in, const Call&) { return e.binary(fn, in[0], in[1]); });
}

bool is_float(DType t) {
  return hw::dtype_is_float(t);
}

// add(self, other, alpha) = self + alpha * other; sub = self - alpha * other; rsub = other - alpha * self.
PointwiseOp add_sub(BinaryFn fn, bool reversed) {
  return row({"self", "other"}, Types::kPromote, [fn, reversed](Expr& e, const Refs& in, const Call& c) {
    double alpha = c.number("alpha", 1);
    if (c.common == DType::kBool) alpha = alpha != 0 ? 1 : 0;  // torch casts alpha to the type: -1 is True
    const int32_t x = reversed ? in[1] : in[0], y = reversed ? in[0] : in[1];
    if (alpha == 1) return e.binary(fn, x, y);
    const Arg* scaled = c.get(reversed ? "self" : "other");
    if (scaled && scaled->kind == Arg::Kind::kNumber) {  // a number times alpha is a number
      return e.binary(fn, x, e.constant(scaled->number * alpha));
    }
    return e.fma(y, e.constant(fn == BinaryFn::kAdd ? alpha : -alpha), x);  // y * +-alpha + x
  });
}

bool narrow(DType t) {
  return t == DType::kF16 || t == DType::kBF16;
}

// Whether input `name` of call `c` is read exactly in an fp16 or bf16 call (the call then computes
// in fp32): a number where the op keeps numbers exact, and a tensor of one element as the second
// operand of mul, div and floor_divide, which CPU's kernels read as a scalar, unconverted (pow and
// lerp keep only numbers exact).
bool exact_operand(const PointwiseOp& p, const Call& c, const std::string& name) {
  const Arg* a = c.get(name);
  if (!a || std::find(p.exact_numbers.begin(), p.exact_numbers.end(), name) == p.exact_numbers.end()) return false;
  return a->kind == Arg::Kind::kNumber || (a->kind == Arg::Kind::kTensor && a->one_element && name == "other");
}

// div with rounding_mode="trunc" in fp16 or bf16 truncates the quotient rounded to that type, as
// torch's CPU kernel does: the truncation is an op of its own after the quotient is stored.
bool trunc_after(const Call& c) {
  const PointwiseOp* p = pointwise_op(c.op);
  const bool exact = p && exact_operand(*p, c, "other");  // then the quotient is not rounded first
  return c.op == "div" && c.text("rounding_mode") == "trunc" && narrow(c.result) && !exact;
}

// div(self, other, rounding_mode): true division, floor, or trunc (integer division truncates).
int32_t div(Expr& e, const Refs& in, const Call& c) {
  const std::string mode = c.text("rounding_mode");
  if (mode == "floor") return e.binary(BinaryFn::kFloorDiv, in[0], in[1]);
  const int32_t q = e.binary(BinaryFn::kDiv, in[0], in[1]);
  if (mode == "trunc" && is_float(c.result) && !trunc_after(c)) return e.unary(UnaryFn::kTrunc, q);
  return q;
}

// Whether float x's sign bit is set: below 0, or a zero whose reciprocal is -inf (-0.0). A NaN's
// sign bit reads as clear.
int32_t sign_bit(Expr& e, int32_t x) {
  const int32_t minus_zero =
      e.binary(BinaryFn::kLogicalAnd, e.binary(BinaryFn::kEq, x, e.constant(0)),
               e.binary(BinaryFn::kLt, e.binary(BinaryFn::kDiv, e.constant(1.0), x), e.constant(0)));
  return e.binary(BinaryFn::kLogicalOr, e.binary(BinaryFn::kLt, x, e.constant(0)), minus_zero);
}

// pow(self, exponent): the exponents torch's CPU kernels compute by multiplication or a root exactly
// are computed so here too, in float types.
int32_t pow(Expr& e, const Refs& in, const Call& c) {
  const Arg* k = c.get("exponent");
  if (k && k->kind == Arg::Kind::kNumber && is_float(compute_type(*pointwise_op("pow"), c))) {
    const double x = k->number;
    if (x == 1) return e.copy(in[0]);
    if (x == 2) return e.binary(BinaryFn::kMul, in[0], in[0]);
    if (x == 3) return e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, in[0], in[0]), in[0]);
    if (x == 0.5) return e.unary(UnaryFn::kSqrt, in[0]);
    if (x == -0.5) return e.unary(UnaryFn::kRsqrt, in[0]);
    if (x == -1) return e.unary(UnaryFn::kReciprocal, in[0]);
    if (x == -2) return e.unary(UnaryFn::kReciprocal, e.binary(BinaryFn::kMul, in[0], in[0]));
    // An odd integer past 2^24 rounds to an even float: the power takes the base's sign back
    // (-0 included), as CPU's double exponent keeps it.
    if (std::fabs(x) > 16777216.0 && std::fabs(x) < 9007199254740992.0 && std::fmod(x, 2.0) != 0) {
      const int32_t p = e.binary(BinaryFn::kPow, in[0], in[1]);
      return e.select(sign_bit(e, in[0]), e.unary(UnaryFn::kNeg, p), p);
    }
  }
  return e.binary(BinaryFn::kPow, in[0], in[1]);
}

// x * 0.5 * (1 + erf(x / sqrt(2))) differentiated, or its tanh approximation.
int32_t gelu_backward(Expr& e, const Refs& in, const Call& c) {
  const int32_t g = in[0], x = in[1];
  if (c.text("approximate", "none") != "tanh") {
    const int32_t cdf = e.binary(BinaryFn::kMul, e.constant(0.5),
                                 e.binary(BinaryFn::kAdd, e.constant(1.0),
                                          e.unary(UnaryFn::kErf, e.binary(BinaryFn::kMul, x, e.constant(M_SQRT1_2)))));
    const int32_t pdf =
        e.binary(BinaryFn::kMul, e.constant(0.5 * M_2_SQRTPI * M_SQRT1_2),
                 e.unary(UnaryFn::kExp, e.binary(BinaryFn::kMul, e.constant(-0.5), e.binary(BinaryFn::kMul, x, x))));
    return e.binary(BinaryFn::kMul, g, e.binary(BinaryFn::kAdd, cdf, e.binary(BinaryFn::kMul, x, pdf)));
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
  return e.binary(BinaryFn::kMul, g, e.binary(BinaryFn::kAdd, left, right));
}

// The largest finite value of a floating type.
double largest(DType t) {
  switch (t) {
    case DType::kF16:
      return 65504.0;
    case DType::kBF16:
      return 3.3895313892515355e38;
    default:
      return std::numeric_limits<float>::max();
  }
}

// A value every element takes (fills); a constant input, which becomes a fill step at the root.
PointwiseOp constant_of(const char* name) {
  return row({name}, Types::kSelf, [](Expr&, const Refs& in, const Call&) { return in[0]; });
}

PointwiseOp copy_of(const char* name) {
  return row({name}, Types::kPromote, [](Expr& e, const Refs& in, const Call&) { return e.copy(in[0]); });
}

std::map<std::string, PointwiseOp, std::less<>> make_table() {
  std::map<std::string, PointwiseOp, std::less<>> t;
  // Unary: the SFP function of the same name.
  const std::pair<const char*, UnaryFn> same[] = {
      {"neg", UnaryFn::kNeg},   {"abs", UnaryFn::kAbs},     {"relu", UnaryFn::kRelu},   {"floor", UnaryFn::kFloor},
      {"ceil", UnaryFn::kCeil}, {"round", UnaryFn::kRound}, {"trunc", UnaryFn::kTrunc}, {"square", UnaryFn::kSquare},
  };
  for (const auto& [name, fn] : same) t[name] = unary(fn, Types::kPromote);
  // sign of NaN is 0 in torch ((0 < x) - (x < 0)); the SFP's gives NaN.
  for (const char* name : {"sign", "sgn"}) {
    t[name] = row({"self"}, Types::kPromote, [](Expr& e, const Refs& in, const Call& c) {
      const int32_t s = e.unary(UnaryFn::kSign, in[0]);
      return is_float(c.common) ? e.select(e.unary(UnaryFn::kIsNan, in[0]), e.constant(0.0), s) : s;
    });
  }
  const std::pair<const char*, UnaryFn> to_float[] = {
      {"exp", UnaryFn::kExp},   {"exp2", UnaryFn::kExp2},       {"expm1", UnaryFn::kExpm1},
      {"log", UnaryFn::kLog},   {"log2", UnaryFn::kLog2},       {"log1p", UnaryFn::kLog1p},
      {"sqrt", UnaryFn::kSqrt}, {"rsqrt", UnaryFn::kRsqrt},     {"reciprocal", UnaryFn::kReciprocal},
      {"tanh", UnaryFn::kTanh}, {"sigmoid", UnaryFn::kSigmoid}, {"erf", UnaryFn::kErf},
      {"sin", UnaryFn::kSin},   {"cos", UnaryFn::kCos},         {"silu", UnaryFn::kSilu},
  };
  for (const auto& [name, fn] : to_float) t[name] = unary(fn, Types::kToFloat);
  // At +inf and past half of fp32's largest value CPU's answer depends on its kernel's layout (the
  // vectorized loop gives NaN and inf, the scalar loop inf and x): the SFP's is the scalar one's.
  t["gelu"] = row({"self"}, Types::kToFloat, [](Expr& e, const Refs& in, const Call& c) {
    return e.unary(c.text("approximate", "none") == "tanh" ? UnaryFn::kGeluTanh : UnaryFn::kGeluErf, in[0]);
  });
  t["logical_not"] = unary(UnaryFn::kLogicalNot, Types::kToBool);
  t["isnan"] = unary(UnaryFn::kIsNan, Types::kToBool);
  t["bitwise_not"] = row({"self"}, Types::kIntegral, [](Expr& e, const Refs& in, const Call& c) {
    return e.unary(c.common == DType::kBool ? UnaryFn::kLogicalNot : UnaryFn::kBitwiseNot, in[0]);
  });
  // Binary.
  t["add"] = add_sub(BinaryFn::kAdd, false);
  t["sub"] = add_sub(BinaryFn::kSub, false);
  t["rsub"] = add_sub(BinaryFn::kSub, true);
  const std::pair<const char*, BinaryFn> arith[] = {
      {"mul", BinaryFn::kMul},     {"maximum", BinaryFn::kMax},
      {"minimum", BinaryFn::kMin}, {"remainder", BinaryFn::kRemainder},
      {"fmod", BinaryFn::kFmod},   {"floor_divide", BinaryFn::kFloorDiv},
  };
  for (const auto& [name, fn] : arith) t[name] = binary(fn, Types::kPromote);
  t["atan2"] = binary(BinaryFn::kAtan2, Types::kToFloat);
  t["div"] = row({"self", "other"}, Types::kTrueDiv, div);
  // prims.div (what torch's decompositions write, a layer norm's mean among them): true division of
  // floats; of integers it truncates, which is left to the eager kernel.
  t["prims::div"] = row({"self", "other"}, Types::kPromote, [](Expr& e, const Refs& in, const Call& c) {
    if (!is_float(c.result)) reject(c, "prims.div of integers truncates; it runs eagerly");
    return e.binary(BinaryFn::kDiv, in[0], in[1]);
  });
  t["pow"] = row({"self", "exponent"}, Types::kPromote, pow);
  const std::pair<const char*, BinaryFn> compare[] = {
      {"eq", BinaryFn::kEq},
      {"ne", BinaryFn::kNe},
      {"lt", BinaryFn::kLt},
      {"le", BinaryFn::kLe},
      {"gt", BinaryFn::kGt},
      {"ge", BinaryFn::kGe},
      {"logical_and", BinaryFn::kLogicalAnd},
      {"logical_or", BinaryFn::kLogicalOr},
      {"logical_xor", BinaryFn::kLogicalXor},
  };
  for (const auto& [name, fn] : compare) {
    t[name] = binary(fn, Types::kToBool);
  }
  const std::tuple<const char*, BinaryFn, BinaryFn> bitwise[] = {
      {"bitwise_and", BinaryFn::kBitAnd, BinaryFn::kLogicalAnd},
      {"bitwise_or", BinaryFn::kBitOr, BinaryFn::kLogicalOr},
      {"bitwise_xor", BinaryFn::kBitXor, BinaryFn::kLogicalXor},
  };
  for (const auto& [name, fn, logical] : bitwise) {
    t[name] =
        row({"self", "other"}, Types::kIntegral, [fn = fn, logical = logical](Expr& e, const Refs& in, const Call& c) {
          return e.binary(c.common == DType::kBool ? logical : fn, in[0], in[1]);
        });
  }
  // Expressions.
  t["gelu_backward"] = row({"grad_output", "self"}, Types::kFloatOnly, gelu_backward);
  t["sigmoid_backward"] = row({"grad_output", "output"}, Types::kFloatOnly, [](Expr& e, const Refs& in, const Call&) {
    return e.binary(BinaryFn::kMul, in[0],
                    e.binary(BinaryFn::kMul, in[1], e.binary(BinaryFn::kSub, e.constant(1.0), in[1])));
  });
  t["tanh_backward"] = row({"grad_output", "output"}, Types::kFloatOnly, [](Expr& e, const Refs& in, const Call&) {
    return e.binary(BinaryFn::kMul, in[0],
                    e.binary(BinaryFn::kSub, e.constant(1.0), e.binary(BinaryFn::kMul, in[1], in[1])));
  });
  t["native_dropout_backward"] =
      row({"grad_output", "mask"}, Types::kFloatOnly, [](Expr& e, const Refs& in, const Call& c) {
        return e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, in[0], in[1]), e.constant(c.number("scale", 1)));
      });
  t["threshold_backward"] = row({"grad_output", "self"}, Types::kFloatOnly, [](Expr& e, const Refs& in, const Call& c) {
    const int32_t below = e.binary(BinaryFn::kLe, in[1], e.constant(c.number("threshold", 0)));
    return e.select(below, e.constant(0.0), in[0]);
  });
  // softplus(x, beta, threshold) = log1p(exp(beta x)) / beta, or x where beta x > threshold.
  t["softplus"] = row({"self"}, Types::kFloatOnly, [](Expr& e, const Refs& in, const Call& c) {
    const double beta = c.number("beta", 1), threshold = c.number("threshold", 20);
    const int32_t bx = e.binary(BinaryFn::kMul, in[0], e.constant(beta));
    const int32_t soft =
        e.binary(BinaryFn::kDiv, e.unary(UnaryFn::kLog1p, e.unary(UnaryFn::kExp, bx)), e.constant(beta));
    return e.select(e.binary(BinaryFn::kGt, bx, e.constant(threshold)), in[0], soft);
  });
  t["softplus_backward"] = row({"grad_output", "self"}, Types::kFloatOnly, [](Expr& e, const Refs& in, const Call& c) {
    const double beta = c.number("beta", 1), threshold = c.number("threshold", 20);
    // As CPU: grad * z / (z + 1) with z = exp(beta x), in that order, so that an infinite gradient
    // through a denormal z (x = -90) stays infinite where grad * sigmoid(x) would be inf * 0.
    const int32_t bx = e.binary(BinaryFn::kMul, in[1], e.constant(beta));
    const int32_t z = e.unary(UnaryFn::kExp, bx);
    const int32_t scaled =
        e.binary(BinaryFn::kDiv, e.binary(BinaryFn::kMul, in[0], z), e.binary(BinaryFn::kAdd, z, e.constant(1.0)));
    return e.select(e.binary(BinaryFn::kGt, bx, e.constant(threshold)), in[0], scaled);
  });
  // As torch's CPU kernel: self + (value * t1) * t2, in that order (t1 * t2 first could overflow),
  // the product and the sum one fused multiply-add (CPU's compiled loop fuses them wherever the
  // host has FMA: rounded twice, 1 ulp off in about a fifth of fp32 elements).
  t["addcmul"] = row({"self", "tensor1", "tensor2"}, Types::kPromote, [](Expr& e, const Refs& in, const Call& c) {
    const int32_t scaled = e.binary(BinaryFn::kMul, e.constant(c.number("value", 1)), in[1]);
    return e.fma(scaled, in[2], in[0]);
  });
  t["addcdiv"] = row({"self", "tensor1", "tensor2"}, Types::kFloatOnly, [](Expr& e, const Refs& in, const Call& c) {
    const int32_t q = e.binary(BinaryFn::kDiv, in[1], in[2]);
    return e.binary(BinaryFn::kAdd, in[0], e.binary(BinaryFn::kMul, e.constant(c.number("value", 1)), q));
  });
  // As torch's CPU kernel: |w| < 0.5 ? self + w * (end - self) : end + (w - 1) * (end - self), each
  // one fused multiply-add (CPU's vectorised loop is fmadd(coefficient, end - self, base)).
  t["lerp"] = row({"self", "end", "weight"}, Types::kFloatOnly, [](Expr& e, const Refs& in, const Call&) {
    const int32_t diff = e.binary(BinaryFn::kSub, in[1], in[0]);
    const int32_t small = e.binary(BinaryFn::kLt, e.unary(UnaryFn::kAbs, in[2]), e.constant(0.5));
    const int32_t coefficient = e.select(small, in[2], e.binary(BinaryFn::kSub, in[2], e.constant(1.0)));
    return e.fma(coefficient, diff, e.select(small, in[0], in[1]));
  });
  // Integers are finite: the isinf family of an integer input is false everywhere.
  t["isinf"] = row({"self"}, Types::kToBool, [](Expr& e, const Refs& in, const Call& c) {
    return is_float(c.common) ? e.unary(UnaryFn::kIsInf, in[0]) : e.constant(0);
  });
  for (const auto& [name, sign] : {std::pair{"isposinf", 1.0}, std::pair{"isneginf", -1.0}}) {
    t[name] = row({"self"}, Types::kToBool, [sign = sign](Expr& e, const Refs& in, const Call& c) {
      return is_float(c.common) ? e.binary(BinaryFn::kEq, in[0], e.constant(sign * INFINITY)) : e.constant(0);
    });
  }
  t["where"] = row({"condition", "self", "other"}, Types::kPromote,
                   [](Expr& e, const Refs& in, const Call&) { return e.select(in[0], in[1], in[2]); });
  t["where"].promoted = {"self", "other"};
  t["masked_fill"] = row({"mask", "value", "self"}, Types::kSelf,
                         [](Expr& e, const Refs& in, const Call&) { return e.select(in[0], in[1], in[2]); });
  t["masked_fill"].promoted = {"self"};
  // clamp: max with the lower bound, then min with the upper one (NaN propagates, as in torch).
  const Build clamp = [](Expr& e, const Refs& in, const Call&) {
    int32_t x = in[0];
    if (in.size() > 1 && in[1] != kAbsent) x = e.binary(BinaryFn::kMax, x, in[1]);
    if (in.size() > 2 && in[2] != kAbsent) x = e.binary(BinaryFn::kMin, x, in[2]);
    return x;
  };
  t["clamp"] = row({"self", "min", "max"}, Types::kPromote, clamp);
  t["clamp_min"] = row({"self", "min"}, Types::kPromote, clamp);
  t["clamp_max"] = row({"self", "max"}, Types::kPromote,
                       [](Expr& e, const Refs& in, const Call&) { return e.binary(BinaryFn::kMin, in[0], in[1]); });
  for (const char* name : {"mul", "div", "prims::div", "floor_divide"}) t[name].exact_numbers = {"other"};
  t["pow"].exact_numbers = {"exponent"};
  t["lerp"].exact_numbers = {"weight"};
  // Copies (any strides, broadcasting the source, converting to the result's type).
  t["clone"] = copy_of("self");
  t["_to_copy"] = copy_of("self");
  t["lift_fresh_copy"] = copy_of("self");
  t["copy"] = copy_of("src");  // copy_(self, src): self takes src
  t["prims::convert_element_type"] = copy_of("a");
  // Fills.
  t["fill"] = constant_of("value");
  t["full"] = constant_of("fill_value");
  t["full_like"] = constant_of("fill_value");
  t["scalar_tensor"] = constant_of("s");
  t["zero"] = row({}, Types::kSelf, [](Expr& e, const Refs&, const Call&) { return e.constant(0); });
  add_derived_math(t);
  add_special_math(t);
  add_special_functions(t);
  add_activations(t);
  // The planner's rotate_half (passes.py fuse_rotate_half): HuggingFace's cat(-x[..., h:], x[..., :h]).
  t["spyre::rotate_half"] =
      row({"self"}, Types::kSelf, [](Expr& e, const Refs& in, const Call&) { return e.rotate_half(in[0]); });
  // arange(start, end, step): start + i * step over a 1-d result.
  t["arange"] = row({}, Types::kSelf, [](Expr& e, const Refs&, const Call& c) {
    return e.iota(c.number("start", 0), c.number("step", 1));
  });
  return t;
}

const std::map<std::string, PointwiseOp, std::less<>>& table() {
  static const auto t = make_table();
  return t;
}

// fp16 and bf16 compute in fp32 inside an expression: they fuse with fp32 expressions.
DType widened(DType t) {
  return t == DType::kF16 || t == DType::kBF16 ? DType::kF32 : t;
}

// What the steps of one expression share: the ref of each view already an input, and the shape of
// the expression's output (a fused reduction reduces its last dim).
struct Walk {
  const Builder* b = nullptr;
  std::map<uint32_t, int32_t> memo;
  std::map<const Call*, int32_t> done;  // fused producers already computed (one call nested twice)
  std::vector<int64_t> shape;
};

int32_t steps_of(Expr& e, const Call& c, Walk& w);
int32_t fused_ref(Expr& e, const Call& parent, const std::string& name, const Call& child, Walk& w);

// The ref of view `v` as an input of the expression: one input per view.
int32_t view_ref(Expr& e, uint32_t v, Walk& w) {
  const auto it = w.memo.find(v);
  return it != w.memo.end() ? it->second : w.memo[v] = e.input(ir::Operand::of(v));
}

bool row_reduction_op(std::string_view op) {
  return op == "sum" || op == "prims::sum" || op == "mean" || op == "amax" || op == "amin" || op == "prims::var" ||
         op == "var";
}

// A reduction fused into the expression: sum, mean, amax, amin or var of its input over the output's
// last dim, one value per row (the planner fuses only those, into a consumer of the input's shape).
// var is two passes over the row as the unfused lowering computes it: shifted by the row's largest
// value (a constant row is exactly 0) and scaled by its largest magnitude (squares do not overflow).
int32_t row_reduction(Expr& e, const Call& c, Walk& w) {
  const bool prims = c.op.rfind("prims::", 0) == 0;
  const size_t rank = w.shape.size();
  const Arg* dims = c.get(prims ? "dims" : "dim");
  if (rank == 0 || !dims || dims->kind != Arg::Kind::kInts ||
      wrap_dims(dims->ints, rank) != std::vector<int64_t>{static_cast<int64_t>(rank) - 1}) {
    reject(c, "only a reduction over the expression's last dim can be fused into it");
  }
  if (c.result != DType::kF32 || widened(e.compute()) != DType::kF32) reject(c, "a fused reduction computes in fp32");
  // The planner names the shape it reduces: the expression's (an expression input has no view).
  const Arg* sizes = c.get("input_sizes");
  if (sizes && (sizes->kind != Arg::Kind::kInts || sizes->ints != w.shape)) {
    reject(c, "a fused reduction's input has the expression's shape");
  }
  const std::string input = prims ? "inp" : "self";
  const Arg* a = c.get(input);
  if (!a) reject(c, "the reduction has no input");
  int32_t x = 0;
  if (a->kind == Arg::Kind::kTensor) {
    if (w.b->view(a->view).sizes != w.shape) reject(c, "a fused reduction's input has the expression's shape");
    x = view_ref(e, a->view, w);
  } else if (a->kind == Arg::Kind::kExpr) {
    x = fused_ref(e, c, input, *a->expr, w);
  } else {
    reject(c, "the reduction's input is not a tensor");
  }
  const auto n = static_cast<double>(w.shape.back());
  if (c.op == "amax") return e.reduce(hw::ReduceFn::kMax, x);
  if (c.op == "amin") return e.reduce(hw::ReduceFn::kMin, x);
  if (c.op == "sum" || c.op == "prims::sum") return e.reduce(hw::ReduceFn::kSum, x);
  if (c.op == "mean") return e.binary(BinaryFn::kMul, e.reduce(hw::ReduceFn::kSum, x), e.constant(1.0 / n));
  const int32_t shifted = e.binary(BinaryFn::kSub, x, e.reduce(hw::ReduceFn::kMax, x));
  const int32_t low = e.reduce(hw::ReduceFn::kMin, shifted);  // -(largest magnitude): shifted <= 0
  const int32_t mag =
      e.select(e.binary(BinaryFn::kEq, low, e.constant(0.0)), e.constant(1.0), e.unary(UnaryFn::kNeg, low));
  const int32_t u = e.binary(BinaryFn::kDiv, shifted, mag);
  const int32_t mean = e.binary(BinaryFn::kMul, e.reduce(hw::ReduceFn::kSum, u), e.constant(1.0 / n));
  const int32_t d = e.binary(BinaryFn::kSub, u, mean);
  const double correction = c.number("correction", 1);
  const int32_t v = e.binary(BinaryFn::kMul, e.reduce(hw::ReduceFn::kSum, e.binary(BinaryFn::kMul, d, d)),
                             e.constant(1.0 / std::max(0.0, n - correction)));
  return e.binary(BinaryFn::kMul, e.binary(BinaryFn::kMul, v, mag), mag);
}

// The ref of fused producer `child`, argument `name` of `parent`: a row reduction, or a pointwise
// call computing in the expression's type; each call once per expression.
int32_t fused_ref(Expr& e, const Call& parent, const std::string& name, const Call& child, Walk& w) {
  if (const auto it = w.done.find(&child); it != w.done.end()) return it->second;
  if (row_reduction_op(child.op)) return w.done[&child] = row_reduction(e, child, w);
  const PointwiseOp* q = pointwise_op(child.op);
  if (!q || widened(compute_type(*q, child)) != widened(e.compute())) {
    reject(parent, fmt::format("argument '{}' ({}) computes in another type; it cannot be fused", name, child.op));
  }
  int32_t r = steps_of(e, child, w);
  // A child in fp16 or bf16 would round its value when stored: fused, it is rounded the same way
  // (and a truncating division truncates that value, as its unfused program does after the store).
  if (narrow(child.result)) r = e.round(child.result, r);
  if (trunc_after(child)) r = e.unary(UnaryFn::kTrunc, r);
  return w.done[&child] = r;
}

// Appends the steps of call `c` to `e`: its inputs (views shared through the walk's memo, numbers
// as constants, fused producers recursively), then its row's expression; the result's ref.
int32_t steps_of(Expr& e, const Call& c, Walk& w) {
  const PointwiseOp* p = pointwise_op(c.op);
  if (!p) reject(c, "not a pointwise op: it cannot be fused into an expression");
  Refs refs;
  for (const std::string& name : p->inputs) {
    const Arg* a = c.get(name);
    if (!a) {
      refs.push_back(kAbsent);
      continue;
    }
    switch (a->kind) {
      case Arg::Kind::kTensor: {
        int32_t r = view_ref(e, a->view, w);
        // CPU's iterator converts an operand to the common type first: where an exact operand
        // widens the call to fp32, one of another type is rounded to the common type here.
        if (narrow(c.common) && e.compute() != c.common && w.b->view(a->view).dtype != c.common &&
            !exact_operand(*p, c, name)) {
          r = e.round(c.common, r);
        }
        refs.push_back(r);
        break;
      }
      case Arg::Kind::kNumber:
      case Arg::Kind::kBool:
        if (narrow(c.common) &&
            std::find(p->exact_numbers.begin(), p->exact_numbers.end(), name) == p->exact_numbers.end()) {
          refs.push_back(e.constant(rounded_to(a->integral ? static_cast<double>(a->integer) : a->number, c.common)));
        } else {
          refs.push_back(a->integral ? e.constant_int(a->integer) : e.constant(a->number));
        }
        break;
      case Arg::Kind::kExpr:
        refs.push_back(fused_ref(e, c, name, *a->expr, w));
        break;
      default:
        reject(c, fmt::format("argument '{}' is not a tensor or a number", name));
    }
  }
  if (p->inputs.size() == 1 && refs[0] == kAbsent) reject(c, fmt::format("argument '{}' is missing", p->inputs[0]));
  return p->build(e, refs, c);
}

}  // namespace pointwise

using namespace pointwise;  // this family's own rows and helpers

// x rounded to the nearest value of type t (ties to even), as torch rounds a Scalar to a tensor's
// type before computing with it.
double rounded_to(double x, DType t) {
  if (x == 0 || !std::isfinite(x) || !narrow(t)) return x;
  const int mantissa = t == DType::kF16 ? 10 : 7, min_exponent = t == DType::kF16 ? -14 : -126;
  int e = 0;
  std::frexp(x, &e);  // x = m 2^e with 0.5 <= |m| < 1
  const double quantum = std::ldexp(1.0, std::max(e - 1, min_exponent) - mantissa);
  const double r = std::nearbyint(x / quantum) * quantum;
  return std::fabs(r) > largest(t) ? std::copysign(INFINITY, r) : r;  // past the largest: overflow
}

const PointwiseOp* pointwise_op(std::string_view op) {
  const auto it = table().find(op);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> pointwise_names() {
  std::vector<std::string> out;
  for (const auto& [name, p] : table()) out.push_back(name);
  return out;
}

DType compute_type(const PointwiseOp& p, const Call& c) {
  for (const std::string& name : p.exact_numbers) {  // an exact operand: fp32, rounded once at the store
    if (exact_operand(p, c, name) && narrow(c.result) && p.types != Types::kToBool) return DType::kF32;
  }
  switch (p.types) {
    case Types::kToBool:
      return c.common;
    case Types::kFloatOnly:
      return is_float(c.result) ? c.result : DType::kF32;
    default:
      return c.result;
  }
}

void lower_pointwise(Builder& b, const Call& c) {
  const PointwiseOp* p = pointwise_op(c.op);
  if (!p) reject(c, "not a pointwise op");
  const uint32_t out = c.out();
  for (int64_t s : b.view(out).sizes) {
    if (s == 0) return;  // nothing to write
  }
  Expr e(compute_type(*p, c));
  Walk w;
  w.b = &b;
  w.shape = b.view(out).sizes;
  const int32_t r = steps_of(e, c, w);
  // The result must be the last step: an input as it is becomes a copy, a number a fill.
  if (r >= 0) {
    const ir::Operand& o = e.inputs().at(static_cast<size_t>(r));
    if (o.kind == ir::Operand::Kind::kScalar) {
      ir::Expr fill_only(e.compute());
      fill_only.fill(o);
      b.add(fill_only.done(out));
      return;
    }
    e.copy(r);
  } else if (static_cast<size_t>(-1 - r) != e.steps().size() - 1) {
    e.copy(r);
  }
  b.add(e.done(out));
  if (trunc_after(c)) {
    ir::Pointwise t;
    t.kind = ir::PointwiseKind::kUnary;
    t.unary = UnaryFn::kTrunc;
    t.compute = c.result;
    t.inputs = {ir::Operand::of(out)};
    t.out = out;
    b.add(std::move(t));
  }
}

}  // namespace spyre::compiler::ops
