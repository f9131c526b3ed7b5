// Testbench of one AI core: tile-ISA programs from device memory, PT-array matmul results against
// a naive golden model, and instruction latencies against the analytical timing model.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core.h"
#include "device_memory.h"
#include "spyre/compiler/program.h"
#include "trace.h"

using namespace spyre;
using namespace spyre::sim;

namespace {

constexpr uint64_t kProgram = 0x10000, kArgs = 0x8000, kA = 0x100000, kB = 0x800000, kC = 0x1000000;

struct Harness {
  Config config;
  Trace trace{config};
  DeviceMemory memory{"memory", config};
  Ring ring = make_ring(config);
  CoreStats stats;
  Worker worker{config.sim.async_compute};
  Core core{"core0", 0, 0, config, ring, trace, stats, worker};
  Launch launch{sc_core::SC_ZERO_TIME};
  Harness() {
    core.mem.bind(memory.socket);
    sc_core::sc_start(sc_core::SC_ZERO_TIME);  // elaborate; the core now waits for a start
  }

  // Loads `p`, runs it as rank 0 until the core stops, returns the cycles it took.
  uint64_t run(const compiler::Program& p, std::vector<uint64_t> args = {kA, kB, kC}) {
    memory.write(kProgram, p.image.data(), p.image.size());
    args.resize(hw::kMaxLaunchArgs, 0);
    memory.write(kArgs, args.data(), args.size() * 8);
    const Clock clock(config.chip.clock_mhz);
    const uint64_t start = clock.now_cycles();
    launch.reset({&core});
    core.start(kProgram, kArgs, args.size() * 8, 0, &launch);
    sc_core::sc_start();  // until the core is idle again
    REQUIRE_FALSE(core.busy());
    return clock.now_cycles() - start;
  }
};
Harness* h = nullptr;

// A load from the address in register `reg` (set by an ARG instruction).
hw::Instr load(uint8_t reg, uint32_t lx, uint32_t rows, uint32_t row_bytes) {
  hw::Instr i{};
  i.op = hw::Op::kLoad;
  i.regs = hw::pack_regs(reg, 0);
  i.a = lx;
  i.c = row_bytes;
  i.d = rows;
  i.e = row_bytes;
  return i;
}

hw::Instr arg(uint32_t reg, uint32_t slot) {
  hw::Instr i{};
  i.op = hw::Op::kArg;
  i.a = reg;
  i.b = slot;
  return i;
}

hw::Instr matmul(uint32_t m, uint32_t k, uint32_t n, hw::DType t) {
  hw::Instr i{};
  i.op = hw::Op::kMatmul;
  i.dtype = t;
  i.a = 1 << 20;  // C
  i.b = 0 | uint64_t{512 << 10} << 32;
  i.c = hw::pack_mkn(m, k, n);
  return i;
}

// The PT timing model restated independently: rows over the 8 PT rows, columns over 8 PT columns
// x 2 corelets, K over 8 SIMD lanes; fp32 at a quarter of the fp16 rate; 24 cycles fill.
uint64_t expected_matmul_cycles(uint64_t m, uint64_t k, uint64_t n, hw::DType t) {
  auto up = [](uint64_t v, uint64_t q) { return (v + q - 1) / q * q; };
  const double per_cycle = 8 * 8 * 8 * 2 * (t == hw::DType::kF32 ? 0.25 : 1.0);
  return static_cast<uint64_t>(std::ceil(up(m, 8) * up(n, 16) * up(k, 8) / per_cycle)) + 24;
}

}  // namespace

TEST_CASE("a compiled matmul program matches the golden model") {
  const uint32_t m = 150, k = 300, n = 140;  // edge tiles in every dimension
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> a(m * k), b(k * n), c(m * n, -99.f), golden(m * n, 0.f);
  for (auto& x : a) x = dist(rng);
  for (auto& x : b) x = dist(rng);
  for (uint32_t i = 0; i < m; ++i)
    for (uint32_t p = 0; p < k; ++p)
      for (uint32_t j = 0; j < n; ++j) golden[i * n + j] += a[i * k + p] * b[p * n + j];
  h->memory.write(kA, a.data(), a.size() * 4);
  h->memory.write(kB, b.data(), b.size() * 4);
  const compiler::Program p = compiler::compile_matmul({m, k, n, hw::DType::kF32, hw::DType::kF32, k, n, n},
                                                       compiler::Target{1, h->config.chip.lx_bytes});
  h->run(p);
  CHECK(h->core.result().ok());
  h->memory.read(kC, c.data(), c.size() * 4);
  int bad = 0;
  for (uint32_t i = 0; i < m * n; ++i) bad += std::fabs(c[i] - golden[i]) > 1e-4f * (1 + std::fabs(golden[i]));
  CHECK(bad == 0);
  CHECK(h->stats.flops >= 2ull * m * k * n);
}

TEST_CASE("one PT matmul instruction takes the analytical number of cycles") {
  for (const hw::DType t : {hw::DType::kF32, hw::DType::kF16}) {
    for (const auto& [m, k, n] : {std::tuple{128u, 256u, 128u}, std::tuple{5u, 7u, 9u}, std::tuple{64u, 64u, 200u}}) {
      CAPTURE(static_cast<int>(t));
      CAPTURE(m);
      // The same program with and without one more matmul: the difference is that instruction.
      const auto one = compiler::assemble("one", {{matmul(m, k, n, t)}}, 0);
      const auto two = compiler::assemble("two", {{matmul(m, k, n, t), matmul(m, k, n, t)}}, 0);
      const uint64_t delta = h->run(two) - h->run(one);
      const uint64_t want = expected_matmul_cycles(m, k, n, t) + h->config.chip.issue_cycles;
      CHECK(delta >= want - 1);  // picosecond rounding of the 1.5 GHz period
      CHECK(delta <= want + 1);
    }
  }
}

TEST_CASE("a load is bound by the slower of the ring and LPDDR5") {
  // 1 MiB: the ring moves 128 B/cycle = 192 GB/s, LPDDR5 204.8 GB/s, so the ring bounds it:
  // 8192 cycles + 16 cycles of ring latency + 2 issue cycles.
  const auto empty = compiler::assemble("empty", {{arg(1, 0)}}, 1);
  const auto big = compiler::assemble("load", {{arg(1, 0), load(1, 0, 512, 2048)}}, 1);
  const uint64_t delta = h->run(big) - h->run(empty);
  CHECK(delta >= 8192 + 16 + 2 - 2);
  CHECK(delta <= 8192 + 16 + 2 + 2);
}

TEST_CASE("an illegal scratchpad access faults with the core and program counter") {
  const auto bad = compiler::assemble("bad", {{arg(1, 0), load(1, 0, 1, 64), load(1, 2u << 20, 1, 64)}}, 1);
  h->run(bad);
  const fw::Verdict v = h->core.result();
  CHECK(v.error == hw::ErrorCode::kCoreFault);
  CHECK((v.detail >> 24) == 0);
  CHECK((v.detail & 0xffffff) == 2);
}

// The worker that runs the cores' arithmetic beside the SystemC thread (sim/src/worker.h).
TEST_CASE("a worker lane runs its tasks in order, and a waiter runs them itself when the worker is busy") {
  Worker w(true);
  const uint32_t busy = w.lane(), lane = w.lane();
  std::atomic<bool> release{false};
  std::vector<int> order;
  w.post(busy, [&] {
    while (!release.load()) std::this_thread::yield();  // holds the worker thread
  });
  for (int i = 1; i <= 3; ++i) w.post(lane, [&order, i] { order.push_back(i); });
  w.wait(lane, 3);  // the worker is stuck in the other lane: this thread runs all three
  CHECK(order == std::vector<int>{1, 2, 3});
  CHECK_FALSE(release.load());
  release = true;
  w.wait(busy, 1);
}

TEST_CASE("a device-memory write waits for the deferred loads that read it, and only for those") {
  Worker w(true);
  const uint32_t lane = w.lane();
  std::atomic<bool> release{false}, loaded{false};
  w.post(lane, [&] {
    while (!release.load()) std::this_thread::yield();  // the worker is behind on this lane
  });
  const uint64_t load = w.post(lane, [&] { loaded = true; });  // a LOAD of [0x100, 0x200)
  w.note_device_read(lane, load, 0x100, 0x200);
  w.settle_device_write(0x200, 0x300);  // after the range: no wait
  w.settle_device_write(0x0, 0x100);    // before it: no wait
  CHECK_FALSE(loaded.load());
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release = true;
  });
  w.settle_device_write(0x1ff, 0x201);  // overlaps its last byte: waits until the load has run
  CHECK(loaded.load());
  releaser.join();
}

extern "C" int sc_main(int argc, char* argv[]) {
  Harness harness;
  h = &harness;
  doctest::Context context(argc, argv);
  return context.run();
}
