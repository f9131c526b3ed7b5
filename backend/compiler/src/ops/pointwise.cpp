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

namespace spyre::compiler::ops {
namespace {

using hw::BinaryFn;
using hw::DType;
using hw::UnaryFn;
using ir::Expr;
using Refs = std::vector<int32_t>;

// The ref of an optional input the call does not have (clamp without a bound).
constexpr int32_t kAbsent = std::numeric_limits<int32_t>::min();

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

// div with rounding_mode="trunc" in fp16 or bf16 truncates the quotient rounded to that type, as
// torch's CPU kernel does: the truncation is an op of its own after the quotient is stored.
bool trunc_after(const Call& c) {
  const Arg* other = c.get("other");
  const bool exact = other && other->kind == Arg::Kind::kNumber;  // then the quotient is not rounded first
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

// The trigonometric and hyperbolic functions the SFP has no instruction for, from those it has,
// each within a few ulps of the C library's in fp32.
void add_derived_math(std::map<std::string, PointwiseOp, std::less<>>& t) {
  using E = Expr;
  t["tan"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    return e.binary(BinaryFn::kDiv, e.unary(UnaryFn::kSin, in[0]), e.unary(UnaryFn::kCos, in[0]));
  });
  // sinh from expm1 (no cancellation near 0); past |x| = 20, sign(x) e^(|x| - ln 2), which stays
  // finite as far as sinh does.
  t["sinh"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0], ax = e.unary(UnaryFn::kAbs, x);
    const int32_t small = e.binary(
        BinaryFn::kMul, e.constant(0.5),
        e.binary(BinaryFn::kSub, e.unary(UnaryFn::kExpm1, x), e.unary(UnaryFn::kExpm1, e.unary(UnaryFn::kNeg, x))));
    const int32_t big = e.binary(BinaryFn::kMul, e.unary(UnaryFn::kSign, x),
                                 e.unary(UnaryFn::kExp, e.binary(BinaryFn::kSub, ax, e.constant(M_LN2))));
    return e.select(e.binary(BinaryFn::kGt, ax, e.constant(20)), big, small);
  });
  t["cosh"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t ax = e.unary(UnaryFn::kAbs, in[0]);
    const int32_t small = e.binary(
        BinaryFn::kMul, e.constant(0.5),
        e.binary(BinaryFn::kAdd, e.unary(UnaryFn::kExp, ax), e.unary(UnaryFn::kExp, e.unary(UnaryFn::kNeg, ax))));
    const int32_t big = e.unary(UnaryFn::kExp, e.binary(BinaryFn::kSub, ax, e.constant(M_LN2)));
    return e.select(e.binary(BinaryFn::kGt, ax, e.constant(20)), big, small);
  });
  t["log10"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    return e.binary(BinaryFn::kMul, e.unary(UnaryFn::kLog, in[0]), e.constant(1.0 / M_LN10));
  });
  // As torch: sin(pi x) / (pi x), and 1 at 0.
  t["sinc"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t px = e.binary(BinaryFn::kMul, in[0], e.constant(M_PI));
    const int32_t q = e.binary(BinaryFn::kDiv, e.unary(UnaryFn::kSin, px), px);
    return e.select(e.binary(BinaryFn::kEq, in[0], e.constant(0)), e.constant(1.0), q);
  });
  t["frac"] = row({"self"}, Types::kPromote, [](E& e, const Refs& in, const Call&) {
    return e.binary(BinaryFn::kSub, in[0], e.unary(UnaryFn::kTrunc, in[0]));
  });
  // nan_to_num(self, nan=0, posinf=largest, neginf=lowest); integers are unchanged.
  t["nan_to_num"] = row({"self"}, Types::kPromote, [](E& e, const Refs& in, const Call& c) {
    if (!is_float(c.result)) return e.copy(in[0]);
    const double big = largest(c.result);
    const int32_t x = in[0];
    const int32_t pos = e.constant(c.number("posinf", big)), neg = e.constant(c.number("neginf", -big));
    const int32_t inf = e.select(e.binary(BinaryFn::kGt, x, e.constant(0)), pos, neg);
    const int32_t finite = e.select(e.unary(UnaryFn::kIsInf, x), inf, x);
    return e.select(e.unary(UnaryFn::kIsNan, x), e.constant(c.number("nan", 0)), finite);
  });
  // xlogy(x, y) = x log y and special_xlog1py(x, y) = x log1p(y): 0 where x is 0, NaN where y is.
  for (const auto& [name, log] : {std::pair{"xlogy", UnaryFn::kLog}, std::pair{"special_xlog1py", UnaryFn::kLog1p}}) {
    t[name] = row({"self", "other"}, Types::kToFloat, [log = log](E& e, const Refs& in, const Call&) {
      const int32_t xly = e.binary(BinaryFn::kMul, in[0], e.unary(log, in[1]));
      const int32_t zero = e.select(e.binary(BinaryFn::kEq, in[0], e.constant(0)), e.constant(0.0), xly);
      return e.select(e.unary(UnaryFn::kIsNan, in[1]), in[1], zero);
    });
  }
  // special_entr(x) = -x log x for x > 0, 0 at 0, -inf below (NaN stays NaN).
  t["special_entr"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0];
    const int32_t v = e.unary(UnaryFn::kNeg, e.binary(BinaryFn::kMul, x, e.unary(UnaryFn::kLog, x)));
    const int32_t nonneg = e.select(e.binary(BinaryFn::kEq, x, e.constant(0)), e.constant(0.0), v);
    return e.select(e.binary(BinaryFn::kLt, x, e.constant(0)), e.constant(-INFINITY), nonneg);
  });
  // logit(x, eps) = log(z / (1 - z)) for z = x clamped to [eps, 1 - eps] (unclamped without eps).
  t["logit"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call& c) {
    int32_t z = in[0];
    if (const Arg* eps = c.get("eps")) {
      // The bounds in the tensor's type, as torch's: 1 - 1e-3 is 1 in bf16.
      const int32_t lo = e.constant(rounded_to(eps->number, c.result));
      const int32_t hi = e.constant(rounded_to(1 - rounded_to(eps->number, c.result), c.result));
      z = e.select(e.binary(BinaryFn::kLt, z, lo), lo, e.select(e.binary(BinaryFn::kGt, z, hi), hi, z));
    }
    return e.unary(UnaryFn::kLog, e.binary(BinaryFn::kDiv, z, e.binary(BinaryFn::kSub, e.constant(1.0), z)));
  });
  // Its gradient g / (x (1 - x)); outside [eps, 1 - eps] 0, or without eps NaN outside [0, 1].
  t["logit_backward"] = row({"grad_output", "self"}, Types::kFloatOnly, [](E& e, const Refs& in, const Call& c) {
    const int32_t g = in[0], x = in[1];
    const int32_t d =
        e.binary(BinaryFn::kDiv, g, e.binary(BinaryFn::kMul, x, e.binary(BinaryFn::kSub, e.constant(1.0), x)));
    const Arg* eps = c.get("eps");
    if (!eps) {  // NaN outside [0, 1]
      const int32_t upper = e.select(e.binary(BinaryFn::kGt, x, e.constant(1.0)), e.constant(NAN), d);
      return e.select(e.binary(BinaryFn::kLt, x, e.constant(0.0)), e.constant(NAN), upper);
    }
    const double lo = rounded_to(eps->number, c.result), hi = rounded_to(1 - lo, c.result);
    const int32_t inside = e.select(e.binary(BinaryFn::kLe, x, e.constant(hi)), d, e.constant(0.0));
    return e.select(e.binary(BinaryFn::kGe, x, e.constant(lo)), inside, e.constant(0.0));  // 0 at NaN
  });
  // heaviside(x, values): values where x is 0, else x > 0 (NaN gives 0).
  t["heaviside"] = row({"self", "values"}, Types::kPromote, [](E& e, const Refs& in, const Call&) {
    const int32_t step = e.select(e.binary(BinaryFn::kGt, in[0], e.constant(0)), e.constant(1.0), e.constant(0.0));
    return e.select(e.binary(BinaryFn::kEq, in[0], e.constant(0)), in[1], step);
  });
  // angle of a real number: pi below 0, else 0 (NaN stays NaN).
  t["angle"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0];
    const int32_t a = e.select(e.binary(BinaryFn::kLt, x, e.constant(0)), e.constant(M_PI), e.constant(0.0));
    return e.select(e.unary(UnaryFn::kIsNan, x), x, a);
  });
  // fmax, fmin: a NaN loses to a number.
  for (const auto& [name, fn] : {std::pair{"fmax", BinaryFn::kMax}, std::pair{"fmin", BinaryFn::kMin}}) {
    t[name] = row({"self", "other"}, Types::kPromote, [fn = fn](E& e, const Refs& in, const Call& c) {
      const int32_t m = e.binary(fn, in[0], in[1]);
      if (!is_float(c.result)) return m;
      return e.select(e.unary(UnaryFn::kIsNan, in[0]), in[1], e.select(e.unary(UnaryFn::kIsNan, in[1]), in[0], m));
    });
  }
  // As torch: max + log1p(exp(-|a - b|)), and a itself where a == b is infinite.
  for (const auto& [name, two] : {std::pair{"logaddexp", false}, std::pair{"logaddexp2", true}}) {
    t[name] = row({"self", "other"}, Types::kPromote, [two = two](E& e, const Refs& in, const Call&) {
      const int32_t a = in[0], b = in[1];
      const int32_t d = e.unary(UnaryFn::kNeg, e.unary(UnaryFn::kAbs, e.binary(BinaryFn::kSub, a, b)));
      int32_t tail = e.unary(UnaryFn::kLog1p, e.unary(two ? UnaryFn::kExp2 : UnaryFn::kExp, d));
      if (two) tail = e.binary(BinaryFn::kMul, tail, e.constant(1.0 / M_LN2));
      const int32_t sum = e.binary(BinaryFn::kAdd, e.binary(BinaryFn::kMax, a, b), tail);
      const int32_t same_inf = e.select(e.binary(BinaryFn::kEq, a, b), e.unary(UnaryFn::kIsInf, a), e.constant(0));
      return e.select(same_inf, a, sum);
    });
  }
  // hypot(a, b) = m sqrt(1 + (n / m)^2) for m = max(|a|, |b|), n = the other: no overflow on the
  // way; infinite where either is (even with a NaN), 0 where both are 0.
  t["hypot"] = row({"self", "other"}, Types::kPromote, [](E& e, const Refs& in, const Call&) {
    const int32_t aa = e.unary(UnaryFn::kAbs, in[0]), ab = e.unary(UnaryFn::kAbs, in[1]);
    const int32_t m = e.binary(BinaryFn::kMax, aa, ab), n = e.binary(BinaryFn::kMin, aa, ab);
    const int32_t r = e.binary(BinaryFn::kDiv, n, m);
    const int32_t h =
        e.binary(BinaryFn::kMul, m,
                 e.unary(UnaryFn::kSqrt, e.binary(BinaryFn::kAdd, e.constant(1.0), e.binary(BinaryFn::kMul, r, r))));
    const int32_t nonzero = e.select(e.binary(BinaryFn::kEq, m, e.constant(0)), e.constant(0.0), h);
    const int32_t any_inf =
        e.select(e.unary(UnaryFn::kIsInf, aa), aa, e.select(e.unary(UnaryFn::kIsInf, ab), ab, nonzero));
    return any_inf;
  });
}

// x - round(x): sin(pi x) and tan(pi x) of the remainder have the magnitude of the whole.
int32_t remainder_of_integer(Expr& e, int32_t x) {
  return e.binary(BinaryFn::kSub, x, e.unary(UnaryFn::kRound, x));
}

// digamma: six steps of the recurrence, then the asymptotic series from y + 6; below 0.5 the
// reflection psi(1 - x) - pi / tan(pi x); -inf at 0 (+inf at -0), NaN at the negative integers.
int32_t digamma(Expr& e, int32_t x) {
  const int32_t low = e.binary(BinaryFn::kLt, x, e.constant(0.5));
  const int32_t y = e.select(low, e.binary(BinaryFn::kSub, e.constant(1.0), x), x);
  int32_t steps = e.constant(0.0);
  for (int k = 0; k < 6; ++k) {
    steps = e.binary(BinaryFn::kAdd, steps,
                     e.binary(BinaryFn::kDiv, e.constant(1.0), e.binary(BinaryFn::kAdd, y, e.constant(k))));
  }
  const int32_t z = e.binary(BinaryFn::kAdd, y, e.constant(6.0));
  const int32_t iz2 = e.binary(BinaryFn::kDiv, e.constant(1.0), e.binary(BinaryFn::kMul, z, z));
  const int32_t series =
      e.binary(BinaryFn::kMul, iz2, horner(e, iz2, {-1.0 / 12, 1.0 / 120, -1.0 / 252, 1.0 / 240, -1.0 / 132}));
  const int32_t psi_z = e.binary(
      BinaryFn::kAdd, e.binary(BinaryFn::kSub, e.unary(UnaryFn::kLog, z), e.binary(BinaryFn::kDiv, e.constant(0.5), z)),
      series);
  const int32_t psi_y = e.binary(BinaryFn::kSub, psi_z, steps);
  const int32_t tan = [&] {
    const int32_t a = e.binary(BinaryFn::kMul, remainder_of_integer(e, x), e.constant(M_PI));
    return e.binary(BinaryFn::kDiv, e.unary(UnaryFn::kSin, a), e.unary(UnaryFn::kCos, a));
  }();
  const int32_t reflected = e.binary(BinaryFn::kSub, psi_y, e.binary(BinaryFn::kDiv, e.constant(M_PI), tan));
  const int32_t v = e.select(low, reflected, psi_y);
  const int32_t negative_integer = e.binary(BinaryFn::kLogicalAnd, e.binary(BinaryFn::kLt, x, e.constant(0)),
                                            e.binary(BinaryFn::kEq, x, e.unary(UnaryFn::kFloor, x)));
  const int32_t at_zero =  // -inf at 0, +inf at -0, as -1/x
      e.select(e.binary(BinaryFn::kEq, x, e.constant(0)),
               e.unary(UnaryFn::kNeg, e.binary(BinaryFn::kDiv, e.constant(1.0), x)), v);
  return e.select(negative_integer, e.constant(NAN), at_zero);
}

// x^k for an integer k >= 0, by multiplication (exact in sign for a negative x).
int32_t int_power(Expr& e, int32_t x, int k) {
  int32_t acc = e.constant(1.0);
  for (int i = 0; i < k; ++i) acc = e.binary(BinaryFn::kMul, acc, x);
  return acc;
}

// The Hurwitz zeta function zeta(s, x) for an integer s >= 2: twenty terms of the sum, then the
// Euler-Maclaurin tail at w = x + 20 with six Bernoulli terms (accurate for x above -11); +inf at
// the non-positive integers.
int32_t hurwitz_zeta(Expr& e, int s, int32_t x) {
  constexpr int kTerms = 20;
  int32_t sum = e.constant(0.0);
  for (int k = 0; k < kTerms; ++k) {
    const int32_t base = e.binary(BinaryFn::kAdd, x, e.constant(k));
    sum = e.binary(BinaryFn::kAdd, sum, e.binary(BinaryFn::kDiv, e.constant(1.0), int_power(e, base, s)));
  }
  const int32_t iw = e.binary(BinaryFn::kDiv, e.constant(1.0), e.binary(BinaryFn::kAdd, x, e.constant(kTerms)));
  const int32_t iw2 = e.binary(BinaryFn::kMul, iw, iw);
  // w^(1-s) (1/(s-1) + 1/(2w) + sum_j B_2j / (2j)! s (s+1) ... (s+2j-2) w^(-2j))
  static constexpr double kBernoulli[] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730};
  double c[7] = {1.0 / (s - 1)};
  double rising = s, factorial = 2;
  for (int j = 1; j <= 6; ++j) {
    c[j] = kBernoulli[j - 1] / factorial * rising;
    rising *= (s + 2 * j - 1) * (s + 2 * j);
    factorial *= (2 * j + 1) * (2 * j + 2);
  }
  const int32_t series = horner(e, iw2, {c[0], c[1], c[2], c[3], c[4], c[5], c[6]});
  const int32_t tail = e.binary(BinaryFn::kMul, int_power(e, iw, s - 1),
                                e.binary(BinaryFn::kAdd, series, e.binary(BinaryFn::kMul, iw, e.constant(0.5))));
  const int32_t pole = e.binary(BinaryFn::kLogicalAnd, e.binary(BinaryFn::kLe, x, e.constant(0)),
                                e.binary(BinaryFn::kEq, x, e.unary(UnaryFn::kFloor, x)));
  return e.select(pole, e.constant(INFINITY), e.binary(BinaryFn::kAdd, sum, tail));
}

// Inverse trigonometric and hyperbolic functions, erfc and erfinv, lgamma and digamma, Bessel I0
// and I1, signbit and copysign: expressions of the SFP's functions.
void add_special_math(std::map<std::string, PointwiseOp, std::less<>>& t) {
  using E = Expr;
  const auto one_minus_x2 = [](E& e, int32_t x) {  // (1 - x)(1 + x): exact near |x| = 1
    return e.binary(BinaryFn::kMul, e.binary(BinaryFn::kSub, e.constant(1.0), x),
                    e.binary(BinaryFn::kAdd, e.constant(1.0), x));
  };
  t["atan"] = row({"self"}, Types::kToFloat,
                  [](E& e, const Refs& in, const Call&) { return e.binary(BinaryFn::kAtan2, in[0], e.constant(1.0)); });
  t["asin"] = row({"self"}, Types::kToFloat, [one_minus_x2](E& e, const Refs& in, const Call&) {
    return e.binary(BinaryFn::kAtan2, in[0], e.unary(UnaryFn::kSqrt, one_minus_x2(e, in[0])));
  });
  t["acos"] = row({"self"}, Types::kToFloat, [one_minus_x2](E& e, const Refs& in, const Call&) {
    return e.binary(BinaryFn::kAtan2, e.unary(UnaryFn::kSqrt, one_minus_x2(e, in[0])), in[0]);
  });
  // asinh(x) = sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))); past 2^28, sign(x) (log |x| + ln 2).
  t["asinh"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0], ax = e.unary(UnaryFn::kAbs, x), x2 = e.binary(BinaryFn::kMul, ax, ax);
    const int32_t root = e.unary(UnaryFn::kSqrt, e.binary(BinaryFn::kAdd, e.constant(1.0), x2));
    const int32_t small = e.unary(
        UnaryFn::kLog1p,
        e.binary(BinaryFn::kAdd, ax, e.binary(BinaryFn::kDiv, x2, e.binary(BinaryFn::kAdd, e.constant(1.0), root))));
    const int32_t big = e.binary(BinaryFn::kAdd, e.unary(UnaryFn::kLog, ax), e.constant(M_LN2));
    const int32_t m = e.select(e.binary(BinaryFn::kGt, ax, e.constant(268435456.0)), big, small);
    return e.select(e.binary(BinaryFn::kLt, x, e.constant(0)), e.unary(UnaryFn::kNeg, m), m);
  });
  // acosh(x) = log1p(u + sqrt(2u + u^2)) for u = x - 1; past 2^28, log x + ln 2; NaN below 1.
  t["acosh"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0], u = e.binary(BinaryFn::kSub, x, e.constant(1.0));
    const int32_t r =
        e.unary(UnaryFn::kSqrt, e.binary(BinaryFn::kMul, u, e.binary(BinaryFn::kAdd, u, e.constant(2.0))));
    const int32_t small = e.unary(UnaryFn::kLog1p, e.binary(BinaryFn::kAdd, u, r));
    const int32_t big = e.binary(BinaryFn::kAdd, e.unary(UnaryFn::kLog, x), e.constant(M_LN2));
    return e.select(e.binary(BinaryFn::kGt, x, e.constant(268435456.0)), big, small);
  });
  // atanh(x) = log1p(2x / (1 - x)) / 2.
  t["atanh"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0];
    const int32_t q = e.binary(BinaryFn::kDiv, e.binary(BinaryFn::kMul, x, e.constant(2.0)),
                               e.binary(BinaryFn::kSub, e.constant(1.0), x));
    return e.binary(BinaryFn::kMul, e.unary(UnaryFn::kLog1p, q), e.constant(0.5));
  });
  // erfc(x) = t exp(p(t) - x^2) for x >= 0, 2 - erfc(-x) below: no cancellation in the tail.
  t["erfc"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0], r = erfc_positive(e, e.unary(UnaryFn::kAbs, x), false);
    return e.select(e.binary(BinaryFn::kLt, x, e.constant(0)), e.binary(BinaryFn::kSub, e.constant(2.0), r), r);
  });
  // erfcx(x) = exp(x^2) erfc(x): the fit without its exp(-x^2) for x >= 0, 2 exp(x^2) - erfcx(-x) below.
  t["special_erfcx"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0], r = erfc_positive(e, e.unary(UnaryFn::kAbs, x), true);
    const int32_t neg =
        e.binary(BinaryFn::kSub,
                 e.binary(BinaryFn::kMul, e.constant(2.0), e.unary(UnaryFn::kExp, e.binary(BinaryFn::kMul, x, x))), r);
    return e.select(e.binary(BinaryFn::kLt, x, e.constant(0)), neg, r);
  });
  // log_ndtr(x) = log(Phi(x)): log1p(-erfc(x / sqrt 2) / 2) from -1 up; below, log(erfcx(-x / sqrt 2) / 2)
  // - x^2 / 2, finite as far out as the answer is.
  t["special_log_ndtr"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0], z = e.binary(BinaryFn::kMul, x, e.constant(M_SQRT1_2));
    const int32_t upper = e.unary(
        UnaryFn::kLog1p,
        e.binary(BinaryFn::kMul, e.constant(-0.5),
                 e.select(e.binary(BinaryFn::kLt, z, e.constant(0)),
                          e.binary(BinaryFn::kSub, e.constant(2.0), erfc_positive(e, e.unary(UnaryFn::kAbs, z), false)),
                          erfc_positive(e, z, false))));
    const int32_t lower = e.binary(BinaryFn::kSub,
                                   e.unary(UnaryFn::kLog, e.binary(BinaryFn::kMul, e.constant(0.5),
                                                                   erfc_positive(e, e.unary(UnaryFn::kAbs, z), true))),
                                   e.binary(BinaryFn::kMul, z, z));
    return e.select(e.binary(BinaryFn::kLt, x, e.constant(-1.0)), lower, upper);
  });
  // erfinv by Giles' single-precision approximation in w = -log((1 - x)(1 + x)); +-inf at +-1.
  t["erfinv"] = row({"self"}, Types::kToFloat, [one_minus_x2](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0];
    const int32_t w = e.unary(UnaryFn::kNeg, e.unary(UnaryFn::kLog, one_minus_x2(e, x)));
    const int32_t central = horner(e, e.binary(BinaryFn::kSub, w, e.constant(2.5)),
                                   {1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087,
                                    -4.39150654e-06, -3.5233877e-06, 3.43273939e-07, 2.81022636e-08});
    const int32_t tail = horner(e, e.binary(BinaryFn::kSub, e.unary(UnaryFn::kSqrt, w), e.constant(3.0)),
                                {2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773, -0.00367342844,
                                 0.00134934322, 0.000100950558, -0.000200214257});
    const int32_t p = e.select(e.binary(BinaryFn::kLt, w, e.constant(5.0)), central, tail);
    const int32_t v = e.binary(BinaryFn::kMul, p, x);
    const int32_t edge = e.binary(BinaryFn::kEq, e.unary(UnaryFn::kAbs, x), e.constant(1.0));
    return e.select(edge, e.binary(BinaryFn::kMul, x, e.constant(INFINITY)), v);
  });
  // lgamma: Lanczos from 0.5 up; below, the reflection log(pi / |sin(pi x)|) - lgamma(1 - x)
  // (+inf at the poles); +inf at both infinities.
  t["lgamma"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t x = in[0], low = e.binary(BinaryFn::kLt, x, e.constant(0.5));
    const int32_t y = e.select(low, e.binary(BinaryFn::kSub, e.constant(1.0), x), x);
    const int32_t l = lanczos_lgamma(e, y);
    const int32_t s = e.unary(
        UnaryFn::kAbs, e.unary(UnaryFn::kSin, e.binary(BinaryFn::kMul, remainder_of_integer(e, x), e.constant(M_PI))));
    const int32_t reflected =
        e.binary(BinaryFn::kSub, e.binary(BinaryFn::kSub, e.constant(std::log(M_PI)), e.unary(UnaryFn::kLog, s)), l);
    const int32_t root = e.binary(BinaryFn::kLogicalOr, e.binary(BinaryFn::kEq, x, e.constant(1.0)),
                                  e.binary(BinaryFn::kEq, x, e.constant(2.0)));  // exactly 0 there, as CPU's
    const int32_t v = e.select(root, e.constant(0.0), e.select(low, reflected, l));
    return e.select(e.unary(UnaryFn::kIsInf, x), e.constant(INFINITY), v);
  });
  t["digamma"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) { return digamma(e, in[0]); });
  // polygamma(n, x) for n >= 1: (-1)^(n+1) n! zeta(n + 1, x) from 0.5 up; below, the reflection
  // (-1)^n polygamma(n, 1 - x) - d^n/dx^n (pi cot(pi x)), so the sum never cancels; digamma for
  // n = 0. +-inf at the non-positive integers; at the infinities CPU's answers.
  t["polygamma"] = row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call& c) {
    const int64_t n = c.integer("n", 0);
    if (n < 0 || n > 16) reject(c, "polygamma is lowered for orders 0 to 16");
    const int32_t x = in[0];
    if (n == 0) return digamma(e, x);
    const int order = static_cast<int>(n);
    const double sign = order % 2 ? 1.0 : -1.0, scale = sign * std::tgamma(order + 1.0);
    const int32_t low = e.binary(BinaryFn::kLt, x, e.constant(0.5));
    const int32_t y = e.select(low, e.binary(BinaryFn::kSub, e.constant(1.0), x), x);
    const int32_t psi_y = e.binary(BinaryFn::kMul, e.constant(scale), hurwitz_zeta(e, order + 1, y));
    // d^n/dx^n of pi cot(pi x) as a polynomial in c = cot(pi x): P0 = pi c, P(k+1) = -pi (1 + c^2) Pk'(c).
    std::vector<double> poly = {0.0, M_PI};
    for (int k = 0; k < order; ++k) {
      std::vector<double> next(poly.size() + 1, 0.0);
      for (size_t i = 1; i < poly.size(); ++i) {
        const double d = static_cast<double>(i) * poly[i] * -M_PI;  // of c^(i-1), times -pi
        next[i - 1] += d;
        next[i + 1] += d;
      }
      poly = std::move(next);
    }
    // cot(pi r) for r = x - round(x), its cosine as sin(pi (1/2 - |r|)): exactly 0 at the half-integers.
    const int32_t r = remainder_of_integer(e, x);
    const int32_t cos_part = e.unary(
        UnaryFn::kSin, e.binary(BinaryFn::kMul, e.binary(BinaryFn::kSub, e.constant(0.5), e.unary(UnaryFn::kAbs, r)),
                                e.constant(M_PI)));
    const int32_t cot =
        e.binary(BinaryFn::kDiv, cos_part, e.unary(UnaryFn::kSin, e.binary(BinaryFn::kMul, r, e.constant(M_PI))));
    int32_t cot_term = e.constant(poly.back());
    for (size_t i = poly.size() - 1; i-- > 0;) {
      cot_term = e.binary(BinaryFn::kAdd, e.constant(poly[i]), e.binary(BinaryFn::kMul, cot_term, cot));
    }
    int32_t reflected = e.binary(BinaryFn::kSub, order % 2 ? e.unary(UnaryFn::kNeg, psi_y) : psi_y, cot_term);
    if (order == 1) {  // CPU's trigamma: pi^2 / sin^2(pi x) of the unreduced x (finite at the poles)
      const int32_t sp = e.unary(UnaryFn::kSin, e.binary(BinaryFn::kMul, x, e.constant(M_PI)));
      reflected = e.binary(BinaryFn::kSub,
                           e.binary(BinaryFn::kDiv, e.constant(M_PI * M_PI), e.binary(BinaryFn::kMul, sp, sp)), psi_y);
    }
    const int32_t v = e.select(low, reflected, psi_y);
    const int32_t pole = e.binary(BinaryFn::kLogicalAnd, e.binary(BinaryFn::kLe, x, e.constant(0)),
                                  e.binary(BinaryFn::kEq, x, e.unary(UnaryFn::kFloor, x)));
    const int32_t finite = order == 1 ? v : e.select(pole, e.constant(sign * INFINITY), v);
    const int32_t at_inf = e.select(e.binary(BinaryFn::kGt, x, e.constant(0)), e.constant(order == 1 ? 0.0 : NAN),
                                    e.constant(order == 1 ? NAN : sign * INFINITY));
    return e.select(e.unary(UnaryFn::kIsInf, x), at_inf, finite);
  });
  t["i0"] =
      row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) { return bessel_i(e, in[0], 0, false); });
  t["special_i0e"] =
      row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) { return bessel_i(e, in[0], 0, true); });
  t["special_i1"] =
      row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) { return bessel_i(e, in[0], 1, false); });
  t["special_i1e"] =
      row({"self"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) { return bessel_i(e, in[0], 1, true); });
  t["signbit"] = row({"self"}, Types::kToBool, [](E& e, const Refs& in, const Call& c) {
    return is_float(c.common) ? sign_bit(e, in[0]) : e.binary(BinaryFn::kLt, in[0], e.constant(0));
  });
  // copysign(a, b) = |a| with b's sign (signbit's reading of b).
  t["copysign"] = row({"self", "other"}, Types::kToFloat, [](E& e, const Refs& in, const Call&) {
    const int32_t aa = e.unary(UnaryFn::kAbs, in[0]);
    return e.select(sign_bit(e, in[1]), e.unary(UnaryFn::kNeg, aa), aa);
  });
}

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
  // As torch's CPU kernel: self + (value * t1) * t2, in that order (t1 * t2 first could overflow).
  t["addcmul"] = row({"self", "tensor1", "tensor2"}, Types::kPromote, [](Expr& e, const Refs& in, const Call& c) {
    const int32_t scaled = e.binary(BinaryFn::kMul, e.constant(c.number("value", 1)), in[1]);
    return e.binary(BinaryFn::kAdd, in[0], e.binary(BinaryFn::kMul, scaled, in[2]));
  });
  t["addcdiv"] = row({"self", "tensor1", "tensor2"}, Types::kFloatOnly, [](Expr& e, const Refs& in, const Call& c) {
    const int32_t q = e.binary(BinaryFn::kDiv, in[1], in[2]);
    return e.binary(BinaryFn::kAdd, in[0], e.binary(BinaryFn::kMul, e.constant(c.number("value", 1)), q));
  });
  // As torch: w < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w).
  t["lerp"] = row({"self", "end", "weight"}, Types::kFloatOnly, [](Expr& e, const Refs& in, const Call&) {
    const int32_t diff = e.binary(BinaryFn::kSub, in[1], in[0]);
    const int32_t low = e.binary(BinaryFn::kAdd, in[0], e.binary(BinaryFn::kMul, in[2], diff));
    const int32_t high = e.binary(BinaryFn::kSub, in[1],
                                  e.binary(BinaryFn::kMul, diff, e.binary(BinaryFn::kSub, e.constant(1.0), in[2])));
    return e.select(e.binary(BinaryFn::kLt, in[2], e.constant(0.5)), low, high);
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
  for (const char* name : {"mul", "div", "floor_divide"}) t[name].exact_numbers = {"other"};
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

// Appends the steps of call `c` to `e`: its inputs (views shared through `memo`, numbers as
// constants, fused producers recursively), then its row's expression; the result's ref.
int32_t steps_of(Expr& e, const Call& c, std::map<uint32_t, int32_t>& memo) {
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
        const auto it = memo.find(a->view);
        refs.push_back(it != memo.end() ? it->second : memo[a->view] = e.input(ir::Operand::of(a->view)));
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
      case Arg::Kind::kExpr: {
        const Call& child = *a->expr;
        const PointwiseOp* q = pointwise_op(child.op);
        // A child in fp16 or bf16 would round its value when stored: fused, it would not.
        if (!q || narrow(child.result) || widened(compute_type(*q, child)) != widened(e.compute())) {
          reject(c, fmt::format("argument '{}' ({}) computes or rounds in another type; it cannot be fused", name,
                                child.op));
        }
        refs.push_back(steps_of(e, child, memo));
        break;
      }
      default:
        reject(c, fmt::format("argument '{}' is not a tensor or a number", name));
    }
  }
  if (p->inputs.size() == 1 && refs[0] == kAbsent) reject(c, fmt::format("argument '{}' is missing", p->inputs[0]));
  return p->build(e, refs, c);
}

}  // namespace

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
  for (const std::string& name : p.exact_numbers) {  // an exact number: fp32, rounded once at the store
    const Arg* a = c.get(name);
    if (a && a->kind == Arg::Kind::kNumber && narrow(c.result) && p.types != Types::kToBool) return DType::kF32;
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
  std::map<uint32_t, int32_t> memo;
  const int32_t r = steps_of(e, c, memo);
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
