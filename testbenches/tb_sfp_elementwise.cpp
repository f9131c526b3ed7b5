// Testbench of the SFP's element-wise instructions of an AI core (tile ISA v2), each result checked
// against goldens computed here in double precision from the semantics in spyre/hw/isa.h and
// docs/hardware-interface.md, rounded once as IEEE 754 says: every UNARY and BINARY function on
// every float type and i32, every broadcast mode of every operand of BINARY, SELECT and UNARY, and
// FMA. Number formats are encoded and decoded in core_harness.h, and data enters and leaves the
// scratchpad only by DMA. tb_sfp.cpp has the row instructions, conversions, fills and timing.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core_harness.h"

using namespace spyre;
using namespace spyre::tb;
using hw::Bcast;
using hw::BinaryFn;
using hw::DType;
using hw::Op;
using hw::ReduceFn;
using hw::UnaryFn;

namespace {

// ---- Goldens, from the semantics in isa.h and docs/hardware-interface.md ----------------------

// How close a float result must be to the formula: the exact result rounded once; a few ulps; or
// a few ulps of the formula at an argument one fp32 rounding away (the documented fp32 kernel
// scales the argument before erfc or exp, and GELU amplifies that error up to x^2 times).
// GELU's kSumUlps adds: within a few fp32 ulps of 1, times 0.5 |x|, of the formula (the documented
// 1 + f rounds to fp32, so a large negative x gives exactly 0 where the formula is tiny).
enum Tol { kExact, kUlps, kArgUlps, kSumUlps };
// Every UnaryFn in order: its name, the documented formula in double, and its tolerance.
struct UnaryRef {
  const char* name;
  double (*f)(double);
  Tol tol;
};
constexpr double kPi = 3.14159265358979323846;
const UnaryRef kUnary[] = {
    {"copy", [](double x) { return x; }, kExact},
    {"neg", [](double x) { return -x; }, kExact},
    {"abs", [](double x) { return std::fabs(x); }, kExact},
    {"relu", [](double x) { return std::isnan(x) ? x
                                   : x > 0       ? x
                                                 : 0.0; }, kExact},
    {"sign", [](double x) { return std::isnan(x) ? x : (x > 0) - (x < 0); }, kExact},
    {"floor", [](double x) { return std::floor(x); }, kExact},
    {"ceil", [](double x) { return std::ceil(x); }, kExact},
    {"round", [](double x) { return std::nearbyint(x); }, kExact},  // half to even
    {"trunc", [](double x) { return std::trunc(x); }, kExact},
    {"exp", [](double x) { return std::exp(x); }, kUlps},
    {"exp2", [](double x) { return std::exp2(x); }, kUlps},
    {"expm1", [](double x) { return std::expm1(x); }, kUlps},
    {"log", [](double x) { return std::log(x); }, kUlps},
    {"log2", [](double x) { return std::log2(x); }, kUlps},
    {"log1p", [](double x) { return std::log1p(x); }, kUlps},
    {"sqrt", [](double x) { return std::sqrt(x); }, kExact},
    {"rsqrt", [](double x) { return 1 / std::sqrt(x); }, kUlps},
    {"reciprocal", [](double x) { return 1 / x; }, kExact},
    {"tanh", [](double x) { return std::tanh(x); }, kUlps},
    {"sigmoid", [](double x) { return 1 / (1 + std::exp(-x)); }, kUlps},
    {"erf", [](double x) { return std::erf(x); }, kUlps},
    // 0.5 x (1 + erf(x / sqrt 2)) and 0.5 x (1 + tanh(u)), without the cancellation of 1 + f in double.
    {"gelu", [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }, kSumUlps},
    {"gelu_tanh", [](double x) { return x / (1 + std::exp(-2 * std::sqrt(2 / kPi) * (x + 0.044715 * x * x * x))); },
     kSumUlps},
    {"silu", [](double x) { return x / (1 + std::exp(-x)); }, kUlps},
    {"sin", [](double x) { return std::sin(x); }, kUlps},
    {"cos", [](double x) { return std::cos(x); }, kUlps},
    {"logical_not", [](double x) -> double { return x == 0; }, kExact},
    {"bitwise_not", nullptr, kExact},  // integer types only
    {"isnan", [](double x) -> double { return std::isnan(x); }, kExact},
    {"isinf", [](double x) -> double { return std::isinf(x); }, kExact},
    {"square", [](double x) { return x * x; }, kExact}};
static_assert(std::size(kUnary) == static_cast<size_t>(UnaryFn::kCount));
// Whether an f32 result g is within `ulps` of the formula somewhere between x (1 - 2^-24) and x (1 + 2^-24).
bool near_shifted(const UnaryRef& u, double x, double g, double ulps) {
  const double lo = u.f(x * (1 - 0x1p-24)), hi = u.f(x * (1 + 0x1p-24));
  return std::isfinite(x) && !std::isnan(g) &&
         close(DType::kF32, g, std::clamp(g, std::min(lo, hi), std::max(lo, hi)), ulps);
}
const UnaryRef& unary(UnaryFn f) {
  return kUnary[static_cast<int>(f)];
}

// Every BinaryFn in order, the same way; comparisons and logical functions give 1 or 0 (bool).
struct BinaryRef {
  const char* name;
  double (*f)(double, double);
  bool exact;
};
double nan_or(double a, double b, double v) {  // NaN propagates through Max and Min
  return std::isnan(a) || std::isnan(b) ? kNan : v;
}
double python_mod(double a, double b) {  // the sign of the divisor
  const double r = std::fmod(a, b);
  return r != 0 && (r < 0) != (b < 0) ? r + b : r;
}
const BinaryRef kBinary[] = {{"add", [](double a, double b) { return a + b; }, true},
                             {"sub", [](double a, double b) { return a - b; }, true},
                             {"mul", [](double a, double b) { return a * b; }, true},
                             {"div", [](double a, double b) { return a / b; }, true},
                             {"max", [](double a, double b) { return nan_or(a, b, std::max(a, b)); }, true},
                             {"min", [](double a, double b) { return nan_or(a, b, std::min(a, b)); }, true},
                             {"pow", [](double a, double b) { return std::pow(a, b); }, false},
                             {"remainder", python_mod, true},
                             {"fmod", [](double a, double b) { return std::fmod(a, b); }, true},
                             {"floordiv", [](double a, double b) { return std::floor(a / b); }, true},
                             {"eq", [](double a, double b) -> double { return a == b; }, true},
                             {"ne", [](double a, double b) -> double { return a != b; }, true},
                             {"lt", [](double a, double b) -> double { return a < b; }, true},
                             {"le", [](double a, double b) -> double { return a <= b; }, true},
                             {"gt", [](double a, double b) -> double { return a > b; }, true},
                             {"ge", [](double a, double b) -> double { return a >= b; }, true},
                             {"logical_and", [](double a, double b) -> double { return a != 0 && b != 0; }, true},
                             {"logical_or", [](double a, double b) -> double { return a != 0 || b != 0; }, true},
                             {"logical_xor", [](double a, double b) -> double { return (a != 0) != (b != 0); }, true},
                             {"bitand", nullptr, true},  // integer types only
                             {"bitor", nullptr, true},
                             {"bitxor", nullptr, true},
                             {"atan2", [](double a, double b) { return std::atan2(a, b); }, false}};
static_assert(std::size(kBinary) == static_cast<size_t>(BinaryFn::kCount));
const BinaryRef& binary(BinaryFn f) {
  return kBinary[static_cast<int>(f)];
}

// Integer functions as documented: by zero, Div, FloorDiv, Remainder and Fmod give 0; Pow with a
// negative exponent gives 0 unless the base is 1 or -1. Wrapping at 64 bits.
int64_t binary_int_ref(BinaryFn f, int64_t a, int64_t b) {
  const bool division =
      f == BinaryFn::kDiv || f == BinaryFn::kFloorDiv || f == BinaryFn::kRemainder || f == BinaryFn::kFmod;
  if (division && b == 0) return 0;
  uint64_t power = 1;
  switch (f) {
    case BinaryFn::kDiv:
      return a / b;
    case BinaryFn::kFloorDiv:
      return a / b - (a % b != 0 && (a < 0) != (b < 0));
    case BinaryFn::kRemainder:
      return a % b != 0 && (a % b < 0) != (b < 0) ? a % b + b : a % b;
    case BinaryFn::kFmod:
      return a % b;
    case BinaryFn::kPow:
      if (b < 0) return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
      for (int64_t k = 0; k < b; ++k) power *= static_cast<uint64_t>(a);
      return static_cast<int64_t>(power);
    case BinaryFn::kBitAnd:
      return a & b;
    case BinaryFn::kBitOr:
      return a | b;
    case BinaryFn::kBitXor:
      return a ^ b;
    default:
      return static_cast<int64_t>(binary(f).f(static_cast<double>(a), static_cast<double>(b)));
  }
}

// The value of an operand with broadcast `b` at (r, c) of a block `cols` wide, as isa.h defines it.
double at(Bcast b, const std::vector<double>& v, double imm, uint32_t r, uint32_t c, uint32_t cols) {
  return b == Bcast::kFull     ? v[r * cols + c]
         : b == Bcast::kRow    ? v[c]
         : b == Bcast::kCol    ? v[r]
         : b == Bcast::kScalar ? v[0]
                               : imm;
}

}  // namespace

// ---- SFP functions --------------------------------------------------------------------------

TEST_CASE("UNARY and BINARY: every function on f32, f16, bf16 (the formula in double, rounded once) and i32") {
  const double as[] = {-3.5, -2, -0.75, 0, 0.5, 1, 2, 3, 7.25, kInf, kNan};
  const double bs[] = {-2, -0.5, 0, 0.5, 1.5, 2, 3, -kInf, kNan};
  const int64_t ias[] = {-7, -1, 0, 1, 3, 100, INT32_MAX, INT32_MIN};
  const int64_t ibs[] = {-3, -1, 0, 1, 2, 7};
  for (const DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32}) {
    const bool is_float = hw::dtype_is_float(t);
    std::vector<double> x, a, b;  // UNARY inputs; BINARY pairs
    if (is_float) {
      for (int k = 0; k <= 48; ++k) x.push_back(-6 + 0.25 * k);  // includes the ties of round
      for (double v : {0.1, -0.1, 1e-3, -1e-3, 1e-6, 20.0, -20.0, -10.0, 88.0, 100.0, -0.0, kInf, -kInf, kNan})
        x.push_back(v);
      for (double u : as) {
        for (double v : bs) a.push_back(u), b.push_back(v);
      }
    } else {
      x = {0, 1, -1, 7, -7, 46341, INT32_MIN, INT32_MAX};
      for (int64_t u : ias) {
        for (int64_t v : ibs) a.push_back(static_cast<double>(u)), b.push_back(static_cast<double>(v));
      }
    }
    x = unpack(t, pack(t, x)), a = unpack(t, pack(t, a)), b = unpack(t, pack(t, b));
    const auto nx = static_cast<uint32_t>(x.size()), n = static_cast<uint32_t>(a.size());
    // Functions outside their types fault: transcendental UNARYs and Atan2 need floats, the bitwise ones integers.
    std::vector<uint8_t> unary_fns, binary_fns;
    for (uint8_t f = 0; f < static_cast<uint8_t>(UnaryFn::kCount); ++f) {
      const bool transcendental = f >= static_cast<uint8_t>(UnaryFn::kExp) && f <= static_cast<uint8_t>(UnaryFn::kCos);
      if (is_float ? f != static_cast<uint8_t>(UnaryFn::kBitwiseNot) : !transcendental) unary_fns.push_back(f);
    }
    for (uint8_t f = 0; f < static_cast<uint8_t>(BinaryFn::kCount); ++f) {
      if (is_float ? kBinary[f].f != nullptr : f != static_cast<uint8_t>(BinaryFn::kAtan2)) binary_fns.push_back(f);
    }
    std::vector<hw::Instr> code;
    std::vector<Output> outs;
    for (uint8_t f : unary_fns) {
      code.push_back(sfp(Op::kUnary, t, kD + f * 0x1000, kX, f, 1, nx));
      outs.push_back({kD + f * 0x1000u, nx * (hw::unary_is_bool(UnaryFn(f)) ? 1 : hw::dtype_size(t))});
    }
    for (uint8_t f : binary_fns) {
      code.push_back(sfp(Op::kBinary, t, kE + f * 0x1000, emit::pack2(kY, kZ), f, 1, n));
      outs.push_back({kE + f * 0x1000u, n * (hw::binary_is_compare(BinaryFn(f)) ? 1 : hw::dtype_size(t))});
    }
    const auto got = on_core({{kX, pack(t, x)}, {kY, pack(t, a)}, {kZ, pack(t, b)}}, code, outs);
    int failures = 0;
    const double ulps = t == DType::kF32 ? 4 : 1;  // for the functions that need not round exactly
    for (size_t i = 0; i < unary_fns.size(); ++i) {
      const auto f = static_cast<UnaryFn>(unary_fns[i]);
      const DType out = hw::unary_is_bool(f) ? DType::kBool : t;
      for (uint32_t j = 0; j < nx; ++j) {
        const int64_t v = is_float ? 0 : static_cast<int64_t>(x[j]);  // integers: exact in int64
        const double want = is_float                    ? unary(f).f(x[j])
                            : f == UnaryFn::kBitwiseNot ? wrap(out, ~v)
                            : f == UnaryFn::kSquare     ? wrap(out, v * v)
                                                        : wrap(out, static_cast<int64_t>(unary(f).f(x[j])));
        const double g = get(out, got[i], j);
        const Tol tol = unary(f).tol;
        const bool arg_ok =
            (tol == kArgUlps || tol == kSumUlps) && t == DType::kF32 && near_shifted(unary(f), x[j], g, ulps);
        const bool sum_ok =
            tol == kSumUlps && std::isfinite(x[j]) && std::fabs(g - want) <= 0.5 * std::fabs(x[j]) * 0x1p-22;
        // The documented zeros: 1 + f is exactly 0 in fp32 there (CPU's nonzero() counts no denormal).
        if (tol == kSumUlps && x[j] <= -10 && std::isfinite(x[j])) {
          expect(g == 0, failures, cat("UNARY ", unary(f).name, " ", hw::dtype_name(t), " x=", x[j], ": got ", g));
        }
        expect(arg_ok || sum_ok || close(out, g, want, tol == kExact ? 0 : ulps), failures,
               cat("UNARY ", unary(f).name, " ", hw::dtype_name(t), " x=", x[j], ": want ",
                   hw::dtype_is_float(out) ? round_to(out, want) : want, " got ", g));
      }
    }
    for (size_t i = 0; i < binary_fns.size(); ++i) {
      const auto f = static_cast<BinaryFn>(binary_fns[i]);
      const DType out = hw::binary_is_compare(f) ? DType::kBool : t;
      for (uint32_t j = 0; j < n; ++j) {
        // Python's // and % of infinities are not what floor(a / b) and fmod give: not checked.
        const bool python = f == BinaryFn::kRemainder || f == BinaryFn::kFloorDiv;
        if (python && (std::isinf(a[j]) || std::isinf(b[j]))) continue;
        const double want = is_float
                                ? binary(f).f(a[j], b[j])
                                : wrap(out, binary_int_ref(f, static_cast<int64_t>(a[j]), static_cast<int64_t>(b[j])));
        const double g = get(out, got[unary_fns.size() + i], j);
        expect(close(out, g, want, binary(f).exact ? 0 : ulps), failures,
               cat("BINARY ", binary(f).name, " ", hw::dtype_name(t), " a=", a[j], " b=", b[j], ": want ",
                   hw::dtype_is_float(out) ? round_to(out, want) : want, " got ", g));
      }
    }
    CHECK(failures == 0);
  }
}

TEST_CASE("BINARY, SELECT and UNARY read every broadcast mode of every operand as documented") {
  const uint32_t rows = 3, cols = 5;
  const double imm = 0.25;
  const Bcast modes[] = {Bcast::kFull, Bcast::kRow, Bcast::kCol, Bcast::kScalar, Bcast::kImm};
  // Operand s in mode m lives at base_s + m * 0x100 and holds distinct values.
  const auto data = [&](int s, Bcast m) {
    std::vector<double> v(hw::bcast_elements(m, rows, cols));
    for (size_t k = 0; k < v.size(); ++k) v[k] = (s ? -1 : 1) * (100.0 * static_cast<int>(m) + k + 1);
    return v;
  };
  const uint32_t base[] = {kX, kY};
  std::vector<Input> inputs{{kZ, {1, 0, 0, 2, 1, 0, 1, 0, 0, 1, 1, 1, 0, 0, 0}}};  // SELECT mask: non-zero is true
  for (int s : {0, 1}) {
    for (int m = 0; m < 4; ++m) inputs.push_back({base[s] + m * 0x100, pack(DType::kF32, data(s, modes[m]))});
  }
  std::vector<hw::Instr> code;
  std::vector<Output> outs;
  for (int i = 0; i < 25; ++i) {
    const Bcast b0 = modes[i / 5], b1 = modes[i % 5];
    const uint64_t srcs = emit::pack2(kX + static_cast<int>(b0) * 0x100, kY + static_cast<int>(b1) * 0x100);
    code.push_back(sfp(Op::kBinary, DType::kF32, kD + i * 0x100, srcs,
                       static_cast<uint64_t>(BinaryFn::kSub) | f32_imm(0.25f), rows, cols, hw::bcast_flags(b0, b1)));
    code.push_back(sfp(Op::kSelect, DType::kF32, kE + i * 0x100, emit::pack2(kZ, static_cast<uint32_t>(srcs)),
                       (srcs >> 32) | f32_imm(0.25f), rows, cols, hw::bcast_flags(b0, b1)));
    outs.push_back({kD + i * 0x100u, rows * cols * 4});
    outs.push_back({kE + i * 0x100u, rows * cols * 4});
  }
  for (int m = 0; m < 4; ++m) {
    code.push_back(sfp(Op::kUnary, DType::kF32, kZ + 0x1000 + m * 0x100, kX + m * 0x100,
                       static_cast<uint64_t>(UnaryFn::kNeg), rows, cols, static_cast<uint8_t>(m)));
    outs.push_back({kZ + 0x1000u + m * 0x100u, rows * cols * 4});
  }
  const auto got = on_core(inputs, code, outs);
  int failures = 0;
  for (int i = 0; i < 29; ++i) {
    const Bcast b0 = modes[i < 25 ? i / 5 : i - 25], b1 = modes[i % 5];
    const std::vector<double> bin = unpack(DType::kF32, got[i < 25 ? 2 * i : 50 + i - 25]);
    const std::vector<double> sel = i < 25 ? unpack(DType::kF32, got[2 * i + 1]) : bin;
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t c = 0; c < cols; ++c) {
        const double x = at(b0, data(0, b0), imm, r, c, cols), y = at(b1, data(1, b1), imm, r, c, cols);
        const size_t k = r * cols + c;
        if (i >= 25) {
          expect(bin[k] == -x, failures, cat("UNARY neg src ", static_cast<int>(b0), " at ", k, ": got ", bin[k]));
          continue;
        }
        expect(bin[k] == x - y, failures,
               cat("BINARY sub bcast ", static_cast<int>(b0), "/", static_cast<int>(b1), " at ", k, ": want ", x - y,
                   " got ", bin[k]));
        const double want = inputs[0].bytes[k] ? x : y;
        expect(sel[k] == want, failures,
               cat("SELECT bcast ", static_cast<int>(b0), "/", static_cast<int>(b1), " at ", k, ": want ", want,
                   " got ", sel[k]));
      }
    }
  }
  CHECK(failures == 0);
  // Integer immediates are int32, sign-extended.
  const auto i32 =
      on_core({{kX, pack(DType::kI32, {5, -5, 1000})}, {kZ, {1, 0, 1}}},
              {sfp(Op::kBinary, DType::kI32, kD, kX, static_cast<uint64_t>(BinaryFn::kAdd) | uint64_t{0xfffffff9} << 32,
                   1, 3, hw::bcast_flags(Bcast::kFull, Bcast::kImm)),
               sfp(Op::kSelect, DType::kI32, kE, emit::pack2(kZ, kX), uint64_t{0xfffffff9} << 32, 1, 3,
                   hw::bcast_flags(Bcast::kFull, Bcast::kImm))},
              {{kD, 12}, {kE, 12}});
  CHECK(unpack(DType::kI32, i32[0]) == std::vector<double>{-2, -12, 993});
  CHECK(unpack(DType::kI32, i32[1]) == std::vector<double>{5, -7, 1000});
}

TEST_CASE("FMA rounds once, and wraps on i32") {
  struct Case {
    DType t;
    std::vector<double> a, b, c;
  };
  const double f32_eps = std::ldexp(1.0, -12), f16_eps = std::ldexp(1.0, -6);
  const Case cases[] = {
      {DType::kF32, {1 + f32_eps, 0.1, 3, -2.5}, {1 + f32_eps, 10, -4, 0.5}, {-(1 + 2 * f32_eps), -1, 1, 0}},
      {DType::kF16, {1 + f16_eps, 3, -2.5}, {1 + f16_eps, -4, 0.5}, {-(1 + 2 * f16_eps), 1, 0}},
      {DType::kBF16, {1 + 1.0 / 64, 3}, {1 + 1.0 / 64, -4}, {-(1 + 2.0 / 64), 1}},
      {DType::kI32, {3, -7, 65536}, {4, 6, 65536}, {1, 2, 5}}};
  for (const Case& k : cases) {
    const auto n = static_cast<uint32_t>(k.a.size());
    const auto got = on_core({{kX, pack(k.t, k.a)}, {kY, pack(k.t, k.b)}, {kZ, pack(k.t, k.c)}},
                             {sfp(Op::kFma, k.t, kD, emit::pack2(kX, kY), kZ, 1, n)}, {{kD, n * hw::dtype_size(k.t)}});
    const std::vector<double> a = unpack(k.t, pack(k.t, k.a)), b = unpack(k.t, pack(k.t, k.b)),
                              c = unpack(k.t, pack(k.t, k.c));
    for (uint32_t j = 0; j < n; ++j) {
      CAPTURE(std::string(hw::dtype_name(k.t)));
      CAPTURE(j);
      if (hw::dtype_is_float(k.t)) {
        CHECK(get(k.t, got[0], j) == round_to(k.t, a[j] * b[j] + c[j]));  // exact in double for these inputs
      } else {
        CHECK(get_int(k.t, got[0], j) ==
              wrap(k.t, static_cast<int64_t>(a[j]) * static_cast<int64_t>(b[j]) + static_cast<int64_t>(c[j])));
      }
    }
  }
}

extern "C" int sc_main(int argc, char* argv[]) {
  Harness harness;
  h = &harness;
  doctest::Context context(argc, argv);
  return context.run();
}
