// Whole-chip timing against the roofline. Hand-written programs run on every core of a card-sized
// set of modules, and their cycle counts are checked against expectations computed here from the
// public figures in the config (peak multiply-adds of the arrays, LPDDR5 bandwidth), never from the
// model's own timing functions:
// - a compute-bound fp32 GEMM reaches 90 % of the configured peak and lands within 5 % of its
//   roofline time max(flops / peak, bytes / bandwidth);
// - a memory-bound copy stream lands within 5 % of bytes / bandwidth;
// - halving the memory bandwidth doubles the stream and leaves the GEMM within 5 %;
// - halving the channel count at the same total bandwidth leaves the stream alone and speeds up
//   a pattern whose rows all fall on one channel by the ratio of per-channel bandwidths.
// Each check runs on the default config and on one with a 16 x 16 array, 8 cores and twice the
// bandwidth. All chips are elaborated side by side (SystemC elaborates once per process); each
// runs alone.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core.h"
#include "device_memory.h"
#include "fabric.h"
#include "spyre/compiler/emit.h"
#include "spyre/compiler/program.h"
#include "trace.h"

using namespace spyre;
namespace emit = spyre::compiler::emit;
using hw::DType;
using hw::Op;

namespace {

constexpr uint64_t kProgram = 0x10000, kArgs = 0x8000;
constexpr uint64_t kA = 1ull << 30, kB = 4ull << 30, kC = 6ull << 30;  // device regions

/// The cores of one chip with their device memory and fabric; runs one launch at a time.
struct Chip {
  sim::Config config;
  sim::Trace trace{config};
  sim::Fabric fabric{config};
  sim::DeviceMemory memory;
  sim::Clock clock{config.chip.clock_mhz};
  sim::Launch launch{clock.cycles(config.chip.barrier_cycles)};
  std::vector<sim::CoreStats> stats;
  sim::Worker worker{config.sim.async_compute};
  std::vector<std::unique_ptr<sim::Core>> cores;

  Chip(const std::string& name, sim::Config c)
      : config(std::move(c)), memory((name + "_memory").c_str(), config, fabric), stats(config.chip.cores) {
    for (uint32_t i = 0; i < config.chip.cores; ++i) {
      cores.push_back(std::make_unique<sim::Core>((name + "_core" + std::to_string(i)).c_str(), 0, i, config,
                                                  fabric.core_stop(i), trace, stats[i], worker));
      cores[i]->mem.bind(memory.socket);
    }
  }

  /// Runs `p` on cores 0.. with `args`; returns the cycles from the launch to the last core's end.
  double run(const compiler::Program& p, const std::vector<uint64_t>& args) {
    const auto n = static_cast<uint32_t>(__builtin_popcountll(p.core_mask));
    memory.write(kProgram, p.image.data(), p.image.size());
    memory.write(kArgs, args.data(), args.size() * 8);
    std::vector<sim::Core*> ranks;
    for (uint32_t i = 0; i < n; ++i) ranks.push_back(cores[i].get());
    launch.reset(ranks);
    // NOLINTNEXTLINE(performance-unnecessary-copy-initialization): a copy, the time as it is now
    const sc_core::sc_time start = sc_core::sc_time_stamp();
    for (uint32_t i = 0; i < n; ++i)
      cores[i]->start(kProgram, fw::Arguments{kArgs, args.size() * 8, false, {}}, i, &launch);
    sc_core::sc_start();
    for (uint32_t i = 0; i < n; ++i) {
      REQUIRE_FALSE(cores[i]->busy());
      REQUIRE(cores[i]->result().ok());
    }
    return (sc_core::sc_time_stamp() - start).to_seconds() * config.chip.clock_mhz * 1e6;
  }

  // ---- Figures from the config, as a datasheet gives them -----------------------------------
  /// fp32 flops per cycle of the whole chip: cores x corelets x rows x cols x SIMD lanes x 2,
  /// at the configured fp32 fraction of the fp16 rate.
  double peak_fp32() const {
    const sim::ChipConfig& c = config.chip;
    return static_cast<double>(c.cores) * c.corelets_per_core * c.pt_rows * c.pt_cols * c.pt_simd * 2 * c.fp32_rate;
  }
  /// LPDDR5 bytes per cycle (GB/s are bytes per ns).
  double memory_bytes_per_cycle() const { return config.memory.bandwidth_gbps * 1000 / config.chip.clock_mhz; }
};

// ---- Programs -----------------------------------------------------------------------------------

/// C = A @ B in fp32, C stored as bf16. Core r owns rows [r * mt, (r + 1) * mt) of A and C and the
/// whole of B (N = nt columns). K is walked in steps of kb: every core loads its A chunk, rank 0
/// multicasts the B chunk to all cores, both double-buffered a step ahead of the matmul; a barrier
/// per step frees the buffers. A's rows are padded by 256 bytes so that a chunk's rows spread over
/// the channels (with plain interleaving, rows a power-of-two apart would all hit one channel).
struct Gemm {
  uint32_t cores, mt = 128, nt = 1024, kb = 64, k = 0;
  uint64_t lda() const { return k + 64; }
  double flops() const { return 2.0 * cores * mt * nt * k; }
  /// Bytes the program moves: A and B once each, C as bf16.
  double bytes() const { return 4.0 * cores * mt * k + 4.0 * k * nt + 2.0 * cores * mt * nt; }

  compiler::Program program() const {
    constexpr uint32_t kLxC = 0, kLxA = 0x80000, kLxB = 0xa0000, kLxOut = 0x80000;  // out reuses A and B
    const uint32_t a_bytes = mt * kb * 4, b_bytes = kb * nt * 4;
    REQUIRE(uint64_t{kLxB} + 2 * b_bytes <= (2u << 20));
    REQUIRE(kLxA + 2 * a_bytes <= kLxB);
    const uint32_t steps = k / kb;
    std::vector<std::vector<hw::Instr>> code(cores);
    for (uint32_t r = 0; r < cores; ++r) {
      std::vector<hw::Instr>& c = code[r];
      c.push_back(emit::arg(1, 0));  // A
      c.push_back(emit::arg(2, 1));  // B
      c.push_back(emit::arg(3, 2));  // C
      c.push_back(emit::li(4, uint64_t{r} * mt * lda() * 4));
      c.push_back(emit::add(1, 1, 4));  // this core's rows of A
      c.push_back(emit::li(4, uint64_t{r} * mt * nt * 2));
      c.push_back(emit::add(3, 3, 4));  // and of C
      c.push_back(emit::li(7, hw::pack_rank_set(0, 1, cores)));
      const auto load_a = [&](uint32_t s) {
        return emit::dma(Op::kLoad, hw::DType::kF32, 1, 0, kLxA + (s % 2) * a_bytes, uint64_t{s} * kb * 4, lda() * 4,
                         mt, kb * 4, true, s % 2);
      };
      const auto load_b = [&](uint32_t s) {
        return emit::dma(Op::kLoadMulticast, hw::DType::kF32, 2, 7, kLxB + (s % 2) * b_bytes, uint64_t{s} * kb * nt * 4,
                         nt * 4, kb, nt * 4, true, 2 + s % 2);
      };
      c.push_back(load_a(0));
      if (r == 0) c.push_back(load_b(0));
      for (uint32_t s = 0; s < steps; ++s) {
        c.push_back(emit::wait_tags(1u << (s % 2)));
        if (r == 0) c.push_back(emit::wait_tags(1u << (2 + s % 2)));
        c.push_back(emit::instr(Op::kBarrier));  // B(s) is everywhere; every core is done with step s - 1
        if (s + 1 < steps) {
          c.push_back(load_a(s + 1));
          if (r == 0) c.push_back(load_b(s + 1));
        }
        hw::Instr mm = emit::instr(Op::kMatmul);
        mm.dtype = DType::kF32;
        mm.a = kLxC;
        mm.b = emit::pack2(kLxA + (s % 2) * a_bytes, kLxB + (s % 2) * b_bytes);
        mm.c = hw::pack_mkn(mt, kb, nt);
        mm.flags = s > 0 ? hw::kMatmulAccumulate : 0;
        c.push_back(mm);
      }
      c.push_back(emit::sfp(Op::kConvert, DType::kBF16, 0, kLxOut, kLxC, static_cast<uint64_t>(DType::kF32), mt, nt));
      c.push_back(emit::dma(Op::kStore, hw::DType::kF32, 3, 0, kLxOut, 0, nt * 2, mt, nt * 2, false, 0));
    }
    return compiler::assemble("gemm", code, 3);
  }
};

/// Every core copies its `per_core` bytes from A to C in 64 KiB chunks, loads and stores
/// asynchronous and double-buffered: only LPDDR5 should bound it.
struct Stream {
  uint32_t cores;
  uint64_t per_core = 1 << 20;
  static constexpr uint32_t kChunk = 64 * 1024;
  double bytes() const { return 2.0 * cores * per_core; }  // read once, written once

  compiler::Program program() const {
    std::vector<hw::Instr> c = {emit::arg(1, 0),    emit::arg(3, 1),   emit::rank(5), emit::muli(6, 5, per_core),
                                emit::add(1, 1, 6), emit::add(3, 3, 6)};
    const uint32_t chunks = static_cast<uint32_t>(per_core / kChunk);
    const auto load = [&](uint32_t i) {
      return emit::dma(Op::kLoad, hw::DType::kF32, 1, 0, (i % 2) * kChunk, uint64_t{i} * kChunk, kChunk, 1, kChunk,
                       true, i % 2);
    };
    c.push_back(load(0));
    for (uint32_t i = 0; i < chunks; ++i) {
      c.push_back(emit::wait_tags(1u << (i % 2)));
      if (i + 1 < chunks) {
        if (i >= 1) c.push_back(emit::wait_tags(1u << (2 + (i + 1) % 2)));  // its buffer was stored
        c.push_back(load(i + 1));
      }
      c.push_back(emit::dma(Op::kStore, hw::DType::kF32, 3, 0, (i % 2) * kChunk, uint64_t{i} * kChunk, kChunk, 1,
                            kChunk, true, 2 + i % 2));
    }
    c.push_back(emit::wait_tags(0xc));
    return compiler::assemble_spmd("stream", c, cores, 2);
  }
};

/// One core loads `rows` rows of 256 bytes `stride` bytes apart (synchronously, one instruction).
compiler::Program strided(uint32_t rows, uint64_t stride) {
  return compiler::assemble(
      "strided", {{emit::arg(1, 0), emit::dma(Op::kLoad, hw::DType::kF32, 1, 0, 0, 0, stride, rows, 256, false, 0)}},
      1);
}

// ---- The chips ----------------------------------------------------------------------------------

sim::Config base(bool alternative) {
  sim::Config c;
  c.output.trace_instructions = false;
  if (alternative) {  // a bigger array (which needs a wider scratchpad port), fewer cores, more bandwidth
    c.chip.pt_rows = 16;
    c.chip.pt_cols = 16;
    c.chip.lx_read_bytes_per_cycle = 1024;
    c.chip.cores = 8;
    c.memory.bandwidth_gbps = 409.6;
  }
  return c;
}
sim::Config half_bandwidth(sim::Config c) {
  c.memory.bandwidth_gbps /= 2;
  return c;
}
sim::Config half_channels(sim::Config c) {
  c.memory.channels /= 2;
  return c;
}
sim::Config modulo(sim::Config c) {
  c.memory.channel_hash = "modulo";
  return c;
}

struct Chips {
  Chip plain, slow, wide;          // the config, half its bandwidth, half its channels (same bandwidth)
  Chip plain_modulo, wide_modulo;  // with plain interleaving, whose one-channel patterns are easy to write
  explicit Chips(const std::string& name, bool alternative)
      : plain(name, base(alternative)),
        slow(name + "_slow", half_bandwidth(base(alternative))),
        wide(name + "_wide", half_channels(base(alternative))),
        plain_modulo(name + "_modulo", modulo(base(alternative))),
        wide_modulo(name + "_wide_modulo", modulo(half_channels(base(alternative)))) {}
};
std::vector<std::unique_ptr<Chips>>* g_chips = nullptr;

void check_chip(Chips& chips) {
  Chip& chip = chips.plain;
  const uint32_t cores = chip.config.chip.cores;
  CAPTURE(cores);
  CAPTURE(chip.config.chip.pt_rows);
  CAPTURE(chip.config.memory.bandwidth_gbps);

  // The GEMM: compute-bound, at 90 % of peak or more, within 5 % of its roofline.
  Gemm gemm{cores, 128, 1024, 64, 8192};
  const double compute = gemm.flops() / chip.peak_fp32();
  const double memory = gemm.bytes() / chip.memory_bytes_per_cycle();
  REQUIRE(memory < compute / 2);  // compute-bound even at half the bandwidth
  const double roofline = std::max(compute, memory);
  const double gemm_cycles = chip.run(gemm.program(), {kA, kB, kC});
  CAPTURE(compute);
  CAPTURE(memory);
  CAPTURE(gemm_cycles);
  CHECK(gemm.flops() / gemm_cycles >= 0.9 * chip.peak_fp32());
  CHECK(std::fabs(gemm_cycles - roofline) <= 0.05 * roofline);

  // The stream: memory-bound, within 5 % of bytes / bandwidth.
  const Stream stream{cores};
  const double stream_roof = stream.bytes() / chip.memory_bytes_per_cycle();
  const double stream_cycles = chip.run(stream.program(), {kA, kC});
  CAPTURE(stream_roof);
  CAPTURE(stream_cycles);
  CHECK(stream_cycles >= stream_roof);
  CHECK(stream_cycles <= 1.05 * stream_roof);

  // Half the bandwidth: the stream takes twice as long, the GEMM the same.
  const double slow_stream = chips.slow.run(stream.program(), {kA, kC});
  const double slow_gemm = chips.slow.run(gemm.program(), {kA, kB, kC});
  CAPTURE(slow_stream);
  CAPTURE(slow_gemm);
  CHECK(slow_stream / stream_cycles >= 1.95);
  CHECK(slow_stream / stream_cycles <= 2.05);
  CHECK(std::fabs(slow_gemm - gemm_cycles) <= 0.05 * gemm_cycles);

  // Half the channels, each twice as fast: a stream over all of them does not notice. With plain
  // interleaving, rows that all fall on one channel (4 KiB apart: 16 granules of 256 bytes, a
  // multiple of 16 and of 8 channels) move at one channel's bandwidth, now twice as high.
  const double wide_stream = chips.wide.run(stream.program(), {kA, kC});
  CAPTURE(wide_stream);
  CHECK(std::fabs(wide_stream - stream_cycles) <= 0.02 * stream_cycles);
  const uint32_t rows = 4096;
  const double one_channel = chips.plain_modulo.run(strided(rows, 4096), {kA});
  const double one_wide_channel = chips.wide_modulo.run(strided(rows, 4096), {kA});
  const double per_channel = chip.memory_bytes_per_cycle() / chip.config.memory.channels;
  CAPTURE(one_channel);
  CAPTURE(one_wide_channel);
  CHECK(one_channel >= rows * 256.0 / per_channel);
  CHECK(one_channel <= 1.05 * rows * 256.0 / per_channel);
  CHECK(one_channel / one_wide_channel >= 1.9);
  CHECK(one_channel / one_wide_channel <= 2.1);
  // Rows 17 granules apart cover every channel: unchanged.
  const double spread = chips.plain_modulo.run(strided(rows, 256 * 17), {kA});
  const double spread_wide = chips.wide_modulo.run(strided(rows, 256 * 17), {kA});
  CAPTURE(spread);
  CAPTURE(spread_wide);
  CHECK(std::fabs(spread - spread_wide) <= 0.05 * spread);
  // The default hashed interleaving spreads the 4 KiB-strided rows over every channel too.
  const double hashed = chip.run(strided(rows, 4096), {kA});
  const double hashed_wide = chips.wide.run(strided(rows, 4096), {kA});
  CAPTURE(hashed);
  CHECK(hashed <= 1.1 * spread);
  CHECK(std::fabs(hashed - hashed_wide) <= 0.05 * hashed);
}

}  // namespace

TEST_CASE("default config: GEMM and stream on their rooflines, bandwidth and channel sensitivity") {
  check_chip(*(*g_chips)[0]);
}

TEST_CASE("16 x 16 arrays, 8 cores, 409.6 GB/s: GEMM and stream on their rooflines, bandwidth and channels") {
  check_chip(*(*g_chips)[1]);
}

extern "C" int sc_main(int argc, char* argv[]) {
  std::vector<std::unique_ptr<Chips>> chips;
  chips.push_back(std::make_unique<Chips>("default", false));
  chips.push_back(std::make_unique<Chips>("alt", true));
  g_chips = &chips;
  sc_core::sc_start(sc_core::SC_ZERO_TIME);
  doctest::Context context(argc, argv);
  return context.run();
}
