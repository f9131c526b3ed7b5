// Special functions as pointwise rows: the Bessel functions J, Y, I and K of orders 0 and 1 (and
// the scaled K), the spherical j0, Airy's Ai, the normal quantile, Hurwitz's zeta of a real order,
// the regularised incomplete gamma functions, and the Chebyshev and Hermite polynomials. Each is one
// expression of the SFP's functions in fp32, written from the mathematics: polynomial fits
// (Abramowitz and Stegun's, or fitted here to the functions in high precision), series of a fixed
// length, continued fractions evaluated from a fixed depth, and recurrences unrolled up to the
// degree past which CPU's own recurrence only overflows. Where CPU's kernel gives a particular
// answer at an edge (a pole, an infinity, a degree past int64) the rows give that answer too.
#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "family.h"

namespace spyre::compiler::ops {

using hw::BinaryFn;
using hw::UnaryFn;
using ir::Expr;

namespace {

// c[0] + t (c[1] + t (...)) over n coefficients.
int32_t horner_of(Expr& e, int32_t t, const double* c, size_t n) {
  int32_t acc = e.constant(c[n - 1]);
  for (size_t i = n - 1; i-- > 0;) acc = e.binary(BinaryFn::kAdd, e.constant(c[i]), e.binary(BinaryFn::kMul, acc, t));
  return acc;
}

}  // namespace

int32_t horner(Expr& e, int32_t t, std::initializer_list<double> c) {
  return horner_of(e, t, c.begin(), c.size());
}

int32_t lanczos_lgamma(Expr& e, int32_t x) {
  static constexpr double kP[] = {0.99999999999980993,  676.5203681218851,     -1259.1392167224028,
                                  771.32342877765313,   -176.61502916214059,   12.507343278686905,
                                  -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7};
  const int32_t z = e.binary(BinaryFn::kSub, x, e.constant(1.0));
  int32_t a = e.constant(kP[0]);
  for (int i = 1; i < 9; ++i) {
    a = e.binary(BinaryFn::kAdd, a,
                 e.binary(BinaryFn::kDiv, e.constant(kP[i]), e.binary(BinaryFn::kAdd, z, e.constant(i))));
  }
  const int32_t t = e.binary(BinaryFn::kAdd, z, e.constant(7.5));
  const int32_t lead =
      e.binary(BinaryFn::kMul, e.binary(BinaryFn::kAdd, z, e.constant(0.5)), e.unary(UnaryFn::kLog, t));
  return e.binary(BinaryFn::kAdd, e.binary(BinaryFn::kSub, lead, t),
                  e.binary(BinaryFn::kAdd, e.constant(0.5 * std::log(2 * M_PI)), e.unary(UnaryFn::kLog, a)));
}

// t exp(p(t) - z^2) with t = 1 / (1 + z/2) (Numerical Recipes' Chebyshev fit).
int32_t erfc_positive(Expr& e, int32_t z, bool scaled) {
  const int32_t t = e.binary(BinaryFn::kDiv, e.constant(1.0),
                             e.binary(BinaryFn::kAdd, e.constant(1.0), e.binary(BinaryFn::kMul, z, e.constant(0.5))));
  int32_t p = horner(e, t,
                     {-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
                      -0.82215223, 0.17087277});
  if (!scaled) p = e.binary(BinaryFn::kSub, p, e.binary(BinaryFn::kMul, z, z));
  return e.binary(BinaryFn::kMul, t, e.unary(UnaryFn::kExp, p));
}

// Abramowitz and Stegun 9.8.1 to 9.8.4.
int32_t bessel_i(Expr& e, int32_t x, int order, bool scaled) {
  const int32_t ax = e.unary(UnaryFn::kAbs, x);
  const int32_t q = e.binary(BinaryFn::kDiv, ax, e.constant(3.75));
  const int32_t q2 = e.binary(BinaryFn::kMul, q, q);
  int32_t small =
      order == 0
          ? horner(e, q2, {1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.0360768, 0.0045813})
          : e.binary(BinaryFn::kMul, ax,
                     horner(e, q2, {0.5, 0.87890594, 0.51498869, 0.15084934, 0.02658733, 0.00301532, 0.00032411}));
  if (scaled) small = e.binary(BinaryFn::kMul, small, e.unary(UnaryFn::kExp, e.unary(UnaryFn::kNeg, ax)));
  const int32_t r = e.binary(BinaryFn::kDiv, e.constant(3.75), ax);
  const int32_t tail = order == 0 ? horner(e, r,
                                           {0.39894228, 0.01328592, 0.00225319, -0.00157565, 0.00916281, -0.02057706,
                                            0.02635537, -0.01647633, 0.00392377})
                                  : horner(e, r,
                                           {0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555, 0.02282967,
                                            -0.02895312, 0.01787654, -0.00420059});
  int32_t large = e.binary(BinaryFn::kDiv, tail, e.unary(UnaryFn::kSqrt, ax));
  if (!scaled) large = e.binary(BinaryFn::kMul, large, e.unary(UnaryFn::kExp, ax));  // inf past 88.7, as CPU's
  const int32_t v = e.select(e.binary(BinaryFn::kLt, ax, e.constant(3.75)), small, large);
  return order == 1 ? e.select(e.binary(BinaryFn::kLt, x, e.constant(0)), e.unary(UnaryFn::kNeg, v), v) : v;
}

namespace {

using Refs = std::vector<int32_t>;

PointwiseOp row(std::vector<std::string> inputs, Build build) {
  PointwiseOp p;
  p.promoted = inputs;
  p.inputs = std::move(inputs);
  p.types = Types::kToFloat;
  p.build = std::move(build);
  return p;
}

// Shorthands over an expression: f.mul(a, b) is e.binary(BinaryFn::kMul, a, b), f.k(2.0) a constant.
struct F {
  Expr& e;
  int32_t k(double v) const { return e.constant(v); }
  int32_t add(int32_t a, int32_t b) const { return e.binary(BinaryFn::kAdd, a, b); }
  int32_t sub(int32_t a, int32_t b) const { return e.binary(BinaryFn::kSub, a, b); }
  int32_t mul(int32_t a, int32_t b) const { return e.binary(BinaryFn::kMul, a, b); }
  int32_t div(int32_t a, int32_t b) const { return e.binary(BinaryFn::kDiv, a, b); }
  int32_t pow(int32_t a, int32_t b) const { return e.binary(BinaryFn::kPow, a, b); }
  int32_t min(int32_t a, int32_t b) const { return e.binary(BinaryFn::kMin, a, b); }
  int32_t atan2(int32_t a, int32_t b) const { return e.binary(BinaryFn::kAtan2, a, b); }
  int32_t lt(int32_t a, int32_t b) const { return e.binary(BinaryFn::kLt, a, b); }
  int32_t le(int32_t a, int32_t b) const { return e.binary(BinaryFn::kLe, a, b); }
  int32_t gt(int32_t a, int32_t b) const { return e.binary(BinaryFn::kGt, a, b); }
  int32_t ge(int32_t a, int32_t b) const { return e.binary(BinaryFn::kGe, a, b); }
  int32_t eq(int32_t a, int32_t b) const { return e.binary(BinaryFn::kEq, a, b); }
  int32_t ne(int32_t a, int32_t b) const { return e.binary(BinaryFn::kNe, a, b); }
  int32_t both(int32_t a, int32_t b) const { return e.binary(BinaryFn::kLogicalAnd, a, b); }
  int32_t either(int32_t a, int32_t b) const { return e.binary(BinaryFn::kLogicalOr, a, b); }
  int32_t sel(int32_t mask, int32_t a, int32_t b) const { return e.select(mask, a, b); }
  int32_t abs(int32_t a) const { return e.unary(UnaryFn::kAbs, a); }
  int32_t neg(int32_t a) const { return e.unary(UnaryFn::kNeg, a); }
  int32_t exp(int32_t a) const { return e.unary(UnaryFn::kExp, a); }
  int32_t expm1(int32_t a) const { return e.unary(UnaryFn::kExpm1, a); }
  int32_t log(int32_t a) const { return e.unary(UnaryFn::kLog, a); }
  int32_t log1p(int32_t a) const { return e.unary(UnaryFn::kLog1p, a); }
  int32_t sqrt(int32_t a) const { return e.unary(UnaryFn::kSqrt, a); }
  int32_t sin(int32_t a) const { return e.unary(UnaryFn::kSin, a); }
  int32_t cos(int32_t a) const { return e.unary(UnaryFn::kCos, a); }
  int32_t floor(int32_t a) const { return e.unary(UnaryFn::kFloor, a); }
  int32_t trunc(int32_t a) const { return e.unary(UnaryFn::kTrunc, a); }
  int32_t isnan(int32_t a) const { return e.unary(UnaryFn::kIsNan, a); }
  int32_t isinf(int32_t a) const { return e.unary(UnaryFn::kIsInf, a); }
  int32_t sq(int32_t a) const { return mul(a, a); }
  int32_t poly(int32_t t, std::initializer_list<double> c) const { return horner(e, t, c); }
  // Whether an integral value is odd.
  int32_t odd(int32_t n) const { return ne(sub(n, mul(k(2), floor(mul(n, k(0.5))))), k(0)); }
};

// ---- Bessel functions of the first and second kind --------------------------------------------------

// J0, J1, Y0 or Y1 (Abramowitz and Stegun 9.4.1 to 9.4.6, absolute error below 1e-7): polynomials in
// (x/3)^2 up to |x| = 3; beyond, a modulus m and a phase x + phi in 3/x, J = m cos(x + phi) / sqrt(x)
// and Y = m sin(x + phi) / sqrt(x), with the cosine and sine of x taken whole: x + phi rounded would
// lose the phase for large x. Y is NaN below 0 and -inf at 0, as CPU's.
int32_t bessel_jy(const F& f, int32_t x, int order, bool second_kind) {
  const int32_t ax = f.abs(x), t = f.sq(f.div(ax, f.k(3)));
  const int32_t j_small =
      order == 0
          ? f.poly(t, {1.0, -2.2499997, 1.2656208, -0.3163866, 0.0444479, -0.0039444, 0.0002100})
          : f.mul(ax, f.poly(t, {0.5, -0.56249985, 0.21093573, -0.03954289, 0.00443319, -0.00031761, 0.00001109}));
  const int32_t u = f.div(f.k(3), ax);
  const int32_t modulus =
      order == 0 ? f.poly(u, {0.79788456, -0.00000077, -0.00552740, -0.00009512, 0.00137237, -0.00072805, 0.00014476})
                 : f.poly(u, {0.79788456, 0.00000156, 0.01659667, 0.00017105, -0.00249511, 0.00113653, -0.00020033});
  const int32_t phase =
      order == 0 ? f.poly(u, {-0.78539816, -0.04166397, -0.00003954, 0.00262573, -0.00054125, -0.00029333, 0.00013558})
                 : f.poly(u, {-2.35619449, 0.12499612, 0.00005650, -0.00637879, 0.00074348, 0.00079824, -0.00029166});
  const int32_t amplitude = f.div(modulus, f.sqrt(ax));
  const int32_t c = f.cos(ax), s = f.sin(ax), cp = f.cos(phase), sp = f.sin(phase);
  const int32_t small = f.le(ax, f.k(3));
  if (!second_kind) {
    const int32_t v = f.sel(small, j_small, f.mul(amplitude, f.sub(f.mul(c, cp), f.mul(s, sp))));
    return order == 0 ? v : f.sel(f.lt(x, f.k(0)), f.neg(v), v);  // J1 is odd
  }
  // (2/pi) log(x/2) J(x) plus a polynomial (over x for Y1); log x - ln 2 keeps a subnormal x finite.
  const int32_t log_term = f.mul(f.k(M_2_PI), f.mul(f.sub(f.log(ax), f.k(M_LN2)), j_small));
  const int32_t y_small =
      order == 0
          ? f.add(log_term,
                  f.poly(t, {0.36746691, 0.60559366, -0.74350384, 0.25300117, -0.04261214, 0.00427916, -0.00024846}))
          : f.add(
                log_term,
                f.div(f.poly(t, {-0.6366198, 0.2212091, 2.1682709, -1.3164827, 0.3123951, -0.0400976, 0.0027873}), ax));
  const int32_t v = f.sel(small, y_small, f.mul(amplitude, f.add(f.mul(s, cp), f.mul(c, sp))));
  return f.sel(f.lt(x, f.k(0)), f.k(NAN), f.sel(f.eq(x, f.k(0)), f.k(-INFINITY), v));
}

// K0 or K1 (Abramowitz and Stegun 9.8.5 to 9.8.8, relative error below 2e-7): up to 2 from I and a
// polynomial in (x/2)^2, beyond it exp(-x) / sqrt(x) times a polynomial in 2/x. With `scaled`,
// exp(x) times it. NaN below 0 and +inf at 0, as CPU's.
int32_t bessel_k(const F& f, int32_t x, int order, bool scaled) {
  const int32_t t = f.sq(f.mul(x, f.k(0.5)));
  const int32_t log_half = f.sub(f.log(x), f.k(M_LN2));
  int32_t small =
      order == 0
          ? f.sub(f.poly(t, {-0.57721566, 0.42278420, 0.23069756, 0.03488590, 0.00262698, 0.00010750, 0.00000740}),
                  f.mul(log_half, bessel_i(f.e, x, 0, false)))
          : f.add(f.mul(log_half, bessel_i(f.e, x, 1, false)),
                  f.div(f.poly(t, {1.0, 0.15443144, -0.67278579, -0.18156897, -0.01919402, -0.00110404, -0.00004686}),
                        x));
  const int32_t u = f.div(f.k(2), x);
  int32_t large = f.div(
      order == 0 ? f.poly(u, {1.25331414, -0.07832358, 0.02189568, -0.01062446, 0.00587872, -0.00251540, 0.00053208})
                 : f.poly(u, {1.25331414, 0.23498619, -0.03655620, 0.01504268, -0.00780353, 0.00325614, -0.00068245}),
      f.sqrt(x));
  if (scaled) {
    small = f.mul(small, f.exp(x));
  } else {
    large = f.mul(large, f.exp(f.neg(x)));
  }
  const int32_t v = f.sel(f.le(x, f.k(2)), small, large);
  return f.sel(f.lt(x, f.k(0)), f.k(NAN), f.sel(f.eq(x, f.k(0)), f.k(INFINITY), v));
}

// sin(x) / x, by its series below 0.5 (as CPU); 0 at the infinities.
int32_t spherical_j0(const F& f, int32_t x) {
  const int32_t series =
      f.poly(f.sq(x), {1.0, -1.0 / 6, 1.0 / 120, -1.0 / 5040, 1.0 / 362880, -1.0 / 39916800, 1.0 / 6227020800});
  const int32_t v = f.sel(f.lt(f.abs(x), f.k(0.5)), series, f.div(f.sin(x), x));
  return f.sel(f.isinf(x), f.k(0.0), v);
}

// ---- Airy's Ai ----------------------------------------------------------------------------------

// a = hi + lo, hi holding a's upper 12 significant bits (Dekker's split): products of halves are exact.
std::pair<int32_t, int32_t> split(const F& f, int32_t a) {
  const int32_t c = f.mul(a, f.k(4097.0));
  const int32_t hi = f.sub(c, f.sub(c, a));
  return {hi, f.sub(a, hi)};
}

// zeta = 2/3 y^(3/2) as hi + lo to about 44 bits, from error-free products: the phase of Ai(-y) stays
// right where zeta itself has far more digits than fp32 (y past 100).
std::pair<int32_t, int32_t> airy_zeta(const F& f, int32_t y) {
  const int32_t s = f.sqrt(y);
  const auto [sh, sl] = split(f, s);
  // sqrt(y) = s + (y - s^2) / (2s), y - s^2 from the exact products of s's halves
  const int32_t rest = f.sub(f.sub(f.sub(y, f.mul(sh, sh)), f.mul(f.k(2.0), f.mul(sh, sl))), f.mul(sl, sl));
  const int32_t ds = f.div(rest, f.add(s, s));
  // y s = ph + pl exactly
  const auto [yh, yl] = split(f, y);
  const int32_t ph = f.mul(y, s);
  const int32_t pl = f.add(f.add(f.add(f.sub(f.mul(yh, sh), ph), f.mul(yh, sl)), f.mul(yl, sh)), f.mul(yl, sl));
  const int32_t p_lo = f.add(pl, f.mul(y, ds));
  // times 2/3 = c + c_lo, c split as a float
  const auto c = static_cast<float>(2.0 / 3);
  const float c4097 = c * 4097.0f;
  const float ch = c4097 - (c4097 - c), cl = c - ch;
  const double c_lo = 2.0 / 3 - static_cast<double>(c);
  const auto [qh, ql] = split(f, ph);
  const int32_t zh = f.mul(ph, f.k(c));
  const int32_t zl =
      f.add(f.add(f.add(f.sub(f.mul(qh, f.k(ch)), zh), f.mul(qh, f.k(cl))), f.mul(ql, f.k(ch))), f.mul(ql, f.k(cl)));
  return {zh, f.add(zl, f.add(f.mul(ph, f.k(c_lo)), f.mul(p_lo, f.k(2.0 / 3))))};
}

// Ai(x): from -2.5 to 2 its Maclaurin series Ai(0) f(x) + Ai'(0) g(x), f and g polynomials in x^3
// (eleven terms each: the next is below 1e-10 there); past 2, exp(-zeta) / (2 sqrt(pi) x^(1/4))
// times a polynomial in 1/zeta, zeta = 2/3 x^(3/2); below -2.5, y = -x, the modulus-and-phase form
// [(sin zeta + cos zeta) P - (cos zeta - sin zeta) Q] / (sqrt(2 pi) y^(1/4)) with P and Q
// polynomials in 1/zeta. The three polynomials were fitted here (least squares on Chebyshev nodes)
// to Ai and Bi computed to 40 digits; each is within 1e-10. NaN at the infinities, as CPU's.
int32_t airy_ai(const F& f, int32_t x) {
  std::vector<double> a(11), b(11);
  a[0] = 0.355028053887817239;   // Ai(0)
  b[0] = -0.258819403792806798;  // Ai'(0)
  for (size_t i = 1; i < a.size(); ++i) {
    const double k = static_cast<double>(i);
    a[i] = a[i - 1] / ((3 * k - 1) * (3 * k));
    b[i] = b[i - 1] / ((3 * k) * (3 * k + 1));
  }
  const int32_t z = f.mul(f.sq(x), x);
  const int32_t maclaurin =
      f.add(horner_of(f.e, z, a.data(), a.size()), f.mul(x, horner_of(f.e, z, b.data(), b.size())));
  const int32_t ax = f.abs(x);
  const auto [zeta, zeta_lo] = airy_zeta(f, ax);
  const int32_t u = f.div(f.k(1.0), zeta);
  const int32_t h = f.poly(u, {0.99999999993745892, -0.069444414084420675, 0.03713101066017431, -0.037912325126908245,
                               0.056250098817356535, -0.10112990129331335, 0.18201258885152913, -0.27467629404596206,
                               0.2997048327884374, -0.20174688750182904, 0.061807142158569722});
  const int32_t decay =
      f.mul(f.exp(f.sub(f.neg(zeta), f.mul(f.k(0.25), f.log(ax)))), f.mul(h, f.k(0.5 / std::sqrt(M_PI))));
  const int32_t p = f.poly(u, {0.9999999999885798, 8.9585874222392059e-09, -0.037134664094194199,
                               6.1172070247673472e-05, 0.055990567377107975, 0.026642816355768446, -0.56006900789655045,
                               1.6902595629136257, -2.7433047063003637, 2.4783088887400786, -0.98184663396633043});
  const int32_t q = f.poly(u, {-4.6203534322607739e-11, 0.069444474460107652, -3.2160064832621738e-06,
                               -0.037859566747297749, -0.0027943774143742552, 0.14884245265463547, -0.21409024439486293,
                               -0.28098459116321933, 1.4210881062815328, -2.0088281168419071, 1.0547166709590157});
  // sin and cos of zeta + zeta_lo (zeta_lo is up to half an ulp of zeta, 0.03 at y = 10^4)
  const int32_t sh = f.sin(zeta), ch = f.cos(zeta), sl = f.sin(zeta_lo), cl = f.cos(zeta_lo);
  const int32_t s = f.add(f.mul(sh, cl), f.mul(ch, sl)), c = f.sub(f.mul(ch, cl), f.mul(sh, sl));
  const int32_t wave = f.sub(f.mul(f.add(s, c), p), f.mul(f.sub(c, s), q));
  const int32_t oscillating = f.div(f.mul(wave, f.k(1.0 / std::sqrt(2 * M_PI))), f.sqrt(f.sqrt(ax)));  // y^(1/4)
  const int32_t v = f.sel(f.gt(x, f.k(2)), decay, f.sel(f.lt(x, f.k(-2.5)), oscillating, maclaurin));
  return f.sel(f.isinf(x), f.k(NAN), v);
}

// ---- the normal quantile --------------------------------------------------------------------------

// ndtri(p), the x with Phi(x) = p: for the lower half (p' = min(p, 1 - p), exact), Abramowitz and
// Stegun 26.2.23 (within 4.5e-4) refined by two Newton steps on log Phi(x) = log p', where
// log Phi(x) = log(erfcx(z) / 2) - z^2 and Phi / phi = sqrt(pi / 2) erfcx(z) for z = -x / sqrt(2):
// no cancellation down to the smallest subnormal p. -inf at 0, +inf at 1, NaN outside [0, 1].
int32_t ndtri(const F& f, int32_t p) {
  const int32_t upper = f.gt(p, f.k(0.5));
  const int32_t q = f.sel(upper, f.sub(f.k(1.0), p), p);
  const int32_t log_q = f.log(q);
  const int32_t t = f.sqrt(f.mul(f.k(-2.0), log_q));
  const int32_t guess =
      f.div(f.poly(t, {2.515517, 0.802853, 0.010328}), f.poly(t, {1.0, 1.432788, 0.189269, 0.001308}));
  int32_t x = f.sub(guess, t);
  for (int step = 0; step < 2; ++step) {
    x = f.min(x, f.k(0.0));
    const int32_t z = f.mul(x, f.k(-M_SQRT1_2));
    const int32_t scaled = erfc_positive(f.e, z, true);
    const int32_t log_cdf = f.sub(f.log(f.mul(f.k(0.5), scaled)), f.sq(z));
    x = f.sub(x, f.mul(f.sub(log_cdf, log_q), f.mul(f.k(std::sqrt(M_PI / 2)), scaled)));
  }
  x = f.min(x, f.k(0.0));
  const int32_t v = f.sel(upper, f.neg(x), x);
  const int32_t inside = f.both(f.gt(p, f.k(0)), f.lt(p, f.k(1)));
  return f.sel(f.eq(p, f.k(0)), f.k(-INFINITY), f.sel(f.eq(p, f.k(1)), f.k(INFINITY), f.sel(inside, v, f.k(NAN))));
}

// ---- Hurwitz's zeta function ------------------------------------------------------------------------

// zeta(s, q) for q > 0: ten terms of the sum, then the Euler-Maclaurin tail at w = q + 10,
// w^-s (w / (s - 1) + 1/2 + sum_j B_2j / (2j)! s (s + 1) ... (s + 2j - 2) / w^(2j - 1)), seven
// Bernoulli terms. The tail is 0 where w^-s underflows (its factors would overflow).
int32_t zeta_positive(const F& f, int32_t s, int32_t q) {
  constexpr int kTerms = 10;
  const int32_t minus_s = f.neg(s);
  int32_t sum = f.pow(q, minus_s);
  for (int k = 1; k < kTerms; ++k) sum = f.add(sum, f.pow(f.add(q, f.k(k)), minus_s));
  const int32_t w = f.add(q, f.k(kTerms));
  const int32_t w_s = f.pow(w, minus_s), iw = f.div(f.k(1.0), w), iw2 = f.sq(iw);
  static constexpr double kBernoulli[] = {1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6};
  int32_t rising = f.mul(s, iw);  // (s)_(2j-1) / w^(2j-1)
  int32_t series = f.add(f.div(w, f.sub(s, f.k(1.0))), f.k(0.5));
  double factorial = 2;
  for (int j = 1; j <= 7; ++j) {
    series = f.add(series, f.mul(f.k(kBernoulli[j - 1] / factorial), rising));
    if (j < 7) {
      rising = f.mul(rising, f.mul(f.mul(f.add(s, f.k(2 * j - 1)), f.add(s, f.k(2 * j))), iw2));
      factorial *= (2 * j + 1) * (2 * j + 2);
    }
  }
  const int32_t tail = f.sel(f.eq(w_s, f.k(0)), f.k(0.0), f.mul(w_s, series));
  return f.add(sum, tail);
}

// zeta(s, q) as CPU: +inf at s = 1, NaN below; +inf at the non-positive integers q; for another
// q < 0 NaN unless s is an integer, and then the terms at negative bases reflected:
// zeta(s, q) = zeta(s, q - floor q) + (-1)^s (zeta(s, 1 - q + floor q) - zeta(s, 1 - q)).
// CPU's quirks kept: NaN at q = +inf, and for q > 1 where s is so large that its sum is 0 and its
// tail's factors overflow double (s^23 past its range: s past 2.53e13).
int32_t zeta(const F& f, int32_t s, int32_t q) {
  const int32_t floor_q = f.floor(q), frac = f.sub(q, floor_q);
  const int32_t positive = f.gt(q, f.k(0));
  const int32_t base = zeta_positive(f, s, f.sel(positive, q, frac));
  // 1 - frac as (floor q + 1) - q, exact: the smallest base, whose power dominates.
  const int32_t nearest = f.sub(f.add(floor_q, f.k(1.0)), q);
  const int32_t reflected = f.sub(zeta_positive(f, s, nearest), zeta_positive(f, s, f.sub(f.k(1.0), q)));
  const int32_t negative = f.add(base, f.sel(f.odd(s), f.neg(reflected), reflected));
  const int32_t below = f.sel(f.eq(q, f.floor(q)), f.k(INFINITY), f.sel(f.ne(s, f.floor(s)), f.k(NAN), negative));
  int32_t v = f.sel(f.le(q, f.k(0)), below, base);
  const int32_t vanished = f.both(f.gt(q, f.k(1)), f.either(f.isinf(q), f.gt(s, f.k(2.53e13))));
  v = f.sel(vanished, f.k(NAN), v);
  v = f.sel(f.both(f.eq(s, f.k(INFINITY)), f.lt(q, f.k(0))), f.k(INFINITY), v);  // a base inside (-1, 1)
  return f.sel(f.eq(s, f.k(1)), f.k(INFINITY), f.sel(f.lt(s, f.k(1)), f.k(NAN), v));
}

// ---- the regularised incomplete gamma functions ---------------------------------------------------

// P(a, x) = igamma, or Q(a, x) = 1 - P = igammac with `upper`, for a, x > 0 in three regimes:
// - a > 20 and |x - a| < 0.3 a: Temme's uniform expansion, Q = erfc(eta sqrt(a/2)) / 2 + R with
//   R = exp(-a eta^2 / 2) / sqrt(2 pi a) sum_k C_k(eta) a^-k, eta^2 / 2 = s - log1p(s) for
//   s = (x - a) / a (by its series, without cancellation), four C_k by their Taylor coefficients
//   (DiDonato and Morris), within 3e-9;
// - else x > a + 1: Q from Legendre's continued fraction evaluated from depth 30;
// - else P from its power series, 41 terms.
// (Each within 1e-8 over a and x from 1e-6 to 1e6, checked in double.) The edges as CPU: NaN for a
// negative argument, P(0, x > 0) = 1, P(a, 0) = 0, P(inf, x) = 0, P(a, inf) = 1, NaN at (0, 0) and
// (inf, inf).
int32_t incomplete_gamma(const F& f, int32_t a, int32_t x, bool upper) {
  const int32_t log_fac = f.sub(f.sub(f.mul(a, f.log(x)), x), lanczos_lgamma(f.e, f.add(a, f.k(1.0))));
  const int32_t fac = f.exp(log_fac);  // x^a e^-x / Gamma(a + 1)
  int32_t term = f.k(1.0), sum = f.k(1.0);
  for (int k = 1; k <= 40; ++k) {
    term = f.mul(term, f.div(x, f.add(a, f.k(k))));
    sum = f.add(sum, term);
  }
  const int32_t p_series = f.mul(fac, sum);
  const int32_t x_a = f.sub(x, a);
  constexpr int kDepth = 30;
  int32_t g = f.add(x_a, f.k(2 * kDepth + 1));
  for (int k = kDepth; k >= 1; --k) {
    g = f.sub(f.add(x_a, f.k(2 * k - 1)), f.div(f.mul(f.k(k), f.sub(f.k(k), a)), g));
  }
  const int32_t q_fraction = f.div(f.mul(fac, a), g);
  // Temme.
  const int32_t s = f.div(x_a, a);
  std::vector<double> c(17);
  for (size_t i = 0; i < c.size(); ++i) c[i] = (i % 2 ? -1.0 : 1.0) / static_cast<double>(i + 2);
  const int32_t half_eta2 = f.mul(f.sq(s), horner_of(f.e, s, c.data(), c.size()));
  const int32_t r = f.sqrt(f.mul(f.k(2.0), half_eta2));
  const int32_t eta = f.sel(f.lt(s, f.k(0)), f.neg(r), r);
  const int32_t z = f.mul(eta, f.sqrt(f.mul(a, f.k(0.5))));
  const int32_t half_erfc = f.mul(f.k(0.5), erfc_positive(f.e, f.abs(z), false));  // erfc(|z|) / 2
  const int32_t below = f.lt(z, f.k(0));
  const int32_t tail_upper = f.sel(below, f.sub(f.k(1.0), half_erfc), half_erfc);  // erfc(z) / 2
  const int32_t tail_lower = f.sel(below, half_erfc, f.sub(f.k(1.0), half_erfc));  // erfc(-z) / 2
  const int32_t c0 =
      f.poly(eta, {-3.3333333333333333e-1, 8.3333333333333333e-2, -1.4814814814814815e-2, 1.1574074074074074e-3,
                   3.527336860670194e-4, -1.7875514403292181e-4, 3.9192631785224378e-5, -2.1854485106799922e-6,
                   -1.85406221071516e-6, 8.296711340953086e-7});
  const int32_t c1 = f.poly(eta, {-1.8518518518518519e-3, -3.4722222222222222e-3, 2.6455026455026455e-3,
                                  -9.9022633744855967e-4, 2.0576131687242798e-4, -4.0187757201646091e-7,
                                  -1.8098550334489978e-5, 7.6491609160811101e-6, -1.6120900894563446e-6});
  const int32_t c2 =
      f.poly(eta, {4.1335978835978836e-3, -2.6813271604938272e-3, 7.7160493827160494e-4, 2.0093878600823045e-6,
                   -1.0736653226365161e-4, 5.2923448829120125e-5, -1.2760635188618728e-5, 3.4235787340961381e-8});
  const int32_t c3 =
      f.poly(eta, {6.4943415637860082e-4, 2.2947209362139918e-4, -4.6918949439525571e-4, 2.6772063206283885e-4,
                   -7.5618016718839764e-5, -2.3965051138672967e-7, 1.1082654115347302e-5});
  const int32_t ia = f.div(f.k(1.0), a);
  const int32_t sum_c = f.add(c0, f.mul(ia, f.add(c1, f.mul(ia, f.add(c2, f.mul(ia, c3))))));
  const int32_t remainder = f.mul(f.div(f.exp(f.neg(f.mul(a, half_eta2))), f.sqrt(f.mul(a, f.k(2 * M_PI)))), sum_c);
  const int32_t temme = f.both(f.gt(a, f.k(20)), f.lt(f.abs(x_a), f.mul(a, f.k(0.3))));
  const int32_t fraction = f.gt(x, f.add(a, f.k(1.0)));
  const double at_zero = upper ? 1.0 : 0.0, at_one = upper ? 0.0 : 1.0;
  int32_t v = upper
                  ? f.sel(temme, f.add(tail_upper, remainder), f.sel(fraction, q_fraction, f.sub(f.k(1.0), p_series)))
                  : f.sel(temme, f.sub(tail_lower, remainder), f.sel(fraction, f.sub(f.k(1.0), q_fraction), p_series));
  // CPU's edges, its first test outermost.
  v = f.sel(f.isinf(x), f.k(at_one), v);
  v = f.sel(f.isinf(a), f.sel(f.isinf(x), f.k(NAN), f.k(at_zero)), v);
  v = f.sel(f.eq(x, f.k(0)), f.k(at_zero), v);
  v = f.sel(f.eq(a, f.k(0)), f.sel(f.gt(x, f.k(0)), f.k(at_one), f.k(NAN)), v);
  return f.sel(f.either(f.lt(x, f.k(0)), f.lt(a, f.k(0))), f.k(NAN), v);
}

// ---- orthogonal polynomials -------------------------------------------------------------------------

// The degree as CPU's kernels take it: n truncated to int64, where NaN, the infinities and values past
// int64's range become its lowest value, a negative degree (the result is then 0).
int32_t no_degree(const F& f, int32_t n, int32_t nt) {
  return f.either(f.isnan(n), f.either(f.lt(nt, f.k(0)), f.ge(nt, f.k(9223372036854775808.0))));
}

enum class Chebyshev { kT, kU, kV, kW };

// CPU runs the three-term recurrence up to this degree (and past it where |y| > 1): unrolled so far.
constexpr int kUnrolled = 12;

// Chebyshev polynomials of the first to fourth kinds, T, U, V, W (`shifted`: of y = 2x - 1), as CPU:
// - |y| = 1: the closed values (1, n + 1, 2n + 1, with the sign of y^n);
// - |y| < 1 past a small degree (6 or 8; 4 for the shifted W): CPU's trigonometric forms in
//   theta = acos y, cos(n theta) and so on, with its tests where a half angle's sine or cosine
//   rounds to 1;
// - otherwise the recurrence p(k+1) = 2y p(k) - p(k-1) (one fused multiply-add, as CPU's compiled
//   loop), unrolled to degree 12; beyond it (|y| > 1)
//   the closed forms in t = acosh |y| in logarithms (cosh(n t), sinh((n+1) t) / sinh t, ...) and
//   CPU's recurrence's overflow: +-inf from the first degree m whose 2y p(m-1) overflows, for m and
//   m + 1, NaN after (inf - inf).
int32_t chebyshev(const F& f, int32_t x, int32_t n, Chebyshev kind, bool shifted) {
  const int32_t y = shifted ? f.sub(f.add(x, x), f.k(1.0)) : x;
  const int32_t nt = f.trunc(n), y2 = f.add(y, y);
  const int32_t q1 = kind == Chebyshev::kT   ? y
                     : kind == Chebyshev::kU ? y2
                     : kind == Chebyshev::kV ? f.sub(y2, f.k(1.0))
                                             : f.add(y2, f.k(1.0));
  int32_t p = f.k(1.0), q = q1, recurrence = f.sel(f.eq(nt, f.k(1)), q1, f.k(1.0));
  for (int k = 2; k <= kUnrolled; ++k) {
    const int32_t r = f.e.fma(y2, q, f.neg(p));  // fused, as CPU's compiled loop
    recurrence = f.sel(f.eq(nt, f.k(k)), r, recurrence);
    p = q;
    q = r;
  }
  const int32_t odd = f.odd(nt), positive = f.gt(y, f.k(0));
  const int32_t n1 = f.add(nt, f.k(1.0)), n_half = f.add(nt, f.k(0.5)), two_n1 = f.add(f.add(nt, nt), f.k(1.0));
  // |y| < 1.
  const int32_t theta = f.atan2(f.sqrt(f.mul(f.sub(f.k(1.0), y), f.add(f.k(1.0), y))), y);
  const int32_t half = f.mul(theta, f.k(0.5));
  int32_t inside = 0, edge = 0;
  int threshold = 8;
  switch (kind) {
    case Chebyshev::kT:
      inside = f.cos(f.mul(nt, theta));
      edge = f.sel(f.either(positive, f.eq(odd, f.k(0))), f.k(1.0), f.k(-1.0));
      threshold = 6;
      break;
    case Chebyshev::kU:  // sin(theta) is never 0 for |y| < 1 in fp32: CPU's other branch is unused
      inside = f.div(f.sin(f.mul(n1, theta)), f.sin(theta));
      edge = f.sel(f.either(positive, f.eq(odd, f.k(0))), n1, f.neg(n1));
      threshold = shifted ? 6 : 8;
      break;
    case Chebyshev::kV:
      inside = f.sel(f.ne(f.sin(half), f.k(1.0)), f.div(f.cos(f.mul(n_half, theta)), f.cos(half)),
                     f.sel(odd, f.neg(two_n1), two_n1));
      edge = f.sel(positive, f.k(1.0), f.sel(odd, f.neg(two_n1), two_n1));
      threshold = shifted ? 6 : 8;
      break;
    case Chebyshev::kW:
      inside = f.sel(f.ne(f.cos(half), f.k(1.0)), f.div(f.sin(f.mul(n_half, theta)), f.sin(half)),
                     f.sel(positive, two_n1, f.sel(odd, f.k(-1.0), f.k(1.0))));
      edge = f.sel(positive, two_n1, f.sel(odd, f.k(-1.0), f.k(1.0)));
      threshold = shifted ? 4 : 8;
      break;
  }
  // |y| > 1 past the unrolled degrees, in logarithms of the magnitude at |y|.
  const int32_t ay = f.abs(y), u = f.sub(ay, f.k(1.0));
  const int32_t t = f.log1p(f.add(u, f.sqrt(f.mul(u, f.add(u, f.k(2.0))))));
  const auto log_cosh = [&](int32_t z) { return f.sub(f.add(z, f.log1p(f.exp(f.mul(z, f.k(-2.0))))), f.k(M_LN2)); };
  const auto log_sinh = [&](int32_t z) {
    return f.sub(f.add(z, f.log(f.neg(f.expm1(f.mul(z, f.k(-2.0)))))), f.k(M_LN2));
  };
  const int32_t negative = f.lt(y, f.k(0));
  const auto log_magnitude = [&](int32_t degree) {
    switch (kind) {
      case Chebyshev::kT:
        return log_cosh(f.mul(degree, t));
      case Chebyshev::kU:
        return f.sub(log_sinh(f.mul(f.add(degree, f.k(1.0)), t)), log_sinh(t));
      default: {  // V(-y) = (-1)^n W(y) and W(-y) = (-1)^n V(y)
        const int32_t at = f.mul(f.add(degree, f.k(0.5)), t), ht = f.mul(t, f.k(0.5));
        const int32_t v = f.sub(log_cosh(at), log_cosh(ht)), w = f.sub(log_sinh(at), log_sinh(ht));
        return kind == Chebyshev::kV ? f.sel(negative, w, v) : f.sel(negative, v, w);
      }
    }
  };
  const double log_max = std::log(static_cast<double>(std::numeric_limits<float>::max()));
  const int32_t log_2y = f.log(f.add(ay, ay));
  const auto overflows_at = [&](double back) {  // 2y p(n - back - 1) overflows
    return f.gt(f.add(log_2y, log_magnitude(f.sub(nt, f.k(back + 1)))), f.k(log_max));
  };
  const int32_t flip = f.both(negative, odd);
  const int32_t magnitude =
      f.sel(overflows_at(2), f.k(NAN), f.sel(overflows_at(0), f.k(INFINITY), f.exp(log_magnitude(nt))));
  const int32_t beyond = f.sel(flip, f.neg(magnitude), magnitude);
  int32_t v = f.sel(f.le(nt, f.k(kUnrolled)), recurrence, beyond);
  v = f.sel(f.both(f.lt(ay, f.k(1.0)), f.gt(nt, f.k(threshold))), inside, v);
  v = f.sel(f.eq(ay, f.k(1.0)), edge, v);
  return f.sel(no_degree(f, n, nt), f.k(0.0), v);
}

// Hermite polynomials H (physicists', `physicists`) and He (probabilists'), by CPU's recurrences
// H(k+1) = 2x H(k) - 2k H(k-1) and He(k+1) = x He(k) - k He(k-1) (fused multiply-adds, as its compiled
// loops; they decide where the values overflow to inf or NaN), unrolled: past degree 52 (H) or
// 60 (He) CPU's fp32 recurrence has overflowed into NaN at every x, and past 128 it returns NaN.
int32_t hermite(const F& f, int32_t x, int32_t n, bool physicists) {
  const int unrolled = physicists ? 56 : 64;  // a margin past the last degree with a finite value
  const int32_t nt = f.trunc(n);
  const int32_t scale = physicists ? f.add(x, x) : x;
  int32_t p = f.k(1.0), q = scale, v = f.sel(f.eq(nt, f.k(1)), scale, f.k(1.0));
  for (int j = 2; j <= unrolled; ++j) {
    const int32_t r = f.e.fma(scale, q, f.neg(f.mul(f.k(physicists ? 2 * (j - 1) : j - 1), p)));  // as CPU's
    v = f.sel(f.eq(nt, f.k(j)), r, v);
    p = q;
    q = r;
  }
  v = f.sel(f.gt(nt, f.k(unrolled)), f.k(NAN), v);
  return f.sel(no_degree(f, n, nt), f.k(0.0), v);
}

}  // namespace

void add_special_functions(PointwiseTable& t) {
  using E = Expr;
  for (int order : {0, 1}) {
    const std::string o = std::to_string(order);
    t["special_bessel_j" + o] =
        row({"self"}, [order](E& e, const Refs& in, const Call&) { return bessel_jy(F{e}, in[0], order, false); });
    t["special_bessel_y" + o] =
        row({"self"}, [order](E& e, const Refs& in, const Call&) { return bessel_jy(F{e}, in[0], order, true); });
    t["special_modified_bessel_i" + o] =
        row({"self"}, [order](E& e, const Refs& in, const Call&) { return bessel_i(e, in[0], order, false); });
    t["special_modified_bessel_k" + o] =
        row({"self"}, [order](E& e, const Refs& in, const Call&) { return bessel_k(F{e}, in[0], order, false); });
    t["special_scaled_modified_bessel_k" + o] =
        row({"x"}, [order](E& e, const Refs& in, const Call&) { return bessel_k(F{e}, in[0], order, true); });
  }
  t["special_spherical_bessel_j0"] =
      row({"x"}, [](E& e, const Refs& in, const Call&) { return spherical_j0(F{e}, in[0]); });
  t["special_airy_ai"] = row({"x"}, [](E& e, const Refs& in, const Call&) { return airy_ai(F{e}, in[0]); });
  t["special_ndtri"] = row({"self"}, [](E& e, const Refs& in, const Call&) { return ndtri(F{e}, in[0]); });
  t["special_zeta"] =
      row({"self", "other"}, [](E& e, const Refs& in, const Call&) { return zeta(F{e}, in[0], in[1]); });
  for (const bool upper : {false, true}) {
    t[upper ? "igammac" : "igamma"] = row({"self", "other"}, [upper](E& e, const Refs& in, const Call&) {
      return incomplete_gamma(F{e}, in[0], in[1], upper);
    });
  }
  const std::pair<const char*, Chebyshev> kinds[] = {
      {"t", Chebyshev::kT}, {"u", Chebyshev::kU}, {"v", Chebyshev::kV}, {"w", Chebyshev::kW}};
  for (const auto& [letter, kind] : kinds) {
    for (const bool shifted : {false, true}) {
      const std::string name =
          std::string(shifted ? "special_shifted_chebyshev_polynomial_" : "special_chebyshev_polynomial_") + letter;
      t[name] = row({"x", "n"}, [kind = kind, shifted](E& e, const Refs& in, const Call&) {
        return chebyshev(F{e}, in[0], in[1], kind, shifted);
      });
    }
  }
  t["special_hermite_polynomial_h"] =
      row({"x", "n"}, [](E& e, const Refs& in, const Call&) { return hermite(F{e}, in[0], in[1], true); });
  t["special_hermite_polynomial_he"] =
      row({"x", "n"}, [](E& e, const Refs& in, const Call&) { return hermite(F{e}, in[0], in[1], false); });
}

}  // namespace spyre::compiler::ops
