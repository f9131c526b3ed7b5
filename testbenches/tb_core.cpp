// Testbench of one AI core: tile-ISA programs from device memory, PT-array matmul results against
// a naive golden model, and instruction latencies against the analytical timing model.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <array>
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
#include "spyre/hw/commands.h"
#include "tile_math.h"
#include "trace.h"

using namespace spyre;
using namespace spyre::sim;

namespace {

constexpr uint64_t kProgram = 0x10000, kArgs = 0x8000, kA = 0x100000, kB = 0x800000, kC = 0x1000000;

struct Harness {
  Config config;
  Trace trace{config};
  Fabric fabric{config};
  DeviceMemory memory{"memory", config, fabric};
  CoreStats stats;
  Worker worker{config.sim.async_compute};
  Core core{"core0", 0, 0, config, fabric.core_stop(0), trace, stats, worker};
  Launch launch{sc_core::SC_ZERO_TIME};
  Harness() {
    core.mem.bind(memory.socket);
    sc_core::sc_start(sc_core::SC_ZERO_TIME);  // elaborate; the core now waits for a start
  }

  // Loads `p`, runs it as rank 0 until the core stops, returns the cycles it ran after its code arrived.
  uint64_t run(const compiler::Program& p, std::vector<uint64_t> args = {kA, kB, kC}) {
    memory.write(kProgram, p.image.data(), p.image.size());
    args.resize(hw::kMaxLaunchArgs, 0);
    memory.write(kArgs, args.data(), args.size() * 8);
    const Clock clock(config.chip.clock_mhz);
    launch.reset({&core});
    core.start(kProgram, fw::Arguments{kArgs, args.size() * 8, false, {}}, 0, &launch);
    sc_core::sc_start();  // until the core is idle again
    REQUIRE_FALSE(core.busy());
    return clock.now_cycles() - clock.to_cycles(core.code_ready());  // without the program fetch
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

// One instruction's cost: the same program with and without one more matmul.
uint64_t matmul_delta(uint32_t m, uint32_t k, uint32_t n, hw::DType t);

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

TEST_CASE("a MATMUL sums each element's products by fused multiply-adds in k order: the same bits for every shape") {
  // The reference: one element at a time, std::fma in k order from +0, then added to C under
  // accumulate. The shapes cover whole register blocks, partial ones and narrow remainders in M and N.
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0, 1);
  for (const hw::DType t : {hw::DType::kF32, hw::DType::kBF16}) {
    for (const auto& [m, k, n] : std::vector<std::array<uint32_t, 3>>{
             {1, 1, 1}, {8, 128, 128}, {13, 37, 53}, {160, 128, 128}, {9, 5, 47}, {6, 300, 16}, {17, 64, 33}}) {
      for (const bool accumulate : {false, true}) {
        CAPTURE(static_cast<int>(t));
        CAPTURE(m);
        CAPTURE(k);
        CAPTURE(n);
        CAPTURE(accumulate);
        std::vector<float> a(size_t{m} * k), b(size_t{k} * n), c(size_t{m} * n), want(size_t{m} * n);
        for (auto& x : a) x = dist(rng);
        for (auto& x : b) x = dist(rng);
        for (auto& x : c) x = 100 * dist(rng);
        std::vector<uint16_t> a16(a.size()), b16(b.size());  // bf16: the top half of the float
        const auto to_bf16 = [](std::vector<float>& v, std::vector<uint16_t>& out) {
          for (size_t i = 0; i < v.size(); ++i) {
            uint32_t bits = 0;
            std::memcpy(&bits, &v[i], 4);
            out[i] = static_cast<uint16_t>(bits >> 16);
            bits &= 0xffff0000u;
            std::memcpy(&v[i], &bits, 4);  // the value the bf16 input holds
          }
        };
        if (t == hw::DType::kBF16) {
          to_bf16(a, a16);
          to_bf16(b, b16);
        }
        for (uint32_t i = 0; i < m; ++i) {
          for (uint32_t j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (uint32_t p = 0; p < k; ++p) acc = std::fma(a[size_t{i} * k + p], b[size_t{p} * n + j], acc);
            want[size_t{i} * n + j] = accumulate ? c[size_t{i} * n + j] + acc : acc;
          }
        }
        const void* pa = t == hw::DType::kF32 ? static_cast<const void*>(a.data()) : a16.data();
        const void* pb = t == hw::DType::kF32 ? static_cast<const void*>(b.data()) : b16.data();
        tile_matmul(c.data(), pa, pb, m, k, n, t, accumulate);
        CHECK(std::memcmp(c.data(), want.data(), c.size() * 4) == 0);
      }
    }
  }
}

TEST_CASE("a PT matmul instruction runs at the array's peak on full tiles and pays whole tiles for partial ones") {
  // The public array: 2 corelets of 8 x 8 PEs, each 8 fp16 FMAs per cycle: 1024 multiply-adds per
  // cycle per core. fp32 runs at chip.fp32_rate of that.
  const double macs_per_cycle = 2 * 8 * 8 * 8;
  for (const hw::DType t : {hw::DType::kF16, hw::DType::kF32}) {
    CAPTURE(static_cast<int>(t));
    const double rate = t == hw::DType::kF32 ? h->config.chip.fp32_rate : 1.0;
    const uint64_t big = matmul_delta(128, 1024, 128, t);
    const double ideal = 128.0 * 1024 * 128 / (macs_per_cycle * rate);
    CAPTURE(big);
    CHECK(big >= ideal);
    CHECK(big <= ideal * 1.02 + 64);  // a fixed fill and drain of a few dozen cycles at most
    // Twice the K: twice the work, the same fixed cost.
    const uint64_t twice = matmul_delta(128, 2048, 128, t);
    CHECK(twice - big >= ideal * 0.99);
    CHECK(twice - big <= ideal * 1.01);
    // A 5 x 7 x 9 tile costs what the 8 x 8 x 16 tile that holds it costs: padding is work.
    CHECK(matmul_delta(5, 7, 9, t) == matmul_delta(8, 8, 16, t));
    CHECK(matmul_delta(9, 8, 16, t) > matmul_delta(8, 8, 16, t));
  }
}

TEST_CASE("the PT arrays run beside the SFP, and what reads or overwrites a MATMUL's operands waits for it") {
  // A 128 x 1024 x 128 fp16 MATMUL (A at 0, B at 512 KiB, C at 1 MiB) and an exp of 64 x 128 fp32
  // elements, about a tenth of its time. The programs end when their last MATMUL has.
  const auto exp = [](uint32_t dst, uint32_t src) {
    hw::Instr i{};
    i.op = hw::Op::kUnary;
    i.dtype = hw::DType::kF32;
    i.a = dst;
    i.b = src;
    i.c = static_cast<uint64_t>(hw::UnaryFn::kExp);
    i.d = 64;
    i.e = 128;
    return i;
  };
  const hw::Instr mm = matmul(128, 1024, 128, hw::DType::kF16);
  const uint32_t apart = 3u << 19, a = 0, c = 1u << 20;  // 1.5 MiB: touches none of the operands
  const auto time = [&](const std::vector<hw::Instr>& code) { return h->run(compiler::assemble("p", {code}, 0)); };
  const uint64_t m = time({mm}), e = time({exp(apart, apart)});
  CAPTURE(m);
  CAPTURE(e);
  REQUIRE(e * 4 < m);
  const uint64_t issue = h->config.chip.issue_cycles;
  // Independent: the exp runs while the array computes.
  CHECK(time({mm, exp(apart, apart)}) == std::max(m, issue + e));
  // Reading C, overwriting A: the exp waits for the product. Reading A does not.
  CHECK(time({mm, exp(apart, c)}) == m + e);
  CHECK(time({mm, exp(a, apart)}) == m + e);
  CHECK(time({mm, exp(apart, a)}) == std::max(m, issue + e));
  // Two MATMULs queue on the array; a third waits for room (chip.pt_queue_depth 2), then the exp
  // runs beside the last two.
  CHECK(time({mm, mm, mm, exp(apart, apart)}) == 3 * (m - issue) + issue);
  const uint64_t third = time({mm, mm, mm, exp(apart, apart), exp(apart, apart)});
  CHECK(third == 3 * (m - issue) + issue);
  // Without a queue every MATMUL holds the core until it is done.
  h->config.chip.pt_queue_depth = 0;
  CHECK(time({mm, exp(apart, apart)}) == m + e);
  h->config.chip.pt_queue_depth = Config{}.chip.pt_queue_depth;
}

TEST_CASE("a load is bound by the slower of the ring and LPDDR5") {
  // 1 MiB spread over the 16 channels: 5120 ns at 204.8 GB/s = 7680 cycles, + 120 ns = 180 cycles
  // of LPDDR5 latency + 2 issue cycles. The ring brings it into the core from both sides, 2 x 128
  // B/cycle, so LPDDR5 bounds it; the farthest memory controller is at most half the 37 stops away.
  const auto empty = compiler::assemble("empty", {{arg(1, 0)}}, 1);
  const auto big = compiler::assemble("load", {{arg(1, 0), load(1, 0, 512, 2048)}}, 1);
  const uint64_t delta = h->run(big) - h->run(empty);
  CHECK(delta >= 7680 + 180 + 2 - 1);
  CHECK(delta <= 7680 + 180 + 2 + 18 + 1);
}

TEST_CASE("an illegal scratchpad access faults with the core and program counter") {
  const auto bad = compiler::assemble("bad", {{arg(1, 0), load(1, 0, 1, 64), load(1, 2u << 20, 1, 64)}}, 1);
  h->run(bad);
  const hw::Verdict v = h->core.result();
  CHECK(v.error == hw::ErrorCode::kCoreFault);
  CHECK((v.detail >> 24) == 0);
  CHECK((v.detail & 0xffffff) == 2);
}

TEST_CASE("a program touching device memory outside its queue's window faults with a DMA fault") {
  // The window: the program, its arguments and kA's first 64 KiB. A load from kA runs; a load or
  // a store 64 KiB in faults at its pc, as does a program whose code lies outside the window.
  auto store = [](uint8_t reg, uint32_t lx, uint32_t rows, uint32_t row_bytes) {
    hw::Instr i = load(reg, lx, rows, row_bytes);
    i.op = hw::Op::kStore;
    return i;
  };
  std::vector<uint8_t> mine(64, 7), theirs(64, 9), got(64);
  h->memory.write(kA, mine.data(), 64);
  h->memory.write(kA + 0x10000, theirs.data(), 64);
  h->core.set_window(kArgs, kA + 0x10000 - kArgs);
  const std::vector<uint64_t> args = {kA, kA + 0x10000};
  h->run(compiler::assemble("mine", {{arg(1, 0), load(1, 0, 1, 64), store(1, 0, 1, 64)}}, 1), args);
  CHECK(h->core.result().ok());
  h->run(compiler::assemble("read theirs", {{arg(1, 0), arg(2, 1), load(1, 0, 1, 64), load(2, 0, 1, 64)}}, 1), args);
  CHECK(h->core.result().error == hw::ErrorCode::kDmaFault);
  CHECK((h->core.result().detail & 0xffffff) == 3);
  h->run(compiler::assemble("straddle", {{arg(1, 0), load(1, 0, 1, 64)}}, 1), {kA + 0x10000 - 32});
  CHECK(h->core.result().error == hw::ErrorCode::kDmaFault);
  h->run(compiler::assemble("write theirs", {{arg(1, 1), store(1, 0, 1, 64)}}, 1), args);
  CHECK(h->core.result().error == hw::ErrorCode::kDmaFault);
  h->memory.read(kA + 0x10000, got.data(), 64);
  CHECK(got == theirs);             // untouched
  h->core.set_window(kA, 0x10000);  // the code itself (at kProgram) is outside
  h->run(compiler::assemble("mine", {{arg(1, 0), load(1, 0, 1, 64)}}, 1), args);
  CHECK(h->core.result().error == hw::ErrorCode::kDmaFault);
  h->core.set_window(0, 0);  // no window: all of memory
  h->run(compiler::assemble("read theirs", {{arg(1, 0), arg(2, 1), load(1, 0, 1, 64), load(2, 0, 1, 64)}}, 1), args);
  CHECK(h->core.result().ok());
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

namespace {
uint64_t matmul_delta(uint32_t m, uint32_t k, uint32_t n, hw::DType t) {
  const auto one = compiler::assemble("one", {{matmul(m, k, n, t)}}, 0);
  const auto two = compiler::assemble("two", {{matmul(m, k, n, t), matmul(m, k, n, t)}}, 0);
  return h->run(two) - h->run(one);
}
}  // namespace

extern "C" int sc_main(int argc, char* argv[]) {
  Harness harness;
  h = &harness;
  doctest::Context context(argc, argv);
  return context.run();
}
