// Firmware unit tests: descriptor validation and the ring protocol against a fake HAL (no SystemC).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "spyre/firmware/firmware.h"
#include "spyre/hw/regs.h"

using namespace spyre;
using hw::ErrorCode;
using hw::Field;

namespace {

constexpr fw::Limits kLimits{1ull << 30, 32};

hw::Descriptor copy(uint64_t src, uint64_t dst, uint64_t size, uint8_t flags = 0) {
  hw::Descriptor d{};
  d.opcode = hw::Opcode::kCopy;
  d.flags = flags;
  d.copy = {src, dst, size, {}};
  return d;
}

hw::Descriptor launch(uint64_t program, uint64_t size, uint64_t mask) {
  hw::Descriptor d{};
  d.opcode = hw::Opcode::kLaunch;
  d.launch.program = program;
  d.launch.program_size = size;
  d.launch.core_mask = mask;
  return d;
}

hw::Descriptor sem(hw::Opcode op, uint64_t addr, uint64_t value) {
  hw::Descriptor d{};
  d.opcode = op;
  d.semaphore.addr = addr;
  d.semaphore.value = value;
  return d;
}

// Host memory as a flat byte array at IOVA 0x10000, registers as a map; copies and launches are recorded.
class FakeHal final : public fw::Hal {
 public:
  static constexpr uint64_t kBase = 0x10000;
  std::vector<uint8_t> host = std::vector<uint8_t>(1 << 16);
  std::map<uint32_t, uint32_t> regs;
  std::vector<hw::CopyArgs> copies;
  int launches = 0;
  int irqs = 0;
  uint64_t cycle = 100;

  uint32_t reg_read(uint32_t off) override {
    if (off == hw::kRegNumQueues) return 2;
    return regs[off];
  }
  void reg_write(uint32_t off, uint32_t v) override { regs[off] = v; }
  std::function<void(uint64_t iova)> on_host_read;  // after each successful read
  bool host_read(uint64_t iova, void* dst, uint32_t n) override {
    if (iova < kBase || iova + n > kBase + host.size()) return false;
    if (on_host_read) on_host_read(iova);
    std::memcpy(dst, &host[iova - kBase], n);
    return true;
  }
  bool host_write(uint64_t iova, const void* src, uint32_t n) override {
    if (iova < kBase || iova + n > kBase + host.size()) return false;
    std::memcpy(&host[iova - kBase], src, n);
    return true;
  }
  std::map<uint64_t, uint64_t> sems;  // device memory: only the semaphores are kept
  bool programs_valid = false;        // a program header read finds a one-core, one-instruction program
  void dev_read(uint64_t addr, void* dst, uint32_t n) override {
    std::memset(dst, 0, n);
    if (programs_valid && n == sizeof(hw::ProgramHeader)) {
      const hw::ProgramHeader h{hw::kProgramMagic, hw::kIsaVersion, 1, 1, 64, 0, 0, 0, 0};
      std::memcpy(dst, &h, sizeof h);
    }
    if (n == 8 && sems.count(addr)) std::memcpy(dst, &sems[addr], 8);
  }
  void dev_write(uint64_t addr, const void* src, uint32_t n) override {
    if (n == 8) std::memcpy(&sems[addr], src, 8);
  }
  uint64_t dev_mem_size() override { return kLimits.mem_size; }
  uint32_t num_cores() override { return kLimits.num_cores; }
  std::vector<uint32_t> priorities;  // of each copy and launch
  std::vector<uint32_t> active;      // queue 0's ACTIVE during each copy
  hw::Verdict copy(const hw::CopyArgs& a, uint8_t, uint32_t priority) override {
    active.push_back(regs[hw::queue_reg(0, hw::kQActive)]);
    copies.push_back(a);
    priorities.push_back(priority);
    return {};
  }
  std::vector<fw::Window> windows;       // of each launch
  std::vector<fw::Arguments> arguments;  // of each launch
  std::vector<uint32_t> launch_queues;   // of each launch
  hw::Verdict launch(uint32_t queue, uint64_t, const fw::Arguments& args, uint64_t, uint32_t priority,
                     const fw::Window& window) override {
    ++launches;
    launch_queues.push_back(queue);
    windows.push_back(window);
    arguments.push_back(args);
    priorities.push_back(priority);
    return {};
  }
  std::vector<hw::SanitizeArgs> sanitized;  // each SANITIZE command handed on
  void sanitize(uint32_t, const hw::SanitizeArgs& a) override { sanitized.push_back(a); }
  void raise_msix(uint32_t) override { ++irqs; }
  uint64_t now_cycles() override { return cycle += 10; }
  void wait_for_work(uint32_t) override {}
  // A wait that is not satisfied: the test's "other queue" signals here, once.
  std::function<void()> on_wait_for_signal;
  int signals = 0;
  bool woken_by_any_card = false;  // what the last wait_for_signal asked for
  void wait_for_signal(uint32_t, bool any_card) override {
    woken_by_any_card = any_card;
    REQUIRE(on_wait_for_signal);
    auto f = std::move(on_wait_for_signal);
    on_wait_for_signal = nullptr;
    f();
  }
  void signalled() override { ++signals; }
  std::vector<std::string> order;  // arm_signal and semaphore reads across PCIe, in turn
  void arm_signal(uint32_t) override { order.emplace_back("arm"); }
  void command_done(uint32_t, const hw::Descriptor&, const hw::Completion&) override {}

  // Queue q: ring at 0x10000 + q * 0x4000, completions 0x2000 above it, fence 0x3000 above it.
  uint64_t ring(uint32_t q) const { return kBase + uint64_t{q} * 0x4000; }
  uint64_t cpl(uint32_t q) const { return ring(q) + 0x2000; }
  uint64_t fence(uint32_t q) const { return ring(q) + 0x3000; }
  void setup_queue(uint32_t q, uint32_t entries) {
    regs[hw::queue_reg(q, hw::kQRingBaseLo)] = static_cast<uint32_t>(ring(q));
    regs[hw::queue_reg(q, hw::kQCplBaseLo)] = static_cast<uint32_t>(cpl(q));
    regs[hw::queue_reg(q, hw::kQFenceLo)] = static_cast<uint32_t>(fence(q));
    regs[hw::queue_reg(q, hw::kQRingEntries)] = entries;
    regs[hw::queue_reg(q, hw::kQStatus)] = hw::kQStatusEnabled;
  }
  void push(uint32_t q, hw::Descriptor d, uint64_t seq) {
    uint32_t& tail = regs[hw::queue_reg(q, hw::kQTail)];
    d.seq = seq;
    const uint32_t entries = regs[hw::queue_reg(q, hw::kQRingEntries)];
    host_write(ring(q) + (tail % entries) * sizeof d, &d, sizeof d);
    ++tail;
  }
  hw::Completion completion(uint32_t q, uint32_t slot) {
    hw::Completion c;
    host_read(cpl(q) + slot * sizeof c, &c, sizeof c);
    return c;
  }
  uint64_t fence_value(uint32_t q) {
    uint64_t v = 0;
    host_read(fence(q), &v, 8);
    return v;
  }
};

}  // namespace

TEST_CASE("valid descriptors pass validation") {
  CHECK(fw::validate_descriptor(copy(0, 4096, 4096), kLimits).ok());
  CHECK(fw::validate_descriptor(copy(0x1234, 0, 100, hw::kCopySrcHost), kLimits).ok());
  CHECK(fw::validate_descriptor(copy(0, 0x99999999999, 100, hw::kCopyDstHost), kLimits).ok());
  CHECK(fw::validate_descriptor(launch(64, 4096, 0xffffffff), kLimits).ok());
  hw::Descriptor nop{};
  CHECK(fw::validate_descriptor(nop, kLimits).ok());
}

TEST_CASE("each malformed field is named") {
  struct Case {
    hw::Descriptor d;
    ErrorCode e;
    Field f;
  };
  const uint64_t mem = kLimits.mem_size;
  std::vector<Case> cases = {
      {copy(mem - 4, 0, 8), ErrorCode::kOutOfRange, Field::kCopySrc},
      {copy(0, mem - 4, 8), ErrorCode::kOutOfRange, Field::kCopyDst},
      {copy(0, ~0ull - 2, 8), ErrorCode::kOutOfRange, Field::kCopyDst},  // wraps around
      {copy(0, 64, 0), ErrorCode::kBadSize, Field::kCopySize},
      {copy(0, 64, hw::kMaxCopyBytes + 1), ErrorCode::kBadSize, Field::kCopySize},
      {copy(0, 64, 8, 0x80), ErrorCode::kBadFlags, Field::kFlags},
      {copy(0, 64, 8, hw::kCopySrcHost | hw::kCopyDstHost), ErrorCode::kBadFlags, Field::kFlags},
      {launch(65, 4096, 1), ErrorCode::kBadAlignment, Field::kLaunchProgram},
      {launch(64, 16, 1), ErrorCode::kBadSize, Field::kLaunchProgramSize},
      {launch(64, 4097, 1), ErrorCode::kBadSize, Field::kLaunchProgramSize},
      {launch(mem - 64, 4096, 1), ErrorCode::kOutOfRange, Field::kLaunchProgram},
      {launch(64, 4096, 0), ErrorCode::kNoSuchCore, Field::kLaunchCoreMask},
      {launch(64, 4096, 1ull << 32), ErrorCode::kNoSuchCore, Field::kLaunchCoreMask},
  };
  hw::Descriptor d = copy(0, 64, 8);
  d.reserved1 = 1;
  cases.push_back({d, ErrorCode::kReservedNonZero, Field::kReserved});
  d = launch(64, 4096, 1);
  d.launch.args = 4;
  cases.push_back({d, ErrorCode::kBadAlignment, Field::kLaunchArgs});
  d = launch(64, 4096, 1);
  d.launch.args_size = uint64_t{8} * 17;
  cases.push_back({d, ErrorCode::kBadSize, Field::kLaunchArgsSize});
  d = launch(64, 4096, 1);
  d.launch.label = mem;
  cases.push_back({d, ErrorCode::kOutOfRange, Field::kLaunchLabel});
  d = copy(0, 64, 8);
  d.copy.label = mem;
  cases.push_back({d, ErrorCode::kOutOfRange, Field::kCopyLabel});
  d = copy(0, 64, 8);
  d.copy.reserved[1] = 1;
  cases.push_back({d, ErrorCode::kReservedNonZero, Field::kReserved});
  d = hw::Descriptor{};
  d.opcode = static_cast<hw::Opcode>(200);
  cases.push_back({d, ErrorCode::kBadOpcode, Field::kOpcode});
  d = hw::Descriptor{};
  d.opcode = hw::Opcode::kTimestamp;
  d.timestamp.dst = 3;
  cases.push_back({d, ErrorCode::kBadAlignment, Field::kTimestampDst});
  for (hw::Opcode op : {hw::Opcode::kSignal, hw::Opcode::kWait}) {
    d = sem(op, 12, 1);
    cases.push_back({d, ErrorCode::kBadAlignment, Field::kSemaphoreAddr});
    d = sem(op, kLimits.mem_size + 8, 1);
    cases.push_back({d, ErrorCode::kOutOfRange, Field::kSemaphoreAddr});
    d = sem(op, kLimits.mem_size, 1);
    cases.push_back({d, ErrorCode::kOutOfRange, Field::kSemaphoreAddr});
    d = sem(op, 64, 1);
    d.semaphore.reserved[3] = 1;
    cases.push_back({d, ErrorCode::kReservedNonZero, Field::kReserved});
    d = sem(op, 64, 1);
    d.flags = op == hw::Opcode::kWait ? 2 : 1;  // a wait takes kWaitHost, a signal nothing
    cases.push_back({d, ErrorCode::kBadFlags, Field::kFlags});
  }
  d = sem(hw::Opcode::kWait, 12, 1);  // across PCIe, still 8-byte aligned
  d.flags = hw::kWaitHost;
  cases.push_back({d, ErrorCode::kBadAlignment, Field::kSemaphoreAddr});

  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    const hw::Verdict v = fw::validate_descriptor(cases[i].d, kLimits);
    CHECK(v.error == cases[i].e);
    CHECK(v.field == cases[i].f);
  }
}

namespace {
hw::Descriptor sanitize(hw::SanitizeAction action, uint64_t base, uint64_t size, uint64_t tag) {
  hw::Descriptor d{};
  d.opcode = hw::Opcode::kSanitize;
  d.sanitize.action = action;
  d.sanitize.base = base;
  d.sanitize.size = size;
  d.sanitize.tag = tag;
  return d;
}
}  // namespace

TEST_CASE("SANITIZE commands are checked field by field and reach the model in queue order") {
  using A = hw::SanitizeAction;
  const uint64_t mem = kLimits.mem_size;
  CHECK(fw::validate_descriptor(sanitize(A::kEnable, 0, 0, hw::kSanitizeMask), kLimits).ok());
  CHECK(fw::validate_descriptor(sanitize(A::kAlloc, mem - 64, 64, 7), kLimits).ok());
  CHECK(fw::validate_descriptor(sanitize(A::kFree, 0, 1, 1), kLimits).ok());
  CHECK(fw::validate_descriptor(sanitize(A::kWatch, 64, 8, 2), kLimits).ok());
  CHECK(fw::validate_descriptor(sanitize(A::kBreak, 64, hw::kBreakHeaderBytes, 0), kLimits).ok());
  CHECK(fw::validate_descriptor(sanitize(A::kUnbreak, 0, 0, 0), kLimits).ok());
  CHECK(fw::validate_descriptor(sanitize(A::kPrintBuffer, 64, hw::kPrintBufferMin, 0), kLimits).ok());
  CHECK(fw::validate_descriptor(sanitize(A::kPrintBuffer, 0, 0, 0), kLimits).ok());  // none
  struct Case {
    hw::Descriptor d;
    ErrorCode e;
    Field f;
  };
  std::vector<Case> cases = {
      {sanitize(static_cast<A>(8), 0, 64, 1), ErrorCode::kBadFlags, Field::kSanitizeAction},
      {sanitize(A::kPrintBuffer, 68, hw::kPrintBufferMin, 0), ErrorCode::kBadAlignment, Field::kSanitizeRange},
      {sanitize(A::kPrintBuffer, 64, hw::kPrintBufferMin - 8, 0), ErrorCode::kBadSize, Field::kSanitizeRange},
      {sanitize(A::kPrintBuffer, mem - 64, hw::kPrintBufferMin, 0), ErrorCode::kOutOfRange, Field::kSanitizeRange},
      {sanitize(A::kPrintBuffer, 64, hw::kPrintBufferMin, 1), ErrorCode::kReservedNonZero, Field::kSanitizeTag},
      {sanitize(A::kWatch, 0, 0, 1), ErrorCode::kBadSize, Field::kSanitizeRange},
      {sanitize(A::kBreak, 0, hw::kBreakHeaderBytes - 8, 0), ErrorCode::kBadSize, Field::kSanitizeRange},
      {sanitize(A::kBreak, mem - 64, hw::kBreakHeaderBytes, 0), ErrorCode::kOutOfRange, Field::kSanitizeRange},
      {sanitize(A::kUnbreak, 0, 0, 3), ErrorCode::kReservedNonZero, Field::kSanitizeRange},
      {sanitize(A::kUnwatch, mem, 8, 1), ErrorCode::kOutOfRange, Field::kSanitizeRange},
      {sanitize(A::kEnable, 64, 0, 1), ErrorCode::kReservedNonZero, Field::kSanitizeRange},
      {sanitize(A::kEnable, 0, 0, 1u << 3), ErrorCode::kBadFlags, Field::kSanitizeTag},
      {sanitize(A::kAlloc, 0, 0, 1), ErrorCode::kBadSize, Field::kSanitizeRange},
      {sanitize(A::kAlloc, mem - 32, 64, 1), ErrorCode::kOutOfRange, Field::kSanitizeRange},
      {sanitize(A::kFree, ~0ull - 8, 64, 1), ErrorCode::kOutOfRange, Field::kSanitizeRange},
      {sanitize(A::kFree, 0, 64, 0), ErrorCode::kBadSize, Field::kSanitizeTag},
  };
  hw::Descriptor d = sanitize(A::kAlloc, 0, 64, 1);
  d.flags = 1;
  cases.push_back({d, ErrorCode::kBadFlags, Field::kFlags});
  d = sanitize(A::kAlloc, 0, 64, 1);
  d.sanitize.reserved[1] = 1;
  cases.push_back({d, ErrorCode::kReservedNonZero, Field::kReserved});
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(i);
    const hw::Verdict v = fw::validate_descriptor(cases[i].d, kLimits);
    CHECK(v.error == cases[i].e);
    CHECK(v.field == cases[i].f);
  }

  FakeHal hal;
  hal.setup_queue(0, 8);
  fw::Firmware firmware(hal);
  hal.push(0, sanitize(A::kAlloc, 128, 64, 5), 1);
  hal.push(0, sanitize(A::kFree, 0, 0, 5), 2);  // malformed: fails the queue, never reaches the model
  hal.push(0, sanitize(A::kFree, 128, 64, 5), 3);
  for (int i = 0; i < 3; ++i) CHECK(firmware.poll_once());
  REQUIRE(hal.sanitized.size() == 1);
  CHECK(hal.sanitized[0].base == 128);
  CHECK(hal.sanitized[0].tag == 5);
  CHECK(hal.completion(0, 1).error == ErrorCode::kBadSize);
  CHECK(hal.completion(0, 2).error == ErrorCode::kQueueInError);
}

TEST_CASE("a launch names its queue to the model (where a sanitizer report of it lands)") {
  FakeHal hal;
  hal.programs_valid = true;
  hal.setup_queue(0, 8);
  hal.setup_queue(2, 8);
  fw::Firmware firmware(hal);
  hal.push(2, launch(64, 4096, 1), 1);
  hal.push(0, launch(64, 4096, 1), 1);
  CHECK(firmware.service_queue(2));
  CHECK(firmware.service_queue(0));
  CHECK(hal.launch_queues == std::vector<uint32_t>{2, 0});
}

TEST_CASE("program headers are checked against the launch") {
  hw::ProgramHeader h{hw::kProgramMagic, hw::kIsaVersion, 2, 10, 64, 0, 0, 0, 0};
  const hw::LaunchArgs l{64, 64 + 10 * 32, 0, 0, 0b11, 0};
  CHECK(fw::validate_program(h, l).ok());
  hw::ProgramHeader bad = h;
  bad.magic = 0;
  CHECK(fw::validate_program(bad, l).field == Field::kLaunchProgram);
  bad = h;
  bad.num_entries = 3;
  CHECK(fw::validate_program(bad, l).field == Field::kLaunchCoreMask);
  bad = h;
  bad.num_instrs = 11;  // runs past program_size
  CHECK(fw::validate_program(bad, l).field == Field::kLaunchProgramSize);
  // A name lies after the code, inside the program, and is shorter than a label.
  hw::LaunchArgs named = l;
  named.program_size += 32;
  bad = h;
  bad.name_offset = 64 + 10 * 32;
  bad.name_size = 20;
  CHECK(fw::validate_program(bad, named).ok());
  bad.name_size = 40;  // past program_size
  CHECK(fw::validate_program(bad, named).field == Field::kLaunchProgram);
  bad.name_offset = 64;  // inside the code
  bad.name_size = 8;
  CHECK(fw::validate_program(bad, named).field == Field::kLaunchProgram);
  // PRINT's format strings: after the code and inside the program, or none (offset 0 too).
  bad = h;
  bad.strings_offset = 64 + 10 * 32;
  bad.strings_size = 32;
  CHECK(fw::validate_program(bad, named).ok());
  bad.strings_size = 33;  // past program_size
  CHECK(fw::validate_program(bad, named).field == Field::kLaunchProgram);
  bad.strings_offset = 96;  // inside the code
  bad.strings_size = 8;
  CHECK(fw::validate_program(bad, named).field == Field::kLaunchProgram);
  bad.strings_size = 0;  // an offset without strings
  CHECK(fw::validate_program(bad, named).field == Field::kLaunchProgram);
}

TEST_CASE("the firmware runs a ring: completions, fence, head, interrupts") {
  FakeHal hal;
  hal.setup_queue(0, 4);
  fw::Firmware firmware(hal);
  for (uint64_t seq = 1; seq <= 6; ++seq) {  // wraps the 4-entry ring
    hal.push(0, copy(0, 64 * seq, 8), seq);
    CHECK(firmware.poll_once());
    const hw::Completion c = hal.completion(0, static_cast<uint32_t>((seq - 1) % 4));
    CHECK(c.seq == seq);
    CHECK(c.error == ErrorCode::kOk);
    CHECK(c.end_cycle > c.start_cycle);
    CHECK(hal.fence_value(0) == seq);
  }
  CHECK_FALSE(firmware.poll_once());
  CHECK(hal.copies.size() == 6);
  CHECK(hal.copies[5].dst == 64 * 6);
  CHECK(hal.regs[hw::queue_reg(0, hw::kQHead)] == 6);
  CHECK(hal.irqs == 6);
}

TEST_CASE("an error stops only its queue, and later descriptors complete as not executed") {
  FakeHal hal;
  hal.setup_queue(0, 8);
  hal.setup_queue(1, 8);
  fw::Firmware firmware(hal);
  hal.push(0, copy(0, kLimits.mem_size, 8), 1);  // bad destination
  hal.push(0, copy(0, 64, 8), 2);                // fine, but after the error
  hal.push(1, copy(0, 64, 8), 1);
  while (firmware.poll_once()) {
  }
  hw::Completion c = hal.completion(0, 0);
  CHECK(c.error == ErrorCode::kOutOfRange);
  CHECK(c.field == Field::kCopyDst);
  c = hal.completion(0, 1);
  CHECK(c.error == ErrorCode::kQueueInError);
  CHECK(hal.fence_value(0) == 2);  // waiters are released either way
  const uint32_t status = hal.regs[hw::queue_reg(0, hw::kQStatus)];
  CHECK((status & hw::kQStatusError) != 0);
  CHECK((status >> 16) == static_cast<uint32_t>(ErrorCode::kOutOfRange));
  CHECK(hal.completion(1, 0).error == ErrorCode::kOk);
  CHECK(hal.copies.size() == 1);  // only queue 1's copy ran
}

TEST_CASE("an unreachable completion ring halts the queue and wakes the host") {
  FakeHal hal;
  hal.setup_queue(0, 4);
  hal.regs[hw::queue_reg(0, hw::kQCplBaseLo)] = 0x100;  // outside host memory
  hal.push(0, copy(0, 64, 8), 1);
  hal.push(0, copy(0, 64, 8), 2);
  fw::Firmware firmware(hal);
  CHECK(firmware.poll_once());
  const uint32_t status = hal.regs[hw::queue_reg(0, hw::kQStatus)];
  CHECK((status & hw::kQStatusHalted) != 0);
  CHECK((status >> 16) == static_cast<uint32_t>(ErrorCode::kDmaFault));
  CHECK(hal.regs[hw::queue_reg(0, hw::kQHead)] == 2);  // everything dropped
  CHECK(hal.irqs == 1);
  CHECK_FALSE(firmware.poll_once());
}

TEST_CASE("a doorbell more than a ring ahead halts only its queue, without running stale slots") {
  FakeHal hal;
  hal.setup_queue(0, 4);
  hal.setup_queue(1, 4);
  for (uint64_t seq = 1; seq <= 4; ++seq) hal.push(0, copy(0, 64 * seq, 8), seq);
  hal.regs[hw::queue_reg(0, hw::kQTail)] = 5;  // one past a full ring: slot 0 would run twice
  hal.push(1, copy(0, 64, 8), 1);
  fw::Firmware firmware(hal);
  while (firmware.poll_once()) {
  }
  const uint32_t status = hal.regs[hw::queue_reg(0, hw::kQStatus)];
  CHECK((status & hw::kQStatusHalted) != 0);
  CHECK((status >> 16) == static_cast<uint32_t>(ErrorCode::kRingOverrun));
  CHECK(hal.regs[hw::queue_reg(0, hw::kQHead)] == 5);
  CHECK(hal.fence_value(0) == 0);
  REQUIRE(hal.copies.size() == 1);  // queue 1's copy only
  CHECK(hal.fence_value(1) == 1);
  // A full ring, exactly, is fine.
  FakeHal full;
  full.setup_queue(0, 4);
  for (uint64_t seq = 1; seq <= 4; ++seq) full.push(0, copy(0, 64 * seq, 8), seq);
  fw::Firmware fw_full(full);
  while (fw_full.poll_once()) {
  }
  CHECK(full.fence_value(0) == 4);
  CHECK(full.copies.size() == 4);
}

TEST_CASE("a sequence number that does not move forward halts the queue and leaves the fence") {
  for (const uint64_t bad : {uint64_t{0}, uint64_t{2}, uint64_t{1}}) {
    CAPTURE(bad);
    FakeHal hal;
    hal.setup_queue(0, 8);
    fw::Firmware firmware(hal);
    if (bad == 0) {
      hal.push(0, copy(0, 64, 8), 0);  // the first descriptor of a ring must be above 0
    } else {
      hal.push(0, copy(0, 64, 8), 1);
      hal.push(0, copy(0, 64, 8), 2);
      hal.push(0, copy(0, 64, 8), bad);  // repeats or goes back
      hal.push(0, copy(0, 64, 8), 9);
    }
    while (firmware.poll_once()) {
    }
    const uint32_t status = hal.regs[hw::queue_reg(0, hw::kQStatus)];
    CHECK((status & hw::kQStatusHalted) != 0);
    CHECK((status >> 16) == static_cast<uint32_t>(ErrorCode::kBadSequence));
    CHECK(hal.fence_value(0) == (bad == 0 ? 0 : 2));  // never written backwards
    CHECK(hal.copies.size() == (bad == 0 ? 0u : 2u));
  }
  // After a reset the ring's sequence may start again.
  FakeHal hal;
  hal.setup_queue(0, 8);
  fw::Firmware firmware(hal);
  hal.push(0, copy(0, 64, 8), 5);
  CHECK(firmware.poll_once());
  hal.regs[hw::queue_reg(0, hw::kQResets)] = 1;
  hal.regs[hw::queue_reg(0, hw::kQHead)] = hal.regs[hw::queue_reg(0, hw::kQTail)] = 0;
  hal.push(0, copy(0, 64, 8), 1);
  CHECK(firmware.poll_once());
  CHECK(hal.fence_value(0) == 1);
  CHECK((hal.regs[hw::queue_reg(0, hw::kQStatus)] & hw::kQStatusHalted) == 0);
}

TEST_CASE("disabled queues are left alone") {
  FakeHal hal;
  hal.setup_queue(0, 4);
  hal.regs[hw::queue_reg(0, hw::kQStatus)] = 0;
  hal.push(0, copy(0, 64, 8), 1);
  fw::Firmware firmware(hal);
  CHECK_FALSE(firmware.poll_once());
}

TEST_CASE("a wait holds its queue until another queue's signal reaches the value") {
  FakeHal hal;
  hal.setup_queue(0, 8);
  hal.setup_queue(1, 8);
  fw::Firmware firmware(hal);
  hal.push(0, sem(hw::Opcode::kWait, 256, 2), 1);
  hal.push(0, copy(0, 64, 8), 2);
  hal.push(1, sem(hw::Opcode::kSignal, 256, 1), 1);  // not enough
  hal.push(1, sem(hw::Opcode::kSignal, 256, 2), 2);
  CHECK(firmware.service_queue(1));
  CHECK(hal.sems[256] == 1);
  // Queue 0 sleeps in its wait; while it sleeps, queue 1 runs its second signal.
  int wakes = 0;
  hal.on_wait_for_signal = [&] {
    ++wakes;
    CHECK(hal.copies.empty());  // the copy behind the wait has not run
    CHECK(firmware.service_queue(1));
  };
  CHECK(firmware.service_queue(0));
  CHECK(wakes == 1);
  CHECK(hal.completion(0, 0).error == ErrorCode::kOk);
  CHECK(firmware.service_queue(0));
  CHECK(hal.copies.size() == 1);
  CHECK(hal.fence_value(0) == 2);
  CHECK(hal.signals == 2);
  // A timeline never goes back: a lower value leaves it as it is, and a wait for it passes at once.
  hal.push(1, sem(hw::Opcode::kSignal, 256, 1), 3);
  hal.push(0, sem(hw::Opcode::kWait, 256, 1), 3);
  CHECK(firmware.service_queue(1));
  CHECK(hal.sems[256] == 2);
  CHECK(firmware.service_queue(0));
  CHECK(hal.fence_value(0) == 3);
}

TEST_CASE("a wait across PCIe reads another card's semaphore by DMA and wakes on any card's signal") {
  FakeHal hal;
  hal.setup_queue(0, 8);
  fw::Firmware firmware(hal);
  const uint64_t iova = FakeHal::kBase + 0x8000;  // the other card's semaphore, as this card reaches it
  const auto put = [&](uint64_t v) { std::memcpy(&hal.host[iova - FakeHal::kBase], &v, 8); };
  put(1);
  hw::Descriptor wait = sem(hw::Opcode::kWait, iova, 3);
  wait.flags = hw::kWaitHost;
  hal.push(0, wait, 1);
  hal.push(0, copy(0, 64, 8), 2);
  int reads = 0;
  hal.on_host_read = [&](uint64_t at) {
    reads += at == iova;
    if (at == iova) hal.order.emplace_back("read");
  };
  hal.on_wait_for_signal = [&] {
    CHECK(hal.copies.empty());
    put(3);  // the other card raised it
  };
  CHECK(firmware.service_queue(0));
  CHECK(hal.woken_by_any_card);
  CHECK(reads == 2);  // before the sleep and after it
  // Armed before each read: a signal raised while a read crosses PCIe ends the sleep that follows
  // (a wait across cards once slept for good when the awaited signal came during its read).
  CHECK(hal.order == std::vector<std::string>{"arm", "read", "arm", "read"});
  CHECK(hal.completion(0, 0).error == ErrorCode::kOk);
  CHECK(hal.sems.empty());  // nothing read or written in this card's memory
  CHECK(firmware.service_queue(0));
  CHECK(hal.copies.size() == 1);
  // Where the IOMMU refuses the address, the wait fails as a DMA fault naming the semaphore.
  hw::Descriptor stray = sem(hw::Opcode::kWait, 0x8, 1);
  stray.flags = hw::kWaitHost;
  hal.push(0, stray, 3);
  CHECK(firmware.service_queue(0));
  CHECK(hal.completion(0, 2).error == ErrorCode::kDmaFault);
  CHECK(hal.completion(0, 2).field == hw::Field::kSemaphoreAddr);
}

TEST_CASE("a signal takes no flags: it raises a semaphore of its own card") {
  FakeHal hal;
  hal.setup_queue(0, 8);
  fw::Firmware firmware(hal);
  hw::Descriptor signal = sem(hw::Opcode::kSignal, 256, 1);
  signal.flags = hw::kWaitHost;
  hal.push(0, signal, 1);
  CHECK(firmware.service_queue(0));
  CHECK(hal.completion(0, 0).error == ErrorCode::kBadFlags);
  CHECK(hal.sems.count(256) == 0);
}

TEST_CASE("a queue reset while it waits drops the wait without a completion") {
  FakeHal hal;
  hal.setup_queue(0, 8);
  fw::Firmware firmware(hal);
  hal.push(0, sem(hw::Opcode::kWait, 256, 5), 7);
  hal.on_wait_for_signal = [&] {  // the host resets the queue: head = tail = 0, one more reset
    hal.regs[hw::queue_reg(0, hw::kQHead)] = 0;
    hal.regs[hw::queue_reg(0, hw::kQTail)] = 0;
    ++hal.regs[hw::queue_reg(0, hw::kQResets)];
  };
  CHECK(firmware.service_queue(0));
  CHECK(hal.fence_value(0) == 0);
  CHECK(hal.completion(0, 0).seq == 0);
  CHECK(hal.regs[hw::queue_reg(0, hw::kQHead)] == 0);
}

TEST_CASE("a queue in error still signals, so its waiters go on") {
  FakeHal hal;
  hal.setup_queue(0, 8);
  fw::Firmware firmware(hal);
  hal.push(0, copy(0, kLimits.mem_size, 8), 1);  // fails
  hal.push(0, sem(hw::Opcode::kSignal, 512, 4), 2);
  CHECK(firmware.service_queue(0));
  CHECK(firmware.service_queue(0));
  CHECK(hal.completion(0, 1).error == ErrorCode::kQueueInError);
  CHECK(hal.sems[512] == 4);
}

TEST_CASE("copies and launches carry their queue's priority") {
  FakeHal hal;
  hal.setup_queue(0, 8);
  hal.setup_queue(1, 8);
  hal.regs[hw::queue_reg(1, hw::kQPriority)] = hw::kQPriorityHigh;
  fw::Firmware firmware(hal);
  hal.push(0, copy(0, 64, 8), 1);
  hal.push(1, copy(0, 64, 8), 1);
  CHECK(firmware.service_queue(0));
  CHECK(firmware.service_queue(1));
  CHECK(hal.priorities == std::vector<uint32_t>{hw::kQPriorityNormal, hw::kQPriorityHigh});
}

namespace {
void set64(FakeHal& hal, uint32_t lo, uint64_t v) {
  hal.regs[lo] = static_cast<uint32_t>(v);
  hal.regs[lo + 4] = static_cast<uint32_t>(v >> 32);
}
hw::Descriptor timestamp(uint64_t dst) {
  hw::Descriptor d{};
  d.opcode = hw::Opcode::kTimestamp;
  d.timestamp.dst = dst;
  return d;
}
}  // namespace

TEST_CASE("a queue's windows bound the device memory and host memory its descriptors name") {
  // Device window [1 MiB, 2 MiB), IOVA window [0x10000, 0x11000).
  constexpr uint64_t lo = 1 << 20, hi = 2 << 20, iova = FakeHal::kBase;
  const fw::Limits lim{hi - lo, 32, lo, iova, 0x1000};
  const struct {
    hw::Descriptor d;
    ErrorCode error;
    Field field;
  } cases[] = {
      {copy(lo, lo + 64, 8), ErrorCode::kOk, Field::kNone},
      {copy(lo - 8, lo, 8), ErrorCode::kOutOfRange, Field::kCopySrc},
      {copy(lo, hi, 8), ErrorCode::kOutOfRange, Field::kCopyDst},
      {copy(hi - 4, lo, 8), ErrorCode::kOutOfRange, Field::kCopySrc},  // straddles the end
      {copy(0, lo, 8), ErrorCode::kOutOfRange, Field::kCopySrc},       // all of memory is not its
      {copy(iova, lo, 8, hw::kCopySrcHost), ErrorCode::kOk, Field::kNone},
      {copy(iova + 0x1000, lo, 8, hw::kCopySrcHost), ErrorCode::kDmaFault, Field::kCopySrc},
      {copy(lo, iova - 8, 16, hw::kCopyDstHost), ErrorCode::kDmaFault, Field::kCopyDst},
      {sem(hw::Opcode::kSignal, 8, 1), ErrorCode::kOutOfRange, Field::kSemaphoreAddr},
      {sem(hw::Opcode::kWait, lo + 8, 1), ErrorCode::kOk, Field::kNone},
      {launch(64, 4096, 1), ErrorCode::kOutOfRange, Field::kLaunchProgram},
      {launch(lo + 64, 4096, 1), ErrorCode::kOk, Field::kNone},
      {launch(hi - 64, 4096, 1), ErrorCode::kOutOfRange, Field::kLaunchProgram},
      {timestamp(iova + 8), ErrorCode::kOk, Field::kNone},
      {timestamp(iova + 0x1000), ErrorCode::kDmaFault, Field::kTimestampDst},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    CAPTURE(i);
    const hw::Verdict v = fw::validate_descriptor(cases[i].d, lim);
    CHECK(v.error == cases[i].error);
    CHECK(v.field == cases[i].field);
  }
}

TEST_CASE("the firmware reads each queue's windows from the management page and hands launches theirs") {
  FakeHal hal;
  hal.programs_valid = true;
  hal.setup_queue(0, 8);
  hal.setup_queue(1, 8);
  constexpr uint64_t lo = 1 << 20;
  set64(hal, hw::mgmt_reg(0, hw::kMQMemBaseLo), lo);
  set64(hal, hw::mgmt_reg(0, hw::kMQMemSizeLo), lo);
  set64(hal, hw::mgmt_reg(0, hw::kMQIovaBaseLo), hal.ring(0));
  set64(hal, hw::mgmt_reg(0, hw::kMQIovaSizeLo), 0x4000);
  fw::Firmware firmware(hal);
  hal.push(0, launch(lo + 64, 4096, 1), 1);
  hal.push(1, launch(64, 4096, 1), 1);  // queue 1 has no window: all of device memory
  CHECK(firmware.service_queue(0));
  CHECK(firmware.service_queue(1));
  REQUIRE(hal.windows.size() == 2);
  CHECK(hal.windows[0].base == lo);
  CHECK(hal.windows[0].size == lo);
  CHECK(hal.windows[1].base == 0);
  CHECK(hal.windows[1].size == kLimits.mem_size);
  // Queue 1 may reach queue 0's window; queue 0 may not reach below its own.
  hal.push(1, copy(0, lo, 8), 2);
  hal.push(0, copy(lo, 0, 8), 2);
  CHECK(firmware.service_queue(1));
  CHECK(firmware.service_queue(0));
  CHECK(hal.completion(1, 1).error == ErrorCode::kOk);
  CHECK(hal.completion(0, 1).error == ErrorCode::kOutOfRange);
  CHECK(hal.completion(0, 1).field == Field::kCopyDst);
  // A window that ends past device memory is clipped to it.
  set64(hal, hw::mgmt_reg(1, hw::kMQMemBaseLo), kLimits.mem_size - lo);
  set64(hal, hw::mgmt_reg(1, hw::kMQMemSizeLo), 4 * lo);
  hal.push(1, launch(kLimits.mem_size - lo + 64, 4096, 1), 3);
  CHECK(firmware.service_queue(1));
  REQUIRE(hal.windows.size() == 3);
  CHECK(hal.windows[2].size == lo);
}

TEST_CASE("a ring outside the queue's IOVA window halts the queue with a DMA fault") {
  FakeHal hal;
  hal.setup_queue(0, 8);
  set64(hal, hw::mgmt_reg(0, hw::kMQIovaBaseLo), hal.ring(0));
  set64(hal, hw::mgmt_reg(0, hw::kMQIovaSizeLo), 0x3000);  // the fence, at ring + 0x3000, is outside
  hal.push(0, copy(0, 64, 8), 1);
  fw::Firmware firmware(hal);
  CHECK(firmware.poll_once());
  const uint32_t status = hal.regs[hw::queue_reg(0, hw::kQStatus)];
  CHECK((status & hw::kQStatusHalted) != 0);
  CHECK((status >> 16) == static_cast<uint32_t>(ErrorCode::kDmaFault));
  CHECK(hal.copies.empty());
}

TEST_CASE("ACTIVE is set while a command of the queue executes, and only then") {
  FakeHal hal;
  hal.setup_queue(0, 8);
  fw::Firmware firmware(hal);
  hal.push(0, copy(0, 64, 8), 1);
  hal.push(0, copy(0, 1ull << 40, 8), 2);  // refused by validation: never executes
  CHECK(firmware.service_queue(0));
  CHECK(hal.regs[hw::queue_reg(0, hw::kQActive)] == 0);
  CHECK(firmware.service_queue(0));
  CHECK(hal.active == std::vector<uint32_t>{1});
  CHECK(hal.regs[hw::queue_reg(0, hw::kQActive)] == 0);
}

TEST_CASE("a launch reads its arguments from host memory when the descriptor says so") {
  FakeHal hal;
  hal.programs_valid = true;
  hal.setup_queue(0, 8);
  set64(hal, hw::mgmt_reg(0, hw::kMQIovaBaseLo), FakeHal::kBase);
  set64(hal, hw::mgmt_reg(0, hw::kMQIovaSizeLo), 0x8000);
  const uint64_t at = FakeHal::kBase + 0x5000;  // inside the IOVA window, beside queue 0's rings
  const uint64_t values[3] = {0x1000, 42, ~0ull};
  std::memcpy(&hal.host[at - FakeHal::kBase], values, sizeof values);
  fw::Firmware firmware(hal);

  hw::Descriptor d = launch(64, 4096, 1);
  d.flags = hw::kLaunchArgsHost;
  d.launch.args = at;
  d.launch.args_size = sizeof values;
  hal.push(0, d, 1);
  CHECK(firmware.service_queue(0));
  CHECK(hal.completion(0, 0).error == ErrorCode::kOk);
  REQUIRE(hal.arguments.size() == 1);
  CHECK(hal.arguments[0].from_host);
  CHECK(hal.arguments[0].size == sizeof values);
  CHECK(hal.arguments[0].values[0] == values[0]);
  CHECK(hal.arguments[0].values[1] == values[1]);
  CHECK(hal.arguments[0].values[2] == values[2]);

  // Without the flag the same address is device memory, left for the cores to read.
  d.flags = 0;
  d.launch.args = 0x2000;
  hal.push(0, d, 2);
  CHECK(firmware.service_queue(0));
  REQUIRE(hal.arguments.size() == 2);
  CHECK_FALSE(hal.arguments[1].from_host);
  CHECK(hal.arguments[1].addr == 0x2000);

  // Host arguments outside the queue's IOVA window are a DMA fault, and nothing runs.
  d.flags = hw::kLaunchArgsHost;
  d.launch.args = FakeHal::kBase + 0x9000;
  hal.push(0, d, 3);
  CHECK(firmware.service_queue(0));
  CHECK(hal.completion(0, 2).error == ErrorCode::kDmaFault);
  CHECK(hal.completion(0, 2).field == Field::kLaunchArgs);
  CHECK(hal.arguments.size() == 2);
}

TEST_CASE("a launch flag other than host arguments is refused") {
  hw::Descriptor d = launch(64, 4096, 1);
  d.flags = 2;
  const hw::Verdict v = fw::validate_descriptor(d, kLimits);
  CHECK(v.error == ErrorCode::kBadFlags);
  CHECK(v.field == Field::kFlags);
}

TEST_CASE("a queue reset while a launch reads its host arguments drops the launch") {
  FakeHal hal;
  hal.programs_valid = true;
  hal.setup_queue(0, 8);
  const uint64_t at = FakeHal::kBase + 0x5000;
  hal.on_host_read = [&](uint64_t iova) {
    if (iova == at) ++hal.regs[hw::queue_reg(0, hw::kQResets)];  // the host resets the queue meanwhile
  };
  fw::Firmware firmware(hal);
  hw::Descriptor d = launch(64, 4096, 1);
  d.flags = hw::kLaunchArgsHost;
  d.launch.args = at;
  d.launch.args_size = 16;
  hal.push(0, d, 1);
  CHECK(firmware.service_queue(0));
  CHECK(hal.launches == 0);
  CHECK(hal.fence_value(0) == 0);  // no completion either
}
