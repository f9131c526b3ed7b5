// Driver tests against the simulated card through the inproc transport: rings, doorbells,
// fences, completions, device memory, and error isolation for malformed descriptors.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "spyre/compiler/emit.h"
#include "spyre/compiler/program.h"
#include "spyre/driver/driver.h"
#include "spyre/hw/commands.h"
#include "spyre/hw/pci.h"
#include "spyre/hw/regs.h"
#include "spyre/sim/inproc.h"

using namespace spyre;
using driver::StatusCode;

namespace {

// The card in this process (SPYRE_TRANSPORT=inproc, the default): the driver links no simulator.
const bool g_inproc_registered = (sim::register_inproc_transport(), true);

driver::Device& dev0() {
  driver::Device* d = nullptr;
  const driver::Status s = driver::Driver::instance().device(0, &d);
  REQUIRE_MESSAGE(s.ok(), s.message());
  return *d;
}

std::unique_ptr<driver::Queue> make_queue(uint32_t entries = 64) {
  std::unique_ptr<driver::Queue> q;
  REQUIRE(dev0().create_queue(entries, &q).ok());
  return q;
}

// Host -> device copy of `bytes` through a mapped staging buffer; waits for completion.
void upload(driver::Queue& q, uint64_t dst, const void* src, uint64_t n) {
  std::unique_ptr<driver::HostBuffer> staging;
  REQUIRE(dev0().map_host(n, &staging).ok());
  std::memcpy(staging->data(), src, n);
  uint64_t seq = 0;
  REQUIRE(q.copy(staging->iova(), dst, n, hw::kCopySrcHost, &seq).ok());
  const driver::Status s = q.wait(seq);
  REQUIRE_MESSAGE(s.ok(), s.message());
}

void download(driver::Queue& q, void* dst, uint64_t src, uint64_t n) {
  std::unique_ptr<driver::HostBuffer> staging;
  REQUIRE(dev0().map_host(n, &staging).ok());
  uint64_t seq = 0;
  REQUIRE(q.copy(src, staging->iova(), n, hw::kCopyDstHost, &seq).ok());
  const driver::Status s = q.wait(seq);
  REQUIRE_MESSAGE(s.ok(), s.message());
  std::memcpy(dst, staging->data(), n);
}

uint64_t alloc(uint64_t n) {
  uint64_t a = 0;
  const driver::Status s = dev0().alloc(n, &a);
  REQUIRE_MESSAGE(s.ok(), s.message());
  return a;
}

std::vector<uint8_t> random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// A raw descriptor with one field spoiled, and what the card must answer.
hw::Completion submit_bad(driver::Queue& q, const hw::Descriptor& d) {
  uint64_t seq = 0;
  REQUIRE(q.submit_raw(d, &seq).ok());
  const driver::Status s = q.wait(seq);
  CHECK(s.code() == StatusCode::kDeviceError);
  hw::Completion c{};
  REQUIRE(q.completion(seq, &c).ok());
  return c;
}

}  // namespace

TEST_CASE("device opens with the configured identity and limits") {
  const driver::DeviceInfo& info = dev0().info();
  CHECK(info.vendor_id == hw::kPciVendorId);
  CHECK(info.device_id == hw::kPciDeviceId);
  CHECK(info.card.cores == 32);
  // In-process the driver owns the card; through spyre-simd it sees its slot: a quarter of the
  // queues and of the memory (the daemon's default of four clients), at a 1 MiB-aligned window.
  const char* transport = std::getenv("SPYRE_TRANSPORT");
  if (transport != nullptr && std::string(transport) == "socket") {
    CHECK(info.memory_bytes == (112ull << 30) / 4 / (1 << 20) * (1 << 20));
    CHECK(info.memory_base % info.memory_bytes == 0);
    CHECK(info.num_queues == 4);
  } else {
    CHECK(info.memory_bytes == 112ull << 30);
    CHECK(info.memory_base == 0);
    CHECK(info.num_queues == 16);
  }
  CHECK(info.card.lx_bytes == 2u << 20);
  CHECK(info.fp16_dlfloat);  // the silicon's format is the default
  CHECK(info.card.clock_mhz == 1500);
}

TEST_CASE("opening a device that does not exist names the index") {
  driver::Device* d = nullptr;
  const driver::Status s = driver::Driver::instance().device(7, &d);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("device index 7 is out of range (1 device(s) present)") != std::string::npos);
}

TEST_CASE("device memory: allocation, reuse after free, and out of memory") {
  const driver::MemoryStats before = dev0().memory_stats();
  const uint64_t a = alloc(1000);
  const uint64_t b = alloc(1 << 20);
  CHECK(a % 256 == 0);
  CHECK(b >= a + 1024);
  CHECK(dev0().memory_stats().allocated == before.allocated + 1024 + (1 << 20));
  REQUIRE(dev0().free(a).ok());
  CHECK(alloc(512) == a);  // first fit reuses the hole
  CHECK(dev0().free(12345).code() == StatusCode::kInvalidArgument);

  uint64_t huge = 0;
  const driver::Status s = dev0().alloc(200ull << 30, &huge);
  CHECK(s.code() == StatusCode::kOutOfMemory);
  CHECK(s.message().find("out of device memory") != std::string::npos);
  CHECK(s.message().find("200.00 GiB") != std::string::npos);
}

TEST_CASE("a scrub zeroes the range it names, and nothing outside this function's memory") {
  auto q = make_queue();
  const auto data = random_bytes(300000, 7);
  const uint64_t a = alloc(data.size()), b = alloc(data.size());
  upload(*q, a, data.data(), data.size());
  upload(*q, b, data.data(), data.size());
  dev0().scrub(a + 1000, 200000);  // pages wholly inside and parts of pages at both ends
  std::vector<uint8_t> back(data.size());
  download(*q, back.data(), a, back.size());
  std::vector<uint8_t> want = data;
  std::fill(want.begin() + 1000, want.begin() + 201000, 0);
  CHECK(back == want);
  download(*q, back.data(), b, back.size());
  CHECK(back == data);
  // Outside this function's memory (on a shared card: another client's window): dropped there,
  // a range past the card's end here; neither touches this block.
  const driver::DeviceInfo& info = dev0().info();
  dev0().scrub(info.memory_base + info.memory_bytes, 1 << 20);
  if (info.memory_base > 0) dev0().scrub(0, info.memory_base);
  download(*q, back.data(), b, back.size());
  CHECK(back == data);
  REQUIRE(dev0().free(a).ok());
  REQUIRE(dev0().free(b).ok());
}

TEST_CASE("copies round-trip host -> device -> device -> host") {
  auto q = make_queue();
  const auto data = random_bytes(3 * 1024 * 1024 + 17, 1);
  const uint64_t a = alloc(data.size()), b = alloc(data.size());
  upload(*q, a, data.data(), data.size());
  uint64_t seq = 0;
  REQUIRE(q->copy(a, b, data.size(), 0, &seq).ok());
  REQUIRE(q->wait(seq).ok());
  std::vector<uint8_t> back(data.size());
  download(*q, back.data(), b, back.size());
  CHECK(back == data);
}

TEST_CASE("the ring wraps and fences complete in order") {
  auto q = make_queue(4);
  const uint64_t dst = alloc(4096);
  std::unique_ptr<driver::HostBuffer> src;
  REQUIRE(dev0().map_host(4096, &src).ok());
  std::vector<uint64_t> order;
  uint64_t last = 0;
  for (int i = 0; i < 50; ++i) {  // far more than the 4 ring entries
    uint64_t seq = 0;
    REQUIRE(q->copy(src->iova(), dst, 64 + i, hw::kCopySrcHost, &seq).ok());
    CHECK(seq == last + 1);
    last = seq;
    q->on_complete(seq, [&order, seq] { order.push_back(seq); });
  }
  REQUIRE(q->synchronize().ok());
  REQUIRE(order.size() == 50);
  for (size_t i = 0; i < order.size(); ++i) CHECK(order[i] == i + 1);
  hw::Completion c{};
  REQUIRE(q->completion(last, &c).ok());
  CHECK(c.error == hw::ErrorCode::kOk);
  CHECK(c.end_cycle > c.start_cycle);
  CHECK(q->wait(last + 5).code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a matmul program runs on the cores and matches a CPU reference") {
  auto q = make_queue();
  for (const hw::DType type : {hw::DType::kF32, hw::DType::kF16}) {
    CAPTURE(static_cast<int>(type));
    const uint64_t m = 150, k = 300, n = 70;  // edge tiles in every dimension
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> small(-4, 4);  // exact in fp16 and fp32
    std::vector<float> a(m * k), b(k * n), ref(m * n, 0.f);
    for (auto& x : a) x = static_cast<float>(small(rng)) / 4;
    for (auto& x : b) x = static_cast<float>(small(rng)) / 4;
    for (uint32_t i = 0; i < m; ++i)
      for (uint32_t p = 0; p < k; ++p)
        for (uint32_t j = 0; j < n; ++j) ref[i * n + j] += a[i * k + p] * b[p * n + j];

    compiler::MatmulSpec spec{m, k, n, type, type, k, n, n};
    const compiler::Program prog = compiler::compile_matmul(spec, compiler::Target(dev0().info().card));
    const uint32_t es = hw::dtype_size(type);
    // fp16 in device memory: DLFloat16 (1-6-9, bias 31) on a default card, IEEE half (1-5-10,
    // bias 15) when the config says so; the driver reads which from the numerics register.
    const bool dl = dev0().info().fp16_dlfloat;
    const int bias = dl ? 31 : 15, frac_bits = dl ? 9 : 10;
    auto to_dev = [&](const std::vector<float>& v) {
      std::vector<uint8_t> bytes(v.size() * es);
      for (size_t i = 0; i < v.size(); ++i) {
        if (type == hw::DType::kF32) {
          std::memcpy(&bytes[i * 4], &v[i], 4);
        } else {  // values are small multiples of 1/4: exact fp16 by hand
          const float f = v[i];
          uint16_t h = 0;
          if (f != 0) {
            int e = 0;
            const float mant = std::frexp(std::fabs(f), &e);  // f = mant * 2^e, mant in [0.5, 1)
            h = static_cast<uint16_t>((f < 0 ? 0x8000 : 0) | ((e - 1 + bias) << frac_bits) |
                                      static_cast<uint16_t>((mant * 2 - 1) * (1 << frac_bits)));
          }
          std::memcpy(&bytes[i * 2], &h, 2);
        }
      }
      const uint64_t addr = alloc(bytes.size());
      upload(*q, addr, bytes.data(), bytes.size());
      return addr;
    };
    const uint64_t da = to_dev(a), db = to_dev(b);
    const uint64_t dprog = alloc(prog.image.size());
    upload(*q, dprog, prog.image.data(), prog.image.size());
    // The arguments in device memory, uploaded first, or carried in the queue's argument ring.
    for (const bool in_ring : {false, true}) {
      CAPTURE(in_ring);
      const uint64_t dc = alloc(uint64_t{m} * n * es);
      const uint64_t args[3] = {da, db, dc};
      uint64_t seq = 0;
      if (in_ring) {
        REQUIRE(q->launch(dprog, prog.image.size(), args, 3, prog.core_mask, 0, &seq).ok());
      } else {
        const uint64_t dargs = alloc(sizeof args);
        upload(*q, dargs, args, sizeof args);
        REQUIRE(q->launch(dprog, prog.image.size(), dargs, sizeof args, prog.core_mask, 0, &seq).ok());
      }
      const driver::Status s = q->wait(seq);
      REQUIRE_MESSAGE(s.ok(), s.message());
      std::vector<uint8_t> out(uint64_t{m} * n * es);
      download(*q, out.data(), dc, out.size());
      int bad = 0;
      for (uint32_t i = 0; i < m * n; ++i) {
        float v = 0;
        if (type == hw::DType::kF32) {
          std::memcpy(&v, &out[uint64_t{i} * 4], 4);
        } else {
          uint16_t h = 0;
          std::memcpy(&h, &out[uint64_t{i} * 2], 2);
          const int e = (h >> frac_bits) & (dl ? 63 : 31);
          const float mant = static_cast<float>(h & ((1 << frac_bits) - 1)) / static_cast<float>(1 << frac_bits);
          v = (e == 0 ? (dl ? 0.0f : std::ldexp(mant, 1 - bias)) : std::ldexp(1 + mant, e - bias)) *
              ((h & 0x8000) ? -1 : 1);
        }
        const float tol = type == hw::DType::kF32 ? 1e-4f : 1e-3f * std::fabs(ref[i]) + 1e-3f;
        bad += std::fabs(v - ref[i]) > tol;
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("PRINT appends records to its queue's print buffer, in rank order per core, and drops what does not fit") {
  auto q = make_queue();
  // Each of two cores: r3 = 40 + rank, four f32 values 1.5 * (i + 1) filled into its scratchpad,
  // then PRINT message 2 of r3 and r0 and the values; the second core prints three times.
  const auto fill = [](uint32_t dst, float v, uint32_t n) {
    hw::Instr f = compiler::emit::sfp(hw::Op::kFill, hw::DType::kF32, 0, dst, 0, compiler::emit::double_bits(v), 1, n);
    return f;
  };
  hw::Instr print = compiler::emit::instr(hw::Op::kPrint);
  print.a = 2;
  print.b = 0x100;
  print.c = hw::print_regs(2, 3, 0);
  print.e = 4;
  print.dtype = hw::DType::kF32;
  std::vector<std::vector<hw::Instr>> per_core;
  for (uint32_t rank = 0; rank < 2; ++rank) {
    std::vector<hw::Instr> code = {compiler::emit::li(3, 40 + rank)};
    for (uint32_t i = 0; i < 4; ++i) code.push_back(fill(0x100 + 4 * i, 1.5f * static_cast<float>(i + 1), 1));
    for (uint32_t i = 0; i < (rank == 0 ? 1u : 3u); ++i) code.push_back(print);
    per_core.push_back(code);
  }
  const compiler::Program prog = compiler::assemble("printer", per_core, 0, {"a", "b", "core %d %d: %v\n"});
  const uint64_t dprog = alloc(prog.image.size());
  upload(*q, dprog, prog.image.data(), prog.image.size());
  const auto run = [&](uint64_t buffer, uint64_t size) {
    uint64_t seq = 0;
    const hw::PrintBufferHeader h{sizeof h, 0};
    if (buffer) upload(*q, buffer, &h, sizeof h);
    REQUIRE(q->sanitize(hw::SanitizeAction::kPrintBuffer, buffer, size, 0, &seq).ok());
    REQUIRE(q->launch(dprog, prog.image.size(), nullptr, 0, prog.core_mask, 0, &seq).ok());
    const driver::Status s = q->wait(seq);
    REQUIRE_MESSAGE(s.ok(), s.message());
  };
  // Each record: the 40-byte header, two registers, four floats (16 bytes): 72 bytes.
  constexpr uint64_t kRecord = sizeof(hw::PrintRecord) + 16 + 16;
  const uint64_t buffer = alloc(4096);
  run(buffer, 4096);
  std::vector<uint8_t> got(sizeof(hw::PrintBufferHeader) + 4 * kRecord);
  download(*q, got.data(), buffer, got.size());
  hw::PrintBufferHeader h{};
  std::memcpy(&h, got.data(), sizeof h);
  CHECK(h.used == sizeof h + 4 * kRecord);
  CHECK(h.dropped == 0);
  std::vector<uint32_t> ranks;
  for (uint64_t at = sizeof h; at < h.used; at += kRecord) {
    hw::PrintRecord r{};
    std::memcpy(&r, got.data() + at, sizeof r);
    CHECK(r.bytes == kRecord);
    CHECK(r.message == 2);
    CHECK(r.program == dprog);
    CHECK(r.nregs == 2);
    CHECK(r.dtype == static_cast<uint8_t>(hw::DType::kF32));
    CHECK(r.nvalues == 4);
    // Rank 0's PRINT is its instruction 5; rank 1's stream starts after rank 0's 6 and END.
    CHECK((r.rank == 0 ? r.instruction == 5 : r.instruction >= 12 && r.instruction <= 14));
    uint64_t regs[2];
    std::memcpy(regs, got.data() + at + sizeof r, 16);
    CHECK(regs[0] == 40 + r.rank);
    CHECK(regs[1] == 0);
    float values[4];
    std::memcpy(values, got.data() + at + sizeof r + 16, 16);
    for (int i = 0; i < 4; ++i) CHECK(values[i] == 1.5f * static_cast<float>(i + 1));
    ranks.push_back(r.rank);
  }
  CHECK(std::count(ranks.begin(), ranks.end(), 1u) == 3);
  // The smallest buffer holds the header and three records: the fourth is dropped and counted.
  run(buffer, hw::kPrintBufferMin);
  download(*q, &h, buffer, sizeof h);
  CHECK(h.used == sizeof h + 3 * kRecord);
  CHECK(h.dropped == 1);
  // No buffer: PRINT only takes its time; the last buffer is left as it was.
  run(0, 0);
  hw::PrintBufferHeader after{};
  download(*q, &after, buffer, sizeof after);
  CHECK(after.used == h.used);
}

TEST_CASE("a launch carries at most the hardware's number of arguments in the ring") {
  auto q = make_queue();
  const std::vector<uint64_t> args(hw::kMaxLaunchArgs + 1, 0);
  uint64_t seq = 0;
  const driver::Status s = q->launch(0, 4096, args.data(), args.size(), 1, 0, &seq);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("at most 16 arguments, not 17") != std::string::npos);
  CHECK(q->last_seq() == 0);  // nothing was submitted
  CHECK(q->launch(0, 4096, nullptr, 2, 1, 0, &seq).code() == StatusCode::kInvalidArgument);
  CHECK(q->last_seq() == 0);
}

TEST_CASE("malformed descriptors fail their queue with the field named, and only that queue") {
  auto bad_q = make_queue();
  auto good_q = make_queue();
  const uint64_t mem = dev0().info().memory_bytes;

  hw::Descriptor d{};
  d.opcode = static_cast<hw::Opcode>(99);
  hw::Completion c = submit_bad(*bad_q, d);
  CHECK(c.error == hw::ErrorCode::kBadOpcode);
  CHECK(c.field == hw::Field::kOpcode);
  const driver::Status err = bad_q->error();
  CHECK(err.message().find("bad opcode in field opcode") != std::string::npos);

  // The queue is now in error: later descriptors complete without running.
  hw::Descriptor nop{};
  nop.opcode = hw::Opcode::kNop;
  c = submit_bad(*bad_q, nop);
  CHECK(c.error == hw::ErrorCode::kQueueInError);

  // Another queue on the same device keeps working.
  const auto data = random_bytes(4096, 2);
  const uint64_t a = alloc(data.size());
  upload(*good_q, a, data.data(), data.size());
  std::vector<uint8_t> back(data.size());
  download(*good_q, back.data(), a, back.size());
  CHECK(back == data);

  struct Case {
    const char* what;
    hw::Descriptor d;
    hw::ErrorCode error;
    hw::Field field;
  };
  std::vector<Case> cases;
  auto copy = [](uint64_t src, uint64_t dst, uint64_t size, uint8_t flags) {
    hw::Descriptor x{};
    x.opcode = hw::Opcode::kCopy;
    x.flags = flags;
    x.copy.src = src;
    x.copy.dst = dst;
    x.copy.size = size;
    return x;
  };
  cases.push_back({"src past the end", copy(mem - 8, a, 64, 0), hw::ErrorCode::kOutOfRange, hw::Field::kCopySrc});
  cases.push_back({"dst past the end", copy(a, mem, 64, 0), hw::ErrorCode::kOutOfRange, hw::Field::kCopyDst});
  cases.push_back({"zero size", copy(a, a + 64, 0, 0), hw::ErrorCode::kBadSize, hw::Field::kCopySize});
  cases.push_back({"host to host", copy(1, 2, 8, hw::kCopySrcHost | hw::kCopyDstHost), hw::ErrorCode::kBadFlags,
                   hw::Field::kFlags});
  cases.push_back({"unmapped host source", copy(0xdead0000, a, 64, hw::kCopySrcHost), hw::ErrorCode::kDmaFault,
                   hw::Field::kCopySrc});
  hw::Descriptor reserved = copy(a, a + 64, 8, 0);
  reserved.copy.reserved[1] = 1;
  cases.push_back({"reserved bits", reserved, hw::ErrorCode::kReservedNonZero, hw::Field::kReserved});
  hw::Descriptor launch{};
  launch.opcode = hw::Opcode::kLaunch;
  launch.launch.program = a;
  launch.launch.program_size = 4096;
  launch.launch.core_mask = 1ull << 40;  // no such core
  cases.push_back({"core mask", launch, hw::ErrorCode::kNoSuchCore, hw::Field::kLaunchCoreMask});
  launch.launch.core_mask = 1;  // `a` holds random bytes, not a program
  cases.push_back({"not a program", launch, hw::ErrorCode::kBadProgram, hw::Field::kLaunchProgram});

  for (const Case& k : cases) {
    CAPTURE(k.what);
    REQUIRE(bad_q->reset().ok());
    CHECK(bad_q->error().ok());
    c = submit_bad(*bad_q, k.d);
    CHECK(c.error == k.error);
    CHECK(c.field == k.field);
    CHECK(bad_q->error().message().find(hw::field_name(k.field)) != std::string::npos);
  }

  // After a reset the same queue is usable again.
  REQUIRE(bad_q->reset().ok());
  download(*bad_q, back.data(), a, back.size());
  CHECK(back == data);
}

TEST_CASE("an error is reported to waits that cover it, not to earlier ones") {
  auto q = make_queue();
  hw::Descriptor nop{};
  nop.opcode = hw::Opcode::kNop;
  hw::Descriptor bad{};
  bad.opcode = static_cast<hw::Opcode>(77);
  uint64_t s1 = 0, s2 = 0, s3 = 0;
  REQUIRE(q->submit_raw(nop, &s1).ok());
  REQUIRE(q->submit_raw(bad, &s2).ok());
  REQUIRE(q->submit_raw(nop, &s3).ok());
  CHECK(q->wait(s3).code() == StatusCode::kDeviceError);  // s3 did not run
  CHECK(q->wait(s1).ok());                                // s1 ran before the failure
  CHECK(q->wait(s2).code() == StatusCode::kDeviceError);
  CHECK(q->not_executed() == 1);
  REQUIRE(q->reset().ok());
  CHECK(q->not_executed() == 0);
  uint64_t s4 = 0;
  REQUIRE(q->submit_raw(nop, &s4).ok());
  CHECK(q->wait(s4).ok());
}

TEST_CASE("a queue whose ring is unusable is halted, and its waiters wake with an error") {
  auto q = make_queue();
  // Spoil the ring size behind the driver's back: the firmware cannot fetch, so it halts the queue.
  driver::Driver::instance().transport()->mmio_write(0, hw::queue_reg(q->id(), hw::kQRingEntries), 3);
  hw::Descriptor nop{};
  nop.opcode = hw::Opcode::kNop;
  uint64_t seq = 0;
  REQUIRE(q->submit_raw(nop, &seq).ok());
  bool released = false;
  q->on_complete(seq, [&] { released = true; });
  const driver::Status s = q->wait(seq);
  CHECK(s.code() == StatusCode::kDeviceError);
  CHECK(s.message().find("halted by the card") != std::string::npos);
  REQUIRE(q->reset().ok());
  CHECK(released);  // what waited on dropped work is released, not leaked
  q.reset();
  auto fresh = make_queue();  // the device itself is fine
  REQUIRE(fresh->submit_raw(nop, &seq).ok());
  CHECK(fresh->wait(seq).ok());
}

TEST_CASE("a doorbell more than a ring ahead halts only its queue, and the driver says why") {
  auto q = make_queue(4);
  auto other = make_queue(4);
  hw::Descriptor nop{};
  nop.opcode = hw::Opcode::kNop;
  uint64_t seq = 0;
  REQUIRE(q->submit_raw(nop, &seq).ok());
  REQUIRE(q->wait(seq).ok());  // HEAD = TAIL = 1
  REQUIRE(q->submit_raw(nop, &seq).ok());
  // Behind the driver's back, ring the doorbell six slots past HEAD on a four-slot ring.
  driver::Driver::instance().transport()->mmio_write(0, hw::queue_reg(q->id(), hw::kQTail), 7);
  const driver::Status s = q->wait(seq);
  CHECK(s.code() == StatusCode::kDeviceError);
  CHECK_MESSAGE(s.message().find("doorbell overrun") != std::string::npos, s.message());
  uint64_t other_seq = 0;
  REQUIRE(other->submit_raw(nop, &other_seq).ok());
  CHECK(other->wait(other_seq).ok());  // the other queue never noticed
  REQUIRE(q->reset().ok());
  REQUIRE(q->submit_raw(nop, &seq).ok());
  CHECK(q->wait(seq).ok());  // and the reset queue works again
}

TEST_CASE("a device can be closed and opened again, with its memory and queues free") {
  {
    auto q = make_queue();
    const uint64_t a = alloc(1 << 20);
    const auto data = random_bytes(1 << 20, 9);
    upload(*q, a, data.data(), data.size());
  }  // queues and buffers go first
  driver::Driver::instance().close(0);
  driver::Device& fresh = dev0();  // reopened
  CHECK(fresh.memory_stats().allocated == 0);
  std::vector<std::unique_ptr<driver::Queue>> queues;
  for (uint32_t i = 0; i < fresh.info().num_queues; ++i) {  // every hardware queue is free again
    std::unique_ptr<driver::Queue> q;
    REQUIRE(fresh.create_queue(8, &q).ok());
    queues.push_back(std::move(q));
  }
  std::unique_ptr<driver::Queue> extra;
  CHECK(fresh.create_queue(8, &extra).code() == StatusCode::kOutOfMemory);
  queues.clear();
  auto q = make_queue();
  const auto data = random_bytes(4096, 10);
  const uint64_t a = alloc(data.size());
  upload(*q, a, data.data(), data.size());
  std::vector<uint8_t> back(data.size());
  download(*q, back.data(), a, back.size());
  CHECK(back == data);
}

TEST_CASE("device time advances only with work, and reproducibly") {
  auto q = make_queue();
  const uint64_t t0 = dev0().cycles();
  const uint64_t t1 = dev0().cycles();
  CHECK(t1 == t0);  // an idle card does not age
  const uint64_t a = alloc(1 << 20);
  const auto data = random_bytes(1 << 20, 3);
  upload(*q, a, data.data(), data.size());
  const uint64_t t2 = dev0().cycles();
  CHECK(t2 > t1);
  // Analytical reference: 1 MiB in 256-byte packets with 24 bytes of overhead each is 1146880
  // bytes on the wire, 17920 ns at 64 GB/s; the pipelined DMA pays the 600 ns PCIe latency once,
  // then writes its last 64 KiB chunk to LPDDR5 (320 ns + 120 ns) across at most 18 ring hops.
  // At 1.5 GHz that is 26880 + 900 + 660 cycles, + up to 18.
  uint64_t seq = 0;
  std::unique_ptr<driver::HostBuffer> staging;
  REQUIRE(dev0().map_host(1 << 20, &staging).ok());
  REQUIRE(q->copy(staging->iova(), a, 1 << 20, hw::kCopySrcHost, &seq).ok());
  REQUIRE(q->wait(seq).ok());
  hw::Completion c{};
  REQUIRE(q->completion(seq, &c).ok());
  const uint64_t dur = c.end_cycle - c.start_cycle;
  CHECK(dur >= 26880 + 900 + 660);
  CHECK(dur <= 26880 + 900 + 660 + 18 + 50);
}

namespace {

// A 1024-cube fp32 matmul program on every core, loaded with its arguments (the data is whatever
// device memory holds: only the time matters). Returns a launcher for a queue.
struct BusyProgram {
  uint64_t prog, size, args, mask;
  uint64_t launch(driver::Queue& q) const {
    uint64_t seq = 0;
    REQUIRE(q.launch(prog, size, args, 3 * sizeof(uint64_t), mask, 0, &seq).ok());
    return seq;
  }
};

BusyProgram busy_program(driver::Queue& q) {
  const uint32_t n = 1024;
  compiler::MatmulSpec spec{n, n, n, hw::DType::kF32, hw::DType::kF32, n, n, n};
  const compiler::Program p = compiler::compile_matmul(spec, compiler::Target(dev0().info().card));
  const uint64_t bytes = uint64_t{n} * n * 4;
  const uint64_t args[3] = {alloc(bytes), alloc(bytes), alloc(bytes)};
  BusyProgram b{alloc(p.image.size()), p.image.size(), alloc(sizeof args), p.core_mask};
  upload(q, b.prog, p.image.data(), p.image.size());
  upload(q, b.args, args, sizeof args);
  return b;
}

hw::Completion completion_of(driver::Queue& q, uint64_t seq) {
  const driver::Status s = q.wait(seq);
  REQUIRE_MESSAGE(s.ok(), s.message());
  hw::Completion c{};
  REQUIRE(q.completion(seq, &c).ok());
  return c;
}

}  // namespace

TEST_CASE("queues run concurrently: a copy on one overlaps a launch on another") {
  auto compute = make_queue(), copies = make_queue();
  const BusyProgram busy = busy_program(*compute);
  const uint64_t n = 4 << 20;
  const uint64_t dst = alloc(n);
  std::unique_ptr<driver::HostBuffer> src;
  REQUIRE(dev0().map_host(n, &src).ok());
  const uint64_t launch = busy.launch(*compute);
  uint64_t copy = 0;
  REQUIRE(copies->copy(src->iova(), dst, n, hw::kCopySrcHost, &copy).ok());
  const hw::Completion l = completion_of(*compute, launch), c = completion_of(*copies, copy);
  MESSAGE("launch ", l.start_cycle, "..", l.end_cycle, ", copy ", c.start_cycle, "..", c.end_cycle);
  CHECK(std::max(l.start_cycle, c.start_cycle) < std::min(l.end_cycle, c.end_cycle));  // the intervals overlap
  // The copy takes about its PCIe time, not that plus the launch's: n bytes at 64 GB/s, 1500 MHz.
  const double pcie_cycles = static_cast<double>(n) / 64e9 * 1500e6;
  CHECK(static_cast<double>(c.end_cycle - c.start_cycle) < 1.2 * pcie_cycles);
}

TEST_CASE("a semaphore orders one queue after another without the host") {
  auto a = make_queue(), b = make_queue();
  const BusyProgram busy = busy_program(*a);
  const uint64_t sem = alloc(8);
  const uint64_t zero = 0;
  upload(*a, sem, &zero, 8);
  const uint64_t n = 1 << 20;
  const uint64_t dst = alloc(n);
  std::unique_ptr<driver::HostBuffer> src;
  REQUIRE(dev0().map_host(n, &src).ok());
  uint64_t wait = 0, copy = 0, signal = 0;
  // b's wait is queued first, before a even starts the work it waits for.
  REQUIRE(b->wait_semaphore(sem, 1, &wait).ok());
  REQUIRE(b->copy(src->iova(), dst, n, hw::kCopySrcHost, &copy).ok());
  CHECK_FALSE(b->is_complete(copy));
  const uint64_t launch = busy.launch(*a);
  REQUIRE(a->signal(sem, 1, &signal).ok());
  const hw::Completion l = completion_of(*a, launch), c = completion_of(*b, copy);
  const hw::Completion w = completion_of(*b, wait);
  MESSAGE("launch ends ", l.end_cycle, ", wait ends ", w.end_cycle, ", copy starts ", c.start_cycle);
  CHECK(w.end_cycle >= l.end_cycle);
  CHECK(c.start_cycle >= l.end_cycle);
}

TEST_CASE("a high-priority queue gets the cores before a normal one that asked first") {
  auto first = make_queue(), normal = make_queue();
  std::unique_ptr<driver::Queue> high;
  REQUIRE(dev0().create_queue(64, &high, hw::kQPriorityHigh).ok());
  const BusyProgram busy = busy_program(*first);
  const uint64_t hold = busy.launch(*first);  // holds the cores while the other two ask
  // The host acts only between waits on the card (a host-paced card's time advances only while it
  // waits): a short copy on a fourth queue, waited for, lets the launch start before the others ask.
  auto probe = make_queue();
  const uint64_t bytes = 64 << 10;
  const uint64_t dst = alloc(bytes);
  std::unique_ptr<driver::HostBuffer> src;
  REQUIRE(dev0().map_host(bytes, &src).ok());
  uint64_t copy = 0;
  REQUIRE(probe->copy(src->iova(), dst, bytes, hw::kCopySrcHost, &copy).ok());
  REQUIRE(probe->wait(copy).ok());
  const uint64_t n_seq = busy.launch(*normal);
  const uint64_t h_seq = busy.launch(*high);
  const hw::Completion f = completion_of(*first, hold), n = completion_of(*normal, n_seq),
                       h = completion_of(*high, h_seq);
  MESSAGE("ends: first ", f.end_cycle, ", high ", h.end_cycle, ", normal ", n.end_cycle);
  CHECK(h.end_cycle < n.end_cycle);
  CHECK(f.end_cycle < h.end_cycle);  // nobody takes cores that a launch holds
}

TEST_CASE("a wait ends at the policy's timeout or interrupt, and the work goes on") {
  // The launch waits behind a semaphore that only this test raises, so it cannot finish during
  // the waits below however fast or slow the host is.
  auto q = make_queue(), raiser = make_queue();
  const BusyProgram busy = busy_program(*q);
  const uint64_t sem = alloc(8);
  const uint64_t zero = 0;
  upload(*q, sem, &zero, 8);
  uint64_t gate = 0;
  REQUIRE(q->wait_semaphore(sem, 1, &gate).ok());
  const uint64_t seq = busy.launch(*q);
  driver::WaitPolicy policy;
  policy.timeout = std::chrono::milliseconds(1);
  driver::set_wait_policy(policy);
  driver::Status s = q->wait(seq);
  CHECK(s.code() == StatusCode::kTimeout);
  CHECK_MESSAGE(s.message().find("timed out after 0.001 s") != std::string::npos, s.message());
  int asked = 0;
  policy.timeout = {};
  policy.interrupted = [&] {
    ++asked;
    return driver::Status(StatusCode::kInterrupted, "test: interrupted");
  };
  driver::set_wait_policy(policy);
  s = q->wait(seq);
  CHECK(s.code() == StatusCode::kInterrupted);
  CHECK(asked == 1);
  driver::set_wait_policy({});
  uint64_t raised = 0;
  REQUIRE(raiser->signal(sem, 1, &raised).ok());
  CHECK(q->wait(seq).ok());  // nothing was lost: the launch completes
}
