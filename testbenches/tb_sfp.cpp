// Testbench of the SFP vector unit of an AI core (tile ISA v2), beyond the element-wise functions
// (tb_sfp_elementwise.cpp), each result checked against something the model does not compute:
// - REDUCE with NaNs and accumulation over column blocks, SORT, CONVERT between every pair of types
//   and DLFloat16, FILL, IOTA and TRANSPOSE, against goldens computed here from the semantics in
//   spyre/hw/isa.h and docs/hardware-interface.md; unaligned operands and the fp32 fast paths
//   against aligned ones and libm; data enters and leaves the scratchpad only by DMA;
// - the latency of one instruction against issue + ceil(n / per_cycle) * factor + fill from the config.
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
// Rows for REDUCE: plain values, NaNs (first one wins the arg reductions), ties (first wins),
// the best value in the second half of the row, a NaN in each half.
const std::vector<std::vector<double>> kReduceRows = {
    {3, -1, 7, 2, 7, -5, 0.5, 4}, {1, kNan, 9, -2, kNan, 3, 0, 1}, {-1, -1, -3, -3, 2, 2, -3, 2},
    {0, 1, 2, 3, 4, kNan, 6, 7},  {kNan, 0, 0, 0, kNan, 9, 9, 9},  {-0.25, 8, 1500, -2, 16, 2, 1e-3, 3}};
struct RowRef {
  double sum = 0, prod = 1, max, min;
  int64_t argmax, argmin;
};
RowRef reduce_ref(const std::vector<double>& row) {
  RowRef r;
  for (double x : row) r.sum += x, r.prod *= x;
  const auto first_nan = std::find_if(row.begin(), row.end(), [](double x) { return std::isnan(x); });
  const double hi = *std::max_element(row.begin(), row.end()), lo = *std::min_element(row.begin(), row.end());
  const bool nan = first_nan != row.end();
  r.max = nan ? kNan : hi;
  r.min = nan ? kNan : lo;
  r.argmax = (nan ? first_nan : std::find(row.begin(), row.end(), hi)) - row.begin();
  r.argmin = (nan ? first_nan : std::find(row.begin(), row.end(), lo)) - row.begin();
  return r;
}
hw::Instr reduce(ReduceFn f, DType t, uint32_t dst, uint32_t src, uint32_t best, uint32_t rows, uint32_t cols,
                 bool acc = false, uint32_t base_reg = 0) {
  hw::Instr i = sfp(Op::kReduce, t, dst, src, static_cast<uint64_t>(f) | uint64_t{best} << 32, rows, cols,
                    acc ? hw::kReduceAccumulate : 0);
  i.regs = hw::pack_regs(base_reg, 0);
  return i;
}
}  // namespace

TEST_CASE("REDUCE: sum, max, min, prod, argmax, argmin with NaNs and ties, over whole rows or two column blocks") {
  for (const auto& [t, blocks] :
       {std::pair{DType::kF32, 1u}, {DType::kF16, 1u}, {DType::kF32, 2u}, {DType::kF16, 2u}}) {
    CAPTURE(std::string(hw::dtype_name(t)));
    CAPTURE(blocks);
    const uint32_t rows = static_cast<uint32_t>(kReduceRows.size()), cols = 8 / blocks, es = hw::dtype_size(t);
    // Block k holds columns [k * cols, (k + 1) * cols) of every row. The second block accumulates
    // into the first's results, with its column base in r[5].
    std::vector<Input> inputs;
    std::vector<hw::Instr> code = {emit::li(5, cols)};
    for (uint32_t k = 0; k < blocks; ++k) {
      std::vector<double> part;
      for (const auto& row : kReduceRows) part.insert(part.end(), row.begin() + k * cols, row.begin() + (k + 1) * cols);
      inputs.push_back({kX + k * 0x1000, pack(t, part)});
      for (uint32_t f = 0; f < 6; ++f) {
        const uint32_t dst = f < 4 ? kD + f * 0x100 : kE + (f - 4) * 0x100, best = f < 4 ? 0 : kZ + (f - 4) * 0x100;
        code.push_back(
            reduce(static_cast<ReduceFn>(f), t, dst, kX + k * 0x1000, best, rows, cols, k > 0, k > 0 ? 5 : 0));
      }
    }
    // Sum, max, min, prod; then argmax, its best values, argmin, its best values.
    std::vector<Output> outs;
    for (uint32_t f = 0; f < 4; ++f) outs.push_back({kD + f * 0x100, rows * es});
    for (uint32_t f = 0; f < 2; ++f) outs.insert(outs.end(), {{kE + f * 0x100, rows * 8}, {kZ + f * 0x100, rows * es}});
    const auto got = on_core(inputs, code, outs);
    for (uint32_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      const std::vector<double> row = unpack(t, pack(t, kReduceRows[r]));
      const RowRef want = reduce_ref(row);
      CHECK(close(t, get(t, got[0], r), want.sum, 1));
      CHECK(close(t, get(t, got[1], r), want.max));
      CHECK(close(t, get(t, got[2], r), want.min));
      CHECK(close(t, get(t, got[3], r), want.prod, 1));
      CHECK(get_int(DType::kI64, got[4], r) == want.argmax);
      CHECK(close(t, get(t, got[5], r), row[want.argmax]));
      CHECK(get_int(DType::kI64, got[6], r) == want.argmin);
      CHECK(close(t, get(t, got[7], r), row[want.argmin]));
    }
  }
}

TEST_CASE("REDUCE sum of short fp32 rows: the same bits as the row padded with zeros to eight columns") {
  // Rows shorter than the eight double partial sums take a path of their own (no loop per row);
  // padded with +0 to eight columns the same row takes the general one, with the same additions.
  std::vector<float> pool = {1.5f, -0.0f, 3e-8f, -7.25f, 1e30f, -1e30f, 0.1f, 16777217.0f, -2.5e-39f, 1e-45f, 5.0f};
  uint32_t seed = 12345;
  const auto next = [&] {
    seed = seed * 1664525u + 1013904223u;
    return pool[(seed >> 16) % pool.size()];
  };
  const auto bits = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  for (uint64_t cols = 1; cols < 8; ++cols) {
    CAPTURE(cols);
    const uint64_t rows = 300;
    std::vector<float> shorter(rows * cols), padded(rows * 8, 0.0f), got(rows), want(rows);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) shorter[r * cols + c] = padded[r * 8 + c] = r == 0 ? -0.0f : next();
    }
    sim::sfp_reduce(ReduceFn::kSum, DType::kF32, got.data(), shorter.data(), rows, cols, false, nullptr, 0);
    sim::sfp_reduce(ReduceFn::kSum, DType::kF32, want.data(), padded.data(), rows, 8, false, nullptr, 0);
    for (uint64_t r = 0; r < rows; ++r) {
      CAPTURE(r);
      REQUIRE(bits(got[r]) == bits(want[r]));
    }
    CHECK(bits(got[0]) == 0u);  // a row of -0: the partial sums start at +0
  }
}

TEST_CASE("SORT: each row stable, ascending or descending, NaN largest, with the source columns") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    DType t;
    std::vector<std::vector<double>> rows;
    std::vector<std::vector<int64_t>> up, down;  // source columns, written out by hand
  };
  const Case cases[] = {
      {DType::kF32,
       {{3, 1, nan, 1, -2, 5}, {0, -0.0, 2, 2, -1, 7}},
       {{4, 1, 3, 0, 5, 2}, {4, 0, 1, 2, 3, 5}},
       {{2, 5, 0, 1, 3, 4}, {5, 2, 3, 0, 1, 4}}},
      {DType::kBF16, {{3, 1, nan, 1, -2, 5}}, {{4, 1, 3, 0, 5, 2}}, {{2, 5, 0, 1, 3, 4}}},
      {DType::kI32, {{5, -3, 5, 0, -3, 9}}, {{1, 4, 3, 0, 2, 5}}, {{5, 0, 2, 3, 1, 4}}},
      {DType::kI64, {{5, -3, 5, 0, -3, 9}}, {{1, 4, 3, 0, 2, 5}}, {{5, 0, 2, 3, 1, 4}}},
  };
  for (const Case& k : cases) {
    CAPTURE(std::string(hw::dtype_name(k.t)));
    const auto rows = static_cast<uint32_t>(k.rows.size()), cols = 6u;
    std::vector<double> flat;
    for (const auto& r : k.rows) flat.insert(flat.end(), r.begin(), r.end());
    const std::vector<hw::Instr> code = {sfp(Op::kSort, k.t, kD, kX, kE, rows, cols),
                                         sfp(Op::kSort, k.t, kZ, kX, kY, rows, cols, hw::kSortDescending)};
    const uint32_t es = hw::dtype_size(k.t);
    const auto got =
        on_core({{kX, pack(k.t, flat)}}, code,
                {{kD, rows * cols * es}, {kE, rows * cols * 8}, {kZ, rows * cols * es}, {kY, rows * cols * 8}});
    for (uint32_t r = 0; r < rows; ++r) {
      for (uint32_t c = 0; c < cols; ++c) {
        CAPTURE(r);
        CAPTURE(c);
        const uint32_t i = r * cols + c;
        const int64_t up = k.up[r][c], down = k.down[r][c];
        CHECK(get_int(DType::kI64, got[1], i) == up);
        CHECK(get_int(DType::kI64, got[3], i) == down);
        const double want_up = k.rows[r][static_cast<size_t>(up)], want_down = k.rows[r][static_cast<size_t>(down)];
        CHECK((std::isnan(want_up) ? std::isnan(get(k.t, got[0], i)) : get(k.t, got[0], i) == want_up));
        CHECK((std::isnan(want_down) ? std::isnan(get(k.t, got[2], i)) : get(k.t, got[2], i) == want_down));
      }
    }
  }
}

TEST_CASE("DLFloat16: CONVERT from f32 rounds to 9 fraction bits, ties away, saturating; and back exactly") {
  // Bit patterns worked out by hand: sign | (exponent + 31) << 9 | fraction.
  const double big = std::ldexp(2.0 - std::ldexp(1.0, -8), 32);  // exponent 63, fraction 510
  const struct {
    double value;
    uint16_t bits;
    double back;  // the value the pattern stands for
  } cases[] = {
      {1.0, 0x3e00, 1.0},
      {1.0 + std::ldexp(1.0, -9), 0x3e01, 1.0 + std::ldexp(1.0, -9)},
      {1.0 + std::ldexp(1.0, -10), 0x3e01, 1.0 + std::ldexp(1.0, -9)},            // a tie, away from zero
      {1.0 + std::ldexp(1.0, -11), 0x3e00, 1.0},                                  // below half: down
      {-(1.0 + 3 * std::ldexp(1.0, -10)), 0xbe02, -(1.0 + std::ldexp(1.0, -8))},  // a tie, away
      {-2.0, 0xc000, -2.0},
      {65504.0, 0x5e00, 65536.0},                            // fp16's largest needs 10 fraction bits: rounds up to 2^16
      {std::ldexp(1.0, -30), 0x0200, std::ldexp(1.0, -30)},  // the smallest normal
      {std::ldexp(1.0, -31), 0x0000, 0.0},                   // below it: flushed (no subnormals)
      {1e30, 0x7ffe, big},                                   // past the largest: saturates
      {-INFINITY, 0xfffe, -big},                             // no infinity either
      {-0.0, 0x8000, -0.0},
  };
  sim::set_fp16_dlfloat(true);
  std::vector<double> values;
  std::vector<uint16_t> bits;
  for (const auto& k : cases) {
    values.push_back(k.value);
    bits.push_back(k.bits);
  }
  values.push_back(std::numeric_limits<double>::quiet_NaN());
  bits.push_back(0x7fff);
  const auto n = static_cast<uint32_t>(values.size());
  std::vector<uint8_t> raw(bits.size() * 2);
  std::memcpy(raw.data(), bits.data(), raw.size());
  const auto got = on_core({{kX, pack(DType::kF32, values)}, {kY, raw}},
                           {sfp(Op::kConvert, DType::kF16, kD, kX, static_cast<uint64_t>(DType::kF32), 1, n),
                            sfp(Op::kConvert, DType::kF32, kE, kY, static_cast<uint64_t>(DType::kF16), 1, n)},
                           {{kD, n * 2}, {kE, n * 4}});
  sim::set_fp16_dlfloat(false);
  for (uint32_t i = 0; i + 1 < n; ++i) {
    CAPTURE(i);
    CAPTURE(cases[i].value);
    uint16_t b;
    std::memcpy(&b, got[0].data() + 2 * i, 2);
    CHECK(b == cases[i].bits);
    float f;
    std::memcpy(&f, got[1].data() + 4 * i, 4);
    CHECK(f == static_cast<float>(cases[i].back));
    CHECK(std::signbit(f) == std::signbit(cases[i].back));
  }
  uint16_t nan_bits;
  std::memcpy(&nan_bits, got[0].data() + 2 * (n - 1), 2);
  CHECK((nan_bits & 0x7fff) == 0x7fff);
  float nan_back;
  std::memcpy(&nan_back, got[1].data() + 4 * (n - 1), 4);
  CHECK(std::isnan(nan_back));
}

TEST_CASE("SFP operands at unaligned scratchpad addresses compute as aligned ones") {
  // The ISA allows any byte address; the model must not assume more.
  const std::vector<double> v = {1.5, -2.25, 3.0, 0.125, -7.0, 100.0, 0.5, 2.0};
  const auto n = static_cast<uint32_t>(v.size());
  const uint32_t x = kX + 1, sum = kD + 3, half = kE + 1, back = kZ + 2, arg = kY + 3, best = kY + 0x101;
  const std::vector<hw::Instr> code = {
      sfp(Op::kBinary, DType::kF32, sum, emit::pack2(x, 0),
          static_cast<uint64_t>(BinaryFn::kAdd) | uint64_t{0x3f800000} << 32, 1, n,
          hw::bcast_flags(Bcast::kFull, Bcast::kImm)),
      sfp(Op::kConvert, DType::kF16, half, x, static_cast<uint64_t>(DType::kF32), 1, n),
      sfp(Op::kConvert, DType::kF32, back, half, static_cast<uint64_t>(DType::kF16), 1, n),
      sfp(Op::kReduce, DType::kF32, arg, x, static_cast<uint64_t>(hw::ReduceFn::kArgMax) | uint64_t{best} << 32, 1, n),
  };
  const auto got = on_core({{x, pack(DType::kF32, v)}}, code, {{sum, n * 4}, {back, n * 4}, {arg, 8}});
  for (uint32_t i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(get(DType::kF32, got[0], i) == v[i] + 1.0);
    CHECK(get(DType::kF32, got[1], i) == v[i]);  // each is exact in fp16
  }
  CHECK(get_int(DType::kI64, got[2], 0) == 5);  // 100.0
}

TEST_CASE("fp32 exp, sigmoid and SiLU: within 8 ulp of libm, exact at the edges, whatever the host alignment") {
  // The vectorised path must give each element the same bits wherever the block sits in host
  // memory (results once depended on the scratchpad's allocation), and stay close to libm's.
  std::vector<float> x;
  for (int i = -400; i <= 400; ++i) x.push_back(static_cast<float>(i) * 0.27f);
  for (float e : {88.2f, 88.5f, 88.72f, -87.2f, -95.0f, -103.9f, -104.5f, -200.0f, 1e-30f}) {
    x.push_back(e);
    x.push_back(-e);
  }
  x.push_back(INFINITY);
  x.push_back(-INFINITY);
  x.push_back(NAN);
  const auto bits = [](float f) {
    int32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  for (const UnaryFn f : {UnaryFn::kExp, UnaryFn::kSigmoid, UnaryFn::kSilu}) {
    CAPTURE(static_cast<int>(f));
    std::vector<float> first;
    for (size_t shift = 0; shift < 17; ++shift) {  // every float offset within a 64-byte line
      std::vector<float> buf(x.size() + 32);
      float* in = buf.data() + shift;
      std::copy(x.begin(), x.end(), in);
      sim::sfp_unary(f, DType::kF32, in, in, Bcast::kFull, 1, x.size());  // in place
      std::vector<float> got(in, in + x.size());
      if (shift == 0) first = got;
      for (size_t i = 0; i < x.size(); ++i) {
        CAPTURE(x[i]);
        REQUIRE(bits(got[i]) == bits(first[i]));
      }
    }
    // Nor on its neighbours: alone, and in a block of ordinary values beside one -inf (a causal
    // mask's score in a softmax) or one overflowing value, each element gives the same bits.
    for (size_t i = 0; i < x.size(); ++i) {
      CAPTURE(x[i]);
      float alone = x[i];
      sim::sfp_unary(f, DType::kF32, &alone, &alone, Bcast::kFull, 1, 1);
      REQUIRE(bits(alone) == bits(first[i]));
      for (const float wild : {-INFINITY, 200.0f}) {
        std::vector<float> block(40, x[i]);
        block[7] = wild;
        sim::sfp_unary(f, DType::kF32, block.data(), block.data(), Bcast::kFull, 1, block.size());
        REQUIRE(bits(block[0]) == bits(first[i]));
        REQUIRE(bits(block[39]) == bits(first[i]));
      }
    }
    for (size_t i = 0; i < x.size(); ++i) {
      const double xd = x[i];
      const double e = f == UnaryFn::kExp       ? std::exp(xd)
                       : f == UnaryFn::kSigmoid ? 1 / (1 + std::exp(-xd))
                                                : xd / (1 + std::exp(-xd));
      const auto want = static_cast<float>(e);
      CAPTURE(x[i]);
      if (std::isnan(want)) {
        CHECK(std::isnan(first[i]));
      } else if (std::isinf(want)) {
        CHECK(bits(first[i]) == bits(want));
      } else if (f == UnaryFn::kExp && std::fabs(want) < 1.2e-38f) {
        CHECK(bits(first[i]) == bits(want));  // exp's zeros and subnormals exactly
      } else if (std::fabs(want) < 1e-30f) {
        // sigmoid and SiLU of large negative x: the fp32 formula's exp(-x) overflows to inf
        CHECK(std::fabs(first[i] - want) <= 1e-36f);
      } else {
        CHECK(std::abs(bits(first[i]) - bits(want)) <= 8);
      }
    }
  }
}

TEST_CASE("CONVERT between every pair of types: rounding once to nearest even, truncation, saturation, bool") {
  // 1 + 2^-8 is a bf16 tie (to 1), 1 + 3 * 2^-9 rounds up, 1 + 2^-7 + 2^-8 is a tie to the even 1 + 2^-6;
  // 1 + 2^-11 and 1 + 3 * 2^-11 are the same for f16.
  const double tie8 = std::ldexp(1, -8), tie11 = std::ldexp(1, -11);
  const std::vector<double> floats = {
      0,     -0.0,  1,    -1,   2.75,  -2.75,    100.5,          -129.5,       300.25,    65519,         65520,
      70000, 3e9,   -3e9, 1e20, -1e20, 1 + tie8, 1 + 1.5 * tie8, 1 + 3 * tie8, 1 + tie11, 1 + 3 * tie11, 6e-8,
      kInf,  -kInf, kNan};
  // Through fp32, 2^24 + 2^16 + 1 becomes 2^24 + 2^16 and then the bf16 tie 2^24 (documented).
  const std::vector<int64_t> ints = {0,        1,         -1,        127,           128,
                                     -129,     300,       65519,     70000,         16777217,
                                     16842753, INT32_MAX, INT32_MIN, 1099511627777, -1099511627777};
  int failures = 0;
  for (const DType from : kAllTypes) {
    const bool from_float = hw::dtype_is_float(from);
    const size_t n = from_float ? floats.size() : from == DType::kBool ? 2 : ints.size();
    std::vector<uint8_t> src = from_float ? pack(from, floats) : std::vector<uint8_t>(n * hw::dtype_size(from));
    for (size_t i = 0; !from_float && i < n; ++i) put_int(from, src, i, ints[i]);  // wrapped to the source type
    std::vector<hw::Instr> code;
    std::vector<Output> outs;
    for (size_t k = 0; k < std::size(kAllTypes); ++k) {
      code.push_back(sfp(Op::kConvert, kAllTypes[k], kD + k * 0x1000, kX, static_cast<uint64_t>(from), 1, n));
      outs.push_back({static_cast<uint32_t>(kD + k * 0x1000), n * hw::dtype_size(kAllTypes[k])});
    }
    const auto got = on_core({{kX, src}}, code, outs);
    for (size_t k = 0; k < std::size(kAllTypes); ++k) {
      const DType to = kAllTypes[k];
      for (size_t i = 0; i < n; ++i) {
        const double v = from_float ? get(from, src, i) : static_cast<double>(get_int(from, src, i));  // exact
        const std::string what = cat("CONVERT ", hw::dtype_name(from), " -> ", hw::dtype_name(to), " of ", v);
        if (hw::dtype_is_float(to)) {
          // Integers reach f16 and bf16 through fp32, as documented.
          const double want = round_to(to, from_float || to == DType::kF32 ? v : round_to(DType::kF32, v));
          const double g = get(to, got[k], i);
          expect((std::isnan(g) && std::isnan(want)) || (g == want && std::signbit(g) == std::signbit(want)), failures,
                 cat(what, ": want ", want, " got ", g));
        } else {
          const int64_t want = to == DType::kBool ? v != 0
                               : from_float       ? float_to_int(to, v)
                                                  : wrap(to, get_int(from, src, i));
          expect(get_int(to, got[k], i) == want, failures, cat(what, ": want ", want, " got ", get_int(to, got[k], i)));
        }
      }
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("FILL and IOTA convert their values once; TRANSPOSE moves every element size") {
  const std::vector<double> fills = {2.75, -3.75, 0.0, 1 + std::ldexp(1, -8) + std::ldexp(1, -40),
                                     1 + std::ldexp(1, -11) + std::ldexp(1, -40)};
  int failures = 0;
  for (const DType t : kAllTypes) {
    const uint32_t es = hw::dtype_size(t);
    const double start = hw::dtype_is_float(t) ? -1.5 : -4, step = hw::dtype_is_float(t) ? 0.25 : 3;
    std::vector<hw::Instr> code;
    std::vector<Output> outs;
    // FILL's value is a double for float types, an int64 for integer types and bool.
    const auto fill_value = [&](double v) {
      return hw::dtype_is_float(t) ? emit::double_bits(v) : static_cast<uint64_t>(static_cast<int64_t>(std::trunc(v)));
    };
    for (size_t k = 0; k < fills.size(); ++k) {
      code.push_back(sfp(Op::kFill, t, kD + k * 0x100, 0, fill_value(fills[k]), 1, 8));
      outs.push_back({static_cast<uint32_t>(kD + k * 0x100), 8 * es});
    }
    code.push_back(sfp(Op::kIota, t, kE, emit::double_bits(start), emit::double_bits(step), 3, 5));
    outs.push_back({kE, 15 * es});
    const auto got = on_core({}, code, outs);
    const auto want_of = [&](double v) {
      return hw::dtype_is_float(t) ? round_to(t, v)
             : t == DType::kBool   ? v != 0
                                   : static_cast<double>(float_to_int(t, v));
    };
    for (size_t k = 0; k <= fills.size(); ++k) {
      for (uint32_t i = 0; i < (k < fills.size() ? 8 : 15); ++i) {
        const double v = k < fills.size() ? fills[k] : start + i * step;
        expect(get(t, got[k], i) == want_of(v), failures,
               cat(k < fills.size() ? "FILL " : "IOTA ", hw::dtype_name(t), " element ", i, " of ", v, ": want ",
                   want_of(v), " got ", get(t, got[k], i)));
      }
    }
  }
  CHECK(failures == 0);
  for (const DType t : {DType::kF32, DType::kF16, DType::kI8, DType::kI64}) {
    const uint32_t rows = 3, cols = 5;
    std::vector<double> v(rows * cols);
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<double>(k) - 7;
    const auto got = on_core({{kX, pack(t, v)}}, {sfp(Op::kTranspose, t, kD, kX, 0, rows, cols)},
                             {{kD, rows * cols * hw::dtype_size(t)}});
    std::vector<double> want(v.size());
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t c = 0; c < cols; ++c) want[c * rows + r] = v[r * cols + c];
    CAPTURE(std::string(hw::dtype_name(t)));
    CHECK(unpack(t, got[0]) == want);
  }
}

TEST_CASE("TRANSPOSE of every element size and of shapes with whole vector blocks and ragged edges") {
  // The vector paths move 16 x 16 and 8 x 8 blocks of words inside 64 x 64 cache blocks; the rest
  // goes one element at a time. Every element must land where the definition puts it.
  const std::pair<uint64_t, uint64_t> shapes[] = {{1, 1},    {3, 5},     {8, 8},   {16, 16},  {17, 33}, {64, 96},
                                                  {128, 32}, {172, 128}, {40, 70}, {200, 19}, {1, 130}};
  for (const uint32_t es : {1u, 2u, 4u, 8u}) {
    for (const auto& [rows, cols] : shapes) {
      CAPTURE(es);
      CAPTURE(rows);
      CAPTURE(cols);
      std::vector<uint8_t> src(rows * cols * es), dst(src.size(), 0xee);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + i / 7);
      sim::sfp_transpose(es, dst.data(), src.data(), rows, cols);
      uint64_t wrong = 0;
      for (uint64_t r = 0; r < rows; ++r) {
        for (uint64_t c = 0; c < cols; ++c) {
          wrong += std::memcmp(dst.data() + (c * rows + r) * es, src.data() + (r * cols + c) * es, es) != 0;
        }
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("one SFP instruction takes issue + ceil(n / per_cycle) * factor + fill cycles") {
  const sim::ChipConfig& c = h->config.chip;
  const struct {
    Op op;
    uint64_t fn;
    bool transcendental;
  } ops[] = {{Op::kUnary, static_cast<uint64_t>(UnaryFn::kRelu), false},
             {Op::kUnary, static_cast<uint64_t>(UnaryFn::kExp), true},
             {Op::kBinary, static_cast<uint64_t>(BinaryFn::kAdd), false},
             {Op::kBinary, static_cast<uint64_t>(BinaryFn::kDiv), true}};
  for (const DType t : {DType::kF32, DType::kF16}) {
    for (const auto& [rows, cols] : {std::pair{10u, 100u}, std::pair{64u, 64u}, std::pair{1u, 33u}}) {
      for (const auto& o : ops) {
        CAPTURE(std::string(hw::dtype_name(t)));
        CAPTURE(rows * cols);
        CAPTURE(o.fn);
        const hw::Instr in = sfp(o.op, t, kD, o.op == Op::kUnary ? kX : emit::pack2(kX, kY), o.fn, rows, cols);
        const double delta =
            h->run(compiler::assemble("two", {{in, in}}, 0)) - h->run(compiler::assemble("one", {{in}}, 0));
        const uint64_t per_cycle = c.sfp_lanes * 2 / std::max<uint32_t>(hw::dtype_size(t), 2);
        const uint64_t want =
            c.issue_cycles +
            (rows * cols + per_cycle - 1) / per_cycle * (o.transcendental ? c.sfp_transcendental_cycles : 1) +
            c.sfp_fill_cycles;
        CAPTURE(delta);
        CAPTURE(want);
        CHECK(near(delta, want));
      }
    }
  }
  // With the default config written out: an f16 exp of 4096 elements takes 2 + 4096 / 64 * 4 + 8 cycles.
  const hw::Instr exp16 = sfp(Op::kUnary, DType::kF16, kD, kX, static_cast<uint64_t>(UnaryFn::kExp), 64, 64);
  CHECK(near(h->run(compiler::assemble("two", {{exp16, exp16}}, 0)) - h->run(compiler::assemble("one", {{exp16}}, 0)),
             266));
}

extern "C" int sc_main(int argc, char* argv[]) {
  Harness harness;
  h = &harness;
  doctest::Context context(argc, argv);
  return context.run();
}
