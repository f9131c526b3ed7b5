// Pointwise rows of the math the SFP has no instruction for, as expressions of the functions it
// has: trigonometric and hyperbolic functions and their inverses, erfc and erfinv, lgamma,
// digamma and polygamma, Bessel I0 and I1, signbit and copysign.
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "family.h"
#include "pointwise_rows.h"

namespace spyre::compiler::ops::pointwise {

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

}  // namespace spyre::compiler::ops::pointwise
