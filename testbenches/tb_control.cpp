// Testbench of the control side of an AI core (tile ISA v2), each result checked against
// something the model does not compute:
// - scalar loops, DIVU/REMU and RANK against values written out here;
// - launch start, BARRIER and asynchronous DMA against timing written out from the config;
// - faults against the instruction that must fault, and the core that ran it.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "core_harness.h"

using namespace spyre;
using namespace spyre::tb;
using hw::Bcast;
using hw::BinaryFn;
using hw::DType;
using hw::Op;
using hw::UnaryFn;

// ---- Scalar registers, control and multi-core launches ------------------------------------

TEST_CASE("a BRANCH loop stores a block per iteration at a register-advanced address; DIVU and REMU") {
  constexpr uint64_t kBlocks = kOut + 0x10000;
  const std::vector<uint8_t> zeros(8 * 256, 0);
  h->memory.write(kBlocks, zeros.data(), zeros.size());
  emit::Builder b;
  b.emit(emit::arg(2, 1));
  b.emit(iota_index());
  b.emit(sfp(Op::kFill, DType::kF32, kX, 0, emit::double_bits(3.5), 1, 64));
  b.emit(emit::li(3, 0));             // i
  b.emit(emit::li(4, 5));             // iterations
  b.emit(emit::addi(5, 2, 0x10000));  // device address of block i
  b.emit(emit::li(6, 0));             // sum of 7 per iteration
  const auto loop = b.label();
  b.bind(loop);
  b.emit(emit::dma(Op::kStore, hw::DType::kF32, 5, 0, kX, 0, 0, 1, 256, false, 0));
  b.emit(emit::addi(5, 5, 256));
  b.emit(emit::addi(6, 6, 7));
  b.emit(emit::addi(3, 3, 1));
  b.branch(hw::Cond::kLtu, 3, 4, loop);
  b.emit(emit::li(7, ~uint64_t{0}));
  b.emit(emit::divu(8, 7, uint64_t{1} << 62));  // unsigned: 3
  b.emit(emit::remu(9, 7, 1000));               // 18446744073709551615 % 1000 = 615
  b.emit(emit::li(10, 1000));
  b.emit(emit::divu(11, 10, 7));
  b.emit(emit::remu(12, 10, 7));
  std::vector<hw::Instr> code = b.finish();
  const uint32_t regs[] = {3, 6, 8, 9, 11, 12};
  for (uint32_t k = 0; k < std::size(regs); ++k) store_reg(code, regs[k], 2, 4 * k);
  h->run(compiler::assemble("loop", {code}, 2));
  REQUIRE(h->cores[0]->result().ok());
  std::vector<uint32_t> values(6);
  h->memory.read(kOut, values.data(), 6 * 4);
  CHECK(values ==
        std::vector<uint32_t>{5, 35, 3, 615, 142, 6});  // i, the sum, ~0 / 2^62, ~0 % 1000, 1000 / 7, 1000 % 7
  std::vector<float> blocks(8 * 64);
  h->memory.read(kBlocks, blocks.data(), blocks.size() * 4);
  for (size_t k = 0; k < blocks.size(); ++k) CHECK_MESSAGE(blocks[k] == (k < 5 * 64 ? 3.5f : 0.0f), "float ", k);
}

TEST_CASE("RANK gives each core of a launch its rank and the number of cores") {
  std::vector<hw::Instr> code = {emit::arg(2, 1), iota_index(), emit::rank(5), emit::muli(7, 5, 8), emit::add(7, 7, 2)};
  store_reg(code, 5, 7, 0);
  store_reg(code, 6, 7, 4);
  const std::vector<uint32_t> poison(2 * kCores, 0xdead);
  h->memory.write(kOut, poison.data(), poison.size() * 4);
  h->run(compiler::assemble_spmd("rank", code, kCores, 2));
  std::vector<uint32_t> got(2 * kCores);
  h->memory.read(kOut, got.data(), got.size() * 4);
  for (uint32_t r = 0; r < kCores; ++r) {
    CAPTURE(r);
    CHECK(h->cores[r]->result().ok());
    CHECK(got[2 * r] == r);
    CHECK(got[2 * r + 1] == kCores);
  }
}

TEST_CASE("the cores of a launch start together") {
  // Each core reads its program header, entry table, arguments and code, the same bytes for all:
  // the fabric carries them once and the ring multicasts them, so four cores start when one would.
  h->run(compiler::assemble_spmd("empty", {}, 1, 2));
  const double alone = h->fetched(0);
  h->run(compiler::assemble_spmd("empty", {}, kCores, 2));
  // Four dependent reads, each at least one LPDDR5 latency.
  CHECK(alone >= 4 * h->config.memory.latency_ns * h->config.chip.clock_mhz / 1000.0);
  // The same bytes but a longer entry table (four entries instead of one) shift the code by 12
  // bytes, which may put its last bytes on another LPDDR5 channel: one 256-byte granule is 30 cycles.
  for (uint32_t r = 0; r < kCores; ++r) {
    CAPTURE(r);
    CAPTURE(alone);
    CAPTURE(h->fetched(r));
    CHECK(h->fetched(r) == h->fetched(0));
    CHECK(near(h->fetched(r), alone, 30));
  }
}

TEST_CASE("BARRIER releases every core barrier_cycles after the last arrival") {
  const double barrier = h->config.chip.barrier_cycles;
  const std::vector<hw::Instr> work(4, exp_block());
  std::vector<hw::Instr> slow = work;
  slow.push_back(emit::instr(Op::kBarrier));
  // Core 0 arrives after its work (measured in a launch of the same shape without the barrier);
  // core 1 arrives at once and waits for it.
  h->run(compiler::assemble("work", {work, {}}, 2));
  const double arrival = h->stopped(0);
  h->run(compiler::assemble("barrier", {slow, {emit::instr(Op::kBarrier)}}, 2));
  CHECK(h->cores[0]->result().ok());
  CHECK(h->cores[1]->result().ok());
  CAPTURE(arrival);
  CAPTURE(h->stopped(0));
  CAPTURE(h->stopped(1));
  CHECK(h->stopped(1) + 1 >= arrival + barrier);
  CHECK(h->stopped(1) <= arrival + barrier + 1);
  CHECK(near(h->stopped(0), h->stopped(1)));  // the last to arrive is released with the others
  // After the barrier both cores store; and a core that ENDs without arriving releases the other.
  std::vector<hw::Instr> after = {emit::arg(2, 1),
                                  emit::instr(Op::kBarrier),
                                  emit::rank(5),
                                  sfp(Op::kFill, DType::kF32, kX, 0, emit::double_bits(9.5), 1, 16),
                                  emit::muli(6, 5, 64),
                                  emit::add(6, 6, 2),
                                  emit::dma(Op::kStore, hw::DType::kF32, 6, 0, kX, 0, 0, 1, 64, false, 0)};
  const std::vector<float> zeros(32, 0.0f);
  h->memory.write(kOut, zeros.data(), zeros.size() * 4);
  std::vector<hw::Instr> slow_after = work;
  slow_after.insert(slow_after.end(), after.begin(), after.end());
  h->run(compiler::assemble("both store", {slow_after, after}, 2));
  std::vector<float> stored(32);
  h->memory.read(kOut, stored.data(), stored.size() * 4);
  CHECK(h->cores[0]->result().ok());
  CHECK(h->cores[1]->result().ok());
  CHECK(std::count(stored.begin(), stored.end(), 9.5f) == 32);
  h->memory.write(kOut, zeros.data(), zeros.size() * 4);
  h->run(compiler::assemble("one leaves", {after, {exp_block()}}, 2));
  h->memory.read(kOut, stored.data(), stored.size() * 4);
  CHECK(h->cores[0]->result().ok());
  CHECK(h->cores[1]->result().ok());
  CHECK(std::count(stored.begin(), stored.begin() + 16, 9.5f) == 16);
  CHECK(h->stopped(0) >= h->stopped(1) + barrier);
}

TEST_CASE("an async LOAD overlaps SFP work: about max(load, compute) instead of the sum") {
  // 256 KiB: about 2100 cycles on the ring and LPDDR5; four 4096-element exps: 4 x 522 cycles.
  const hw::Instr sync_load = emit::dma(Op::kLoad, hw::DType::kF32, 1, 0, kX, 0, 2048, 128, 2048, false, 0);
  hw::Instr async_load = sync_load;
  async_load.flags = hw::dma_flags(true, 3);
  const std::vector<hw::Instr> compute(
      4, sfp(Op::kUnary, DType::kF32, kE, kE + 0x10000, static_cast<uint64_t>(UnaryFn::kExp), 64, 64));
  const auto program = [&](std::vector<hw::Instr> pre, bool with_compute, std::vector<hw::Instr> post) {
    std::vector<hw::Instr> code{emit::arg(1, 0)};
    code.insert(code.end(), pre.begin(), pre.end());
    if (with_compute) code.insert(code.end(), compute.begin(), compute.end());
    code.insert(code.end(), post.begin(), post.end());
    return h->run(compiler::assemble("dma", {code}, 2));
  };
  const double base = program({}, false, {});
  const double load = program({sync_load}, false, {}) - base;
  const double work = program({}, true, {}) - base;
  const double serial = program({sync_load}, true, {}) - base;
  const double overlapped = program({async_load}, true, {emit::wait_tags(1u << 3)}) - base;
  CAPTURE(load);
  CAPTURE(work);
  CAPTURE(overlapped);
  CAPTURE(serial);
  const sim::ChipConfig& c = h->config.chip;
  const double issue = c.issue_cycles;
  CHECK(load > 2000);
  CHECK(near(work, 4 * (issue + 4096 / 32 * c.sfp_transcendental_cycles + c.sfp_fill_cycles)));
  CHECK(serial + 1 >= load + work);
  // The async LOAD's issue, then the work, then the WAIT's issue, unless the load lands later.
  CHECK(near(overlapped, std::max(load, issue + work + issue), 2));
  CHECK(overlapped + work / 2 < serial);
  // A WAIT with nothing outstanding costs its issue cycles only, after a sync load or a drained tag.
  CHECK(near(program({sync_load}, false, {emit::wait_tags(0xffff)}) - base - load, issue));
  const double one_wait = program({async_load}, true, {emit::wait_tags(1u << 3)});
  CHECK(near(program({async_load}, true, {emit::wait_tags(1u << 3), emit::wait_tags(1u << 3)}) - one_wait, issue));
  // The data is there after the WAIT.
  std::vector<uint8_t> data(128 * 2048);
  for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>(k * 7 + 1);
  h->memory.write(kIn, data.data(), data.size());
  std::vector<uint8_t> back(data.size());
  program({async_load}, true,
          {emit::wait_tags(1u << 3), emit::arg(2, 1),
           emit::dma(Op::kStore, hw::DType::kF32, 2, 0, kX, 0, 2048, 128, 2048, false, 0)});
  h->memory.read(kOut, back.data(), back.size());
  CHECK(back == data);
}

TEST_CASE("LOAD_MULTICAST delivers one read to the named ranks, timed as one load") {
  // Rank 0 multicasts 64 KiB to ranks 1 and 3 (first 1, stride 2, count 2) and waits for its tag;
  // after a barrier every core stores its kY block to kOut + rank * 64 KiB. Ranks 0 and 2 keep the
  // fill they made before the barrier; the bytes cross the ring once.
  constexpr uint32_t kRows = 32, kRowBytes = 2048, kBytes = kRows * kRowBytes;
  std::vector<uint8_t> data(kBytes);
  for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<uint8_t>(k * 13 + 5);
  h->memory.write(kIn, data.data(), data.size());
  const auto program = [&](uint64_t set, bool wait) {
    emit::Builder b;
    b.emit(emit::arg(1, 0));
    b.emit(emit::arg(2, 1));
    b.emit(sfp(Op::kFill, DType::kI8, kY, 0, static_cast<uint64_t>(int64_t{-1}), kRows, kRowBytes));
    b.emit(emit::instr(Op::kBarrier));  // every core has filled before the multicast lands
    b.emit(emit::rank(5));
    const auto skip = b.label();
    b.branch(hw::Cond::kNe, 5, 0, skip);
    b.emit(emit::li(7, set));
    b.emit(emit::dma(Op::kLoadMulticast, hw::DType::kF32, 1, 7, kY, 0, kRowBytes, kRows, kRowBytes, true, 2));
    if (wait) b.emit(emit::wait_tags(1u << 2));
    b.bind(skip);
    b.emit(emit::instr(Op::kBarrier));
    b.emit(emit::muli(6, 5, kBytes));
    b.emit(emit::add(6, 6, 2));
    b.emit(emit::dma(Op::kStore, hw::DType::kF32, 6, 0, kY, 0, kRowBytes, kRows, kRowBytes, false, 0));
    return compiler::assemble_spmd("multicast", b.finish(), kCores, 2);
  };
  const uint64_t loaded = h->stats[0].bytes_loaded;
  h->run(program(hw::pack_rank_set(1, 2, 2), true));
  for (uint32_t r = 0; r < kCores; ++r) REQUIRE(h->cores[r]->result().ok());
  CHECK(h->stats[0].bytes_loaded - loaded == kBytes);
  for (uint32_t r = 0; r < kCores; ++r) {
    CAPTURE(r);
    std::vector<uint8_t> got(kBytes);
    h->memory.read(kOut + r * kBytes, got.data(), got.size());
    if (r % 2 == 1) {
      CHECK(got == data);
    } else {
      CHECK(std::count(got.begin(), got.end(), 0xff) == kBytes);
    }
  }
  // Time: as one LOAD of the same rows to one core, whatever the number of receivers.
  const auto time_of = [&](hw::Instr load) {
    const std::vector<hw::Instr> code = {emit::arg(1, 0), emit::li(7, hw::pack_rank_set(0, 1, kCores)), load};
    h->run(compiler::assemble("timed", {code, {}, {}, {}}, 2));
    REQUIRE(h->cores[0]->result().ok());
    return h->stopped(0);
  };
  const double multicast =
      time_of(emit::dma(Op::kLoadMulticast, hw::DType::kF32, 1, 7, kY, 0, kRowBytes, kRows, kRowBytes, false, 0));
  const double plain =
      time_of(emit::dma(Op::kLoad, hw::DType::kF32, 1, 0, kY, 0, kRowBytes, kRows, kRowBytes, false, 0));
  CAPTURE(plain);
  CHECK(plain > kBytes / h->config.ring.bytes_per_cycle);
  CHECK(near(multicast, plain, 1));
  // Bad rank sets fault on the issuing core before any byte moves: the other ranks store the fill
  // they made (0xff), never the data, even the valid ranks of a set that runs past the launch.
  for (const uint64_t bad : {hw::pack_rank_set(1, 1, 0), hw::pack_rank_set(2, 1, 3), hw::pack_rank_set(0, 2, 3),
                             hw::pack_rank_set(1, 0, 1) | uint64_t{1} << 48}) {
    CAPTURE(bad);
    h->memory.write(kOut, std::vector<uint8_t>(kCores * kBytes, 0).data(), kCores * kBytes);
    h->run(program(bad, true));
    CHECK(h->cores[0]->result().error == hw::ErrorCode::kCoreFault);
    for (uint32_t r = 1; r < kCores; ++r) {
      CAPTURE(r);
      CHECK(h->cores[r]->result().ok());
      std::vector<uint8_t> got(kBytes);
      h->memory.read(kOut + r * kBytes, got.data(), got.size());
      CHECK(std::count(got.begin(), got.end(), 0xff) == kBytes);
    }
  }
}

TEST_CASE("a BARRIER that keeps a core's latest MATMUL lets it run on; it waits for every older one") {
  // A 128 x 1024 x 128 fp16 MATMUL on core 0; core 1 only meets it at the barrier, so core 1's
  // stop tells when core 0 arrived. Against each other: the MATMUL alone, and a bare barrier.
  hw::Instr mm = emit::instr(Op::kMatmul);
  mm.dtype = DType::kF16;
  mm.a = 1u << 20;
  mm.b = emit::pack2(0, 1u << 19);
  mm.c = hw::pack_mkn(128, 1024, 128);
  const double barrier = h->config.chip.barrier_cycles, issue = h->config.chip.issue_cycles;
  h->run(compiler::assemble("mm", {{mm}, {}}, 2));
  const double product = h->stopped(0);  // issue + its PT time; END waits for it
  h->run(compiler::assemble("bare", {{emit::barrier()}, {emit::barrier()}}, 2));
  const double bare = h->stopped(1);
  CAPTURE(product);
  CAPTURE(bare);
  REQUIRE(product > 10 * (bare + issue));
  // keep 0 (the plain BARRIER): core 0 arrives once the product is done.
  h->run(compiler::assemble("keep none", {{mm, emit::barrier(0)}, {emit::barrier()}}, 2));
  CHECK(near(h->stopped(1), product + barrier, 2));
  // keep 1: core 0 arrives as soon as it has issued the MATMUL, which ends the program.
  h->run(compiler::assemble("keep one", {{mm, emit::barrier(1)}, {emit::barrier()}}, 2));
  CHECK(near(h->stopped(1), bare + issue, 2));
  CHECK(near(h->stopped(0), product, 2));
  // Two MATMULs, keep 1: the barrier waits for the first (the arrays run them in order).
  h->run(compiler::assemble("keep one of two", {{mm, mm, emit::barrier(1)}, {emit::barrier()}}, 2));
  CHECK(near(h->stopped(1), product + barrier, 2));
  CHECK(near(h->stopped(0), 2 * product - issue, 2));
  // keep 2 lets both run on.
  h->run(compiler::assemble("keep two", {{mm, mm, emit::barrier(2)}, {emit::barrier()}}, 2));
  CHECK(near(h->stopped(1), bare + 2 * issue, 2));
  // Bits 7..4 are not defined.
  hw::Instr bad = emit::barrier();
  bad.flags = 0x10;
  h->run(compiler::assemble("bad keep", {{emit::li(5, 1), bad}, {emit::barrier()}}, 2));
  CHECK(h->cores[0]->result().error == hw::ErrorCode::kCoreFault);
  CHECK(h->cores[0]->result().detail == 1);
  CHECK(h->cores[1]->result().ok());
}

TEST_CASE("faults stop the core with kCoreFault naming the core and the instruction") {
  const uint32_t lx = static_cast<uint32_t>(h->config.chip.lx_bytes);
  hw::Instr past_end = emit::instr(Op::kBranch);
  past_end.a = 1000;
  hw::Instr bad_cond = emit::instr(Op::kBranch);
  bad_cond.flags = static_cast<uint8_t>(hw::Cond::kCount);
  hw::Instr bad_flags = emit::dma(Op::kLoad, hw::DType::kF32, 1, 0, 0, 0, 0, 1, 64, false, 0);
  bad_flags.flags = 0x2;
  hw::Instr bad_store_flags = emit::dma(Op::kStore, hw::DType::kF32, 1, 0, 0, 0, 0, 1, 64, true, 0);
  bad_store_flags.flags |= 0x4;
  const auto fn = [](auto f) { return static_cast<uint64_t>(f); };
  const struct {
    const char* what;
    std::vector<hw::Instr> code;
  } cases[] = {
      {"UNARY dst past the scratchpad", {sfp(Op::kUnary, DType::kF32, lx - 16, 0, fn(UnaryFn::kExp), 1, 64)}},
      {"BINARY src1 past the scratchpad", {sfp(Op::kBinary, DType::kF32, 0, emit::pack2(0, lx - 4), 0, 3, 5)}},
      {"SELECT mask past the scratchpad", {sfp(Op::kSelect, DType::kF32, 0, emit::pack2(lx - 4, 0), 0, 3, 5)}},
      {"REDUCE best values past the scratchpad", {sfp(Op::kReduce, DType::kF32, 0, 0, 4 | uint64_t{lx} << 32, 2, 4)}},
      {"TRANSPOSE src past the scratchpad", {sfp(Op::kTranspose, DType::kF16, 0, lx - 8, 0, 2, 4)}},
      {"CONVERT i64 src past the scratchpad", {sfp(Op::kConvert, DType::kF32, 0, lx - 16, fn(DType::kI64), 1, 4)}},
      {"FILL pushed past the scratchpad by r[rl]",
       {emit::li(5, lx - 8), emit::sfp(Op::kFill, DType::kF32, 5, 0, 0, emit::double_bits(1), 1, 4)}},
      {"FILL of 2^31 x 2^31 f32 (the byte count would wrap to 0)",
       {sfp(Op::kFill, DType::kF32, 0, 0, emit::double_bits(1), 1u << 31, 1u << 31)}},
      {"SCAN of 2^31 x 2^30 i64 (the byte count would wrap to 0)",
       {sfp(Op::kScan, DType::kI64, 0, 0x100, 0, 1u << 31, 1u << 30)}},
      {"UNARY with an immediate source", {sfp(Op::kUnary, DType::kF32, 0, 0x100, 0, 1, 4, fn(Bcast::kImm))}},
      {"UNARY with a bad function", {sfp(Op::kUnary, DType::kF32, 0, 0x100, fn(UnaryFn::kCount), 1, 4)}},
      {"BINARY with a bad function", {sfp(Op::kBinary, DType::kF32, 0, 0x100, fn(BinaryFn::kCount), 1, 4)}},
      {"BINARY with broadcast mode 5", {sfp(Op::kBinary, DType::kF32, 0, 0x100, 0, 1, 4, 5)}},
      {"REDUCE with no columns", {sfp(Op::kReduce, DType::kF32, 0, 0x100, 0, 1, 0)}},
      {"TRANSPOSE in place", {sfp(Op::kTranspose, DType::kF32, 0x100, 0x100, 0, 2, 2)}},
      {"TRANSPOSE onto part of its source", {sfp(Op::kTranspose, DType::kF32, 0x104, 0x100, 0, 2, 2)}},
      {"SORT into a block half over its source", {sfp(Op::kSort, DType::kF32, 0x108, 0x100, 0x300, 1, 4)}},
      {"SORT with indices not 8-byte aligned", {sfp(Op::kSort, DType::kF32, 0x100, 0x200, 0x304, 1, 4)}},
      {"SORT with a bad flag", {sfp(Op::kSort, DType::kF32, 0x100, 0x200, 0x300, 1, 4, 2)}},
      {"LI to r0", {emit::li(0, 5)}},
      {"ADDI to r0", {emit::addi(0, 5, 1)}},
      {"RANK into r15 (r16 does not exist)", {emit::rank(15)}},
      {"DIVU by zero", {emit::divu(7, 5, 0)}},
      {"REMU by zero", {emit::remu(7, 5, 0)}},
      {"BRANCH past the program", {past_end}},
      {"BRANCH with condition 7", {bad_cond}},
      {"WAIT on tag 16", {emit::wait_tags(1u << 16)}},
      {"ARG past the argument block", {emit::arg(7, 2)}},
      {"LOAD with a reserved flag bit", {bad_flags}},
      {"async STORE with a reserved flag bit", {bad_store_flags}},
      {"LOAD_MULTICAST rows past the scratchpad",
       {emit::li(7, hw::pack_rank_set(0, 1, 1)),
        emit::dma(Op::kLoadMulticast, hw::DType::kF32, 1, 7, lx - 32, 0, 0, 1, 64, false, 0)}},
  };
  for (const auto& k : cases) {
    CAPTURE(k.what);
    std::vector<hw::Instr> code = {emit::arg(1, 0), emit::li(5, 1)};
    code.insert(code.end(), k.code.begin(), k.code.end());
    h->run(compiler::assemble("fault", {code}, 2));
    CHECK(h->cores[0]->result().error == hw::ErrorCode::kCoreFault);
    CHECK(h->cores[0]->result().detail == code.size() - 1);  // core 0, the last instruction
  }
  // On core 1 of a launch: core 0's stream is instructions 0..1 (with its END), core 1's 2..3.
  h->run(compiler::assemble("fault", {{emit::li(5, 1)}, {emit::li(5, 1), emit::divu(6, 5, 0)}}, 2));
  CHECK(h->cores[0]->result().ok());
  CHECK(h->cores[1]->result().error == hw::ErrorCode::kCoreFault);
  CHECK(h->cores[1]->result().detail == (1u << 24 | 3));
}

TEST_CASE("the watchdog stops a program that never ends, naming core and instruction; the others finish") {
  // Core 0 spins on a branch to itself; core 1 waits at a barrier for it, then ends. With the
  // watchdog off this launch would never finish.
  const uint64_t budget = 100000;
  h->config.firmware.watchdog_cycles = budget;
  // Core 0 runs instructions 0..3 (LI, LI, BRANCH, END), core 1 from 4 on.
  hw::Instr spin = emit::instr(Op::kBranch);  // kAlways: continue at instruction 2, itself
  spin.a = 2;
  const compiler::Program p = compiler::assemble(
      "spin", {{emit::li(5, 1), emit::li(6, 2), spin}, {emit::li(5, 1), emit::instr(Op::kBarrier)}}, 0);
  REQUIRE(p.core_mask == 3);
  h->run(p, {});
  h->config.firmware.watchdog_cycles = sim::Config{}.firmware.watchdog_cycles;
  CHECK(h->cores[0]->result().error == hw::ErrorCode::kWatchdog);
  CHECK(h->cores[0]->result().detail == 2);  // core 0, the spinning branch
  CHECK(h->cores[1]->result().ok());
  // Stopped at the first instruction past the budget (the launch's end adds the firmware's own
  // cycles for the completion).
  const double ran = h->cycles(h->done[0] - h->start);
  CHECK(ran >= budget);
  CHECK(ran <= budget + 8 * h->config.chip.issue_cycles + h->config.firmware.command_cycles);
}

extern "C" int sc_main(int argc, char* argv[]) {
  Harness harness;
  h = &harness;
  doctest::Context context(argc, argv);
  return context.run();
}
