// What the AI-core testbenches share: four modelled cores on one device memory and ring, a way
// to run a few instructions on core 0 with data entering and leaving the scratchpad only by DMA,
// number formats encoded and decoded here from IEEE 754 (independent of the model's conversions),
// ulp comparisons, and helpers for the instructions the testbenches build.
//
// Each program that includes this defines DOCTEST_CONFIG_IMPLEMENT before it, and an sc_main that
// builds one Harness and points `h` at it (SystemC elaborates once per process).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core.h"
#include "device_memory.h"
#include "sfp.h"
#include "spyre/compiler/emit.h"
#include "spyre/compiler/program.h"
#include "trace.h"

namespace spyre::tb {

namespace emit = spyre::compiler::emit;

inline constexpr uint32_t kCores = 4;
// Device memory: the program image, its argument block, and the input and output areas that
// arguments 0 and 1 of on_core's programs point at.
inline constexpr uint64_t kProgram = 0x10000, kArgs = 0x8000, kIn = 0x100000, kOut = 0x800000;
// Scratchpad regions for operands and results.
inline constexpr uint32_t kX = 0x0, kY = 0x10000, kZ = 0x20000, kD = 0x40000, kE = 0x80000, kIdx = 0x100000;
inline constexpr hw::DType kAllTypes[] = {hw::DType::kF32, hw::DType::kF16,  hw::DType::kBF16, hw::DType::kI32,
                                          hw::DType::kI8,  hw::DType::kBool, hw::DType::kI64};
inline constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

/// The arguments streamed into one string, doubles with all their digits.
template <typename... A>
std::string cat(const A&... a) {
  std::ostringstream s;
  s << std::setprecision(17);
  (s << ... << a);
  return s.str();
}

// ---- Number formats, from IEEE 754 ---------------------------------------------------------

struct Format {
  int p, emin, emax;  // significand bits, exponents of the smallest normal and of the largest value
};
inline Format format(hw::DType t) {
  return t == hw::DType::kF16    ? Format{11, -14, 15}
         : t == hw::DType::kBF16 ? Format{8, -126, 127}
                                 : Format{24, -126, 127};
}
/// The spacing of the values of float type t around finite x.
inline double ulp(hw::DType t, double x) {
  int e = 0;
  std::frexp(x, &e);
  return std::ldexp(1.0, std::max(e - 1, format(t).emin) - (format(t).p - 1));
}
/// x rounded once to float type t: to nearest, ties to even.
inline double round_to(hw::DType t, double x) {
  if (!std::isfinite(x) || x == 0) return x;
  const double r = std::nearbyint(x / ulp(t, x)) * ulp(t, x);
  const double max = std::ldexp(2.0 - std::ldexp(1.0, 1 - format(t).p), format(t).emax);
  return std::fabs(r) > max ? std::copysign(kInf, x) : r;
}
/// Two's complement truncation to an integer type's width (bool: nonzero is 1).
inline int64_t wrap(hw::DType t, int64_t v) {
  return t == hw::DType::kI32    ? int64_t{static_cast<int32_t>(v)}
         : t == hw::DType::kI8   ? int64_t{static_cast<int8_t>(v)}
         : t == hw::DType::kBool ? int64_t{v != 0}
                                 : v;
}
/// A float to an integer type as CPU torch converts on x86: truncated toward zero; past the range
/// of a 32-bit (int8, int32) or 64-bit (int64) conversion, and NaN, the most negative value of
/// that width; int8 takes the low byte of the 32-bit result.
inline int64_t float_to_int(hw::DType t, double v) {
  if (t == hw::DType::kI64) {
    return v >= -9.2233720368547758e18 && v < 9.2233720368547758e18 ? static_cast<int64_t>(v) : INT64_MIN;
  }
  const int32_t w = v > -2147483649.0 && v < 2147483648.0 ? static_cast<int32_t>(v) : INT32_MIN;
  return t == hw::DType::kI8 ? int64_t{static_cast<int8_t>(w)} : int64_t{w};
}

/// The f16 encoding of v, which must already be an f16 value.
inline uint16_t f16_bits(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (std::isnan(v)) return 0x7e00;
  if (std::isinf(v)) return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::ldexp(a, 24));  // subnormal
  int e = 0;
  std::frexp(a, &e);
  return sign | static_cast<uint16_t>((e + 14) << 10) | static_cast<uint16_t>(std::ldexp(a, 11 - e) - 1024);
}
inline double f16_value(uint16_t h) {
  const int e = h >> 10 & 31, m = h & 1023;
  const double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? kNan : kInf) : std::ldexp(1024 + m, e - 25);
  return h & 0x8000 ? -v : v;
}

/// Writes integer v, wrapped to type t, as element i of b.
inline void put_int(hw::DType t, std::vector<uint8_t>& b, size_t i, int64_t v) {
  const int64_t w = wrap(t, v);
  std::memcpy(b.data() + i * hw::dtype_size(t), &w, hw::dtype_size(t));  // little-endian: the low bytes
}
/// Writes v, a value of type t, as element i of b.
inline void put(hw::DType t, std::vector<uint8_t>& b, size_t i, double v) {
  uint8_t* p = b.data() + i * hw::dtype_size(t);
  const float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t half = t == hw::DType::kF16 ? f16_bits(v) : static_cast<uint16_t>(u >> 16);
  if (t == hw::DType::kF32) {
    std::memcpy(p, &f, 4);
  } else if (t == hw::DType::kF16 || t == hw::DType::kBF16) {
    std::memcpy(p, &half, 2);
  } else {
    put_int(t, b, i, t == hw::DType::kBool ? v != 0 : static_cast<int64_t>(v));
  }
}
inline int64_t get_int(hw::DType t, const std::vector<uint8_t>& b, size_t i) {
  const uint8_t* p = b.data() + i * hw::dtype_size(t);
  int64_t v = 0;
  std::memcpy(&v, p, hw::dtype_size(t));
  return t == hw::DType::kI32 ? static_cast<int32_t>(v) : t == hw::DType::kI8 ? static_cast<int8_t>(v) : v;
}
/// Element i of b, a vector of type t, as a double (exact for every type but large i64).
inline double get(hw::DType t, const std::vector<uint8_t>& b, size_t i) {
  const uint8_t* p = b.data() + i * hw::dtype_size(t);
  uint32_t u = 0;
  std::memcpy(&u, p, hw::dtype_is_float(t) ? hw::dtype_size(t) : 0);
  float f;
  const uint32_t bits = t == hw::DType::kBF16 ? u << 16 : u;
  std::memcpy(&f, &bits, 4);
  return t == hw::DType::kF16    ? f16_value(static_cast<uint16_t>(u))
         : hw::dtype_is_float(t) ? double{f}
                                 : static_cast<double>(get_int(t, b, i));
}
/// Values as type t holds them: floats rounded once, integers truncated toward zero and wrapped.
inline std::vector<uint8_t> pack(hw::DType t, const std::vector<double>& v) {
  std::vector<uint8_t> b(v.size() * hw::dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) put(t, b, i, hw::dtype_is_float(t) ? round_to(t, v[i]) : v[i]);
  return b;
}
inline std::vector<double> unpack(hw::DType t, const std::vector<uint8_t>& b) {
  std::vector<double> v(b.size() / hw::dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = get(t, b, i);
  return v;
}
/// Whether got equals want rounded to t, within `ulps` units in the last place; NaN matches NaN.
inline bool close(hw::DType t, double got, double want, double ulps = 0) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (hw::dtype_is_float(t)) want = round_to(t, want);
  if (std::isinf(got) || std::isinf(want) || !hw::dtype_is_float(t)) return got == want;
  return std::fabs(got - want) <= ulps * ulp(t, want);
}
/// Durations in cycles that agree within `slack` cycles: each instruction more in a program costs
/// about 0.23 cycles of LPDDR5 bandwidth when the core fetches it.
inline bool near(double a, double b, double slack = 1) {
  return std::fabs(a - b) <= slack;
}
/// Records a failed element with its inputs; only the first few of a test case are printed.
inline void expect(bool ok, int& failures, const std::string& what) {
  if (!ok && ++failures <= 6) FAIL_CHECK(what);
}

// ---- The cores ------------------------------------------------------------------------------

/// kCores cores of card 0 with the default config, bound to one device memory and ring.
struct Harness {
  sim::Config config = [] {
    sim::Config c;
    c.output.trace_instructions = false;
    c.chip.fp16_format = "ieee";  // the f16 goldens are IEEE half; tb_sfp checks DLFloat16 itself
    sim::set_fp16_dlfloat(false);
    return c;
  }();
  sim::Trace trace{config};
  sim::Fabric fabric{config};
  sim::DeviceMemory memory{"memory", config, fabric};
  sim::Clock clock{config.chip.clock_mhz};
  sim::Launch launch{clock.cycles(config.chip.barrier_cycles)};
  sim::CoreStats stats[kCores];
  sim::Worker worker{config.sim.async_compute};
  std::vector<std::unique_ptr<sim::Core>> cores;
  sc_core::sc_time start, done[kCores];  // when the last launch started and each core stopped

  Harness() {
    for (uint32_t i = 0; i < kCores; ++i) {
      cores.push_back(std::make_unique<sim::Core>(("core" + std::to_string(i)).c_str(), 0, i, config,
                                                  fabric.core_stop(i), trace, stats[i], worker));
      cores[i]->mem.bind(memory.socket);
      sc_core::sc_spawn([this, i] {
        for (;;) {
          sc_core::wait(cores[i]->done_event());
          done[i] = sc_core::sc_time_stamp();
        }
      });
    }
    sc_core::sc_start(sc_core::SC_ZERO_TIME);
  }

  /// Cycles from when core i's program had arrived (its first instruction issued) until it
  /// stopped, in the last launch (fractional: no rounding). Instruction timing without the fetch,
  /// whose cost varies with the program's length (see fetched()).
  double stopped(uint32_t i) const { return cycles(done[i] - cores[i]->code_ready()); }
  /// Cycles from the start of the last launch until core i's program had arrived.
  double fetched(uint32_t i) const { return cycles(cores[i]->code_ready() - start); }
  double cycles(const sc_core::sc_time& t) const { return t.to_seconds() * config.chip.clock_mhz * 1e6; }

  /// Launches `p` on cores 0.. (rank = core) with `args`; returns the largest stopped(i).
  double run(const compiler::Program& p, std::vector<uint64_t> args = {kIn, kOut}) {
    const auto n = static_cast<uint32_t>(__builtin_popcountll(p.core_mask));
    memory.write(kProgram, p.image.data(), p.image.size());
    if (!args.empty()) memory.write(kArgs, args.data(), args.size() * 8);
    start = sc_core::sc_time_stamp();
    std::vector<sim::Core*> ranks;
    for (uint32_t i = 0; i < n; ++i) ranks.push_back(cores[i].get());
    launch.reset(ranks);
    for (uint32_t i = 0; i < n; ++i)
      cores[i]->start(kProgram, fw::Arguments{kArgs, args.size() * 8, false, {}}, i, &launch);
    sc_core::sc_start();
    double end = 0;
    for (uint32_t i = 0; i < n; ++i) {
      REQUIRE_FALSE(cores[i]->busy());
      end = std::max(end, stopped(i));
    }
    return end;
  }
};
/// The harness of the running program, set by its sc_main.
inline Harness* h = nullptr;

struct Input {
  uint32_t lx;
  std::vector<uint8_t> bytes;
};
struct Output {
  uint32_t lx;
  uint64_t bytes;
};

/// Runs `code` on core 0 after loading each input into the scratchpad (outputs are first filled
/// with 0xa5 so that stale data cannot pass); returns the bytes of each output afterwards. The
/// code finds the device input area in r1 and the output area in r2; a fault fails the check.
inline std::vector<std::vector<uint8_t>> on_core(std::vector<Input> inputs, const std::vector<hw::Instr>& code,
                                                 const std::vector<Output>& outputs) {
  std::vector<hw::Instr> prog{emit::arg(1, 0), emit::arg(2, 1)};
  for (const Output& o : outputs) inputs.insert(inputs.begin(), Input{o.lx, std::vector<uint8_t>(o.bytes, 0xa5)});
  uint64_t at = 0;
  for (const Input& in : inputs) {
    const auto n = static_cast<uint32_t>(in.bytes.size());
    h->memory.write(kIn + at, in.bytes.data(), n);
    prog.push_back(emit::dma(hw::Op::kLoad, hw::DType::kF32, 1, 0, in.lx, at, 0, 1, n, false, 0));
    at += (n + 63) / 64 * 64;
  }
  prog.insert(prog.end(), code.begin(), code.end());
  at = 0;
  for (const Output& o : outputs) {
    prog.push_back(
        emit::dma(hw::Op::kStore, hw::DType::kF32, 2, 0, o.lx, at, 0, 1, static_cast<uint32_t>(o.bytes), false, 0));
    at += (o.bytes + 63) / 64 * 64;
  }
  h->run(compiler::assemble("on_core", {prog}, 2));
  CHECK_MESSAGE(h->cores[0]->result().ok(), "core fault at instruction ", h->cores[0]->result().detail & 0xffffff);
  std::vector<std::vector<uint8_t>> result;
  at = 0;
  for (const Output& o : outputs) {
    result.emplace_back(o.bytes);
    h->memory.read(kOut + at, result.back().data(), o.bytes);
    at += (o.bytes + 63) / 64 * 64;
  }
  return result;
}

// ---- Instructions ---------------------------------------------------------------------------

/// An SFP instruction on a rows x cols block at plain scratchpad addresses (rl = r0).
inline hw::Instr sfp(hw::Op op, hw::DType t, uint32_t dst, uint64_t b, uint64_t c, uint32_t rows, uint32_t cols,
                     uint8_t flags = 0) {
  return emit::sfp(op, t, 0, dst, b, c, rows, cols, flags);
}
/// An f32 immediate in the high word of an SFP field.
inline uint64_t f32_imm(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint64_t{u} << 32;
}
/// 0, 1, 2, ... 4095 as i32 at kIdx, for store_reg.
inline hw::Instr iota_index() {
  return sfp(hw::Op::kIota, hw::DType::kI32, kIdx, emit::double_bits(0), emit::double_bits(1), 1, 4096);
}
/// Stores r[reg] (0 .. 4095) as a u32 at device r[base] + offset: the scratchpad holds 0, 1, 2, ...
/// as i32 at kIdx (see iota_index), and r[reg] * 4 picks the element. Uses r15.
inline void store_reg(std::vector<hw::Instr>& code, uint32_t reg, uint32_t base, uint64_t offset) {
  code.push_back(emit::muli(15, reg, 4));
  code.push_back(emit::dma(hw::Op::kStore, hw::DType::kI32, base, 15, kIdx, offset, 0, 1, 4, false, 0));
}
/// 4096 f32 exponentials: 2 + 4096 / 32 * 4 + 8 = 522 cycles with the default config.
inline hw::Instr exp_block() {
  return sfp(hw::Op::kUnary, hw::DType::kF32, kD, kX, static_cast<uint64_t>(hw::UnaryFn::kExp), 64, 64);
}

}  // namespace spyre::tb
