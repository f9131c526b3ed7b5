// libFuzzer target: the firmware's descriptor parser and its command rings.
//
// Input (little endian; a short input reads as zero-padded):
//   1. Descriptor (64 bytes) | u64 dev_mem_size | u8 num_cores | ProgramHeader (32 bytes)
//      validate_descriptor() runs on the descriptor under those limits, validate_program() on the
//      header when the descriptor is a launch. The limits and the header are also the card's in 2.
//   2. For each of kQueues queues (23 bytes each):
//        u8 mode | u32 entries | u32 head | u32 resets | u8 status | u8 priority | u64 first_seq
//      RING_ENTRIES is 1 << (mode & 31), or `entries` as it is when mode bit 7 is set. HEAD = TAIL
//      = `head`; STATUS bits 0..2 from `status` (enabled, error, halted). The descriptor ring is at
//      kHostBase + q * 0x8000, completions 0x4000 above it, the fence 0x7000 above it, in 64 KiB
//      of host memory that the fake IOMMU maps; anything else is a DMA fault.
//   3. Host actions until the input ends, each an op byte (bits 0..3 the action, bits 4..6 its
//      flags, bit 7 the queue) and its operands:
//        0 service  Firmware::service_queue(q), then the checks below
//        1 push     Descriptor (64 bytes) written at the slot of TAIL; flag 0x10: its seq is the
//                   queue's next; flag 0x20: then ring the doorbell (TAIL + 1)
//        2 doorbell u8 n: TAIL += n (free-running, so a large n overruns the ring)
//        3 control  u8 v: CONTROL = v (bit 0 enable, bit 1 reset: HEAD = TAIL = 0, error cleared)
//        4 register u8 which, u32 value: one of the host's rw queue registers (ring, entries,
//                   completions, fence, vector, priority, tail)
//        5 drain    service_queue(q) until it returns false
//        others     service
//      Then every queue is drained. While a command runs, the fake HAL reads one more byte for
//      each copy or launch (below 0xd0 it succeeds, below 0xe0 the host resets the queue while it
//      runs, above that it faults) and each semaphore wait (signalled, queue reset, or woken for
//      nothing).
//
// Invariants (each a FUZZ_CHECK, so a violation is a crash file):
//   - an accepted descriptor has every property of fuzz_support.h (nothing outside device memory);
//     a rejected one blames a field of its own kind; the same for the program header;
//   - HEAD moves by one per completion or jumps to TAIL when the queue halts, never past TAIL; a
//     completion is written at HEAD's slot before HEAD moves, and the fence after it;
//   - the fence never moves backwards between resets, and always echoes the completed seq;
//   - a doorbell more than a ring ahead, or a ring size that is not a power of two in range,
//     halts the queue without fetching; a halted queue runs nothing until it is reset;
//   - a descriptor the host wrote once completes at most once (a queue halts rather than running
//     a slot twice), and a queue in the error state executes nothing but reports every command;
//   - copies, launches and semaphore writes reach the HAL only for accepted descriptors, with the
//     queue's priority; a semaphore only grows; no register but HEAD and STATUS is written, and
//     STATUS bits are never cleared by the firmware; after a reset, nothing of the old command is
//     written.
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "fuzz_support.h"
#include "spyre/hw/regs.h"

using namespace spyre;
using hw::ErrorCode;

namespace {

constexpr uint32_t kQueues = 2;
constexpr uint64_t kHostBase = 0x10000;
constexpr uint64_t kHostBytes = 64 << 10;
constexpr uint64_t kQueueSpan = 0x8000;
constexpr int kMaxServices = 4096;  // per input, to keep every run short
constexpr int kMaxWakeups = 4;      // spurious wakeups of one semaphore wait before it is signalled

constexpr uint32_t kHostRegs[] = {hw::kQRingBaseLo, hw::kQRingBaseHi, hw::kQRingEntries, hw::kQCplBaseLo,
                                  hw::kQCplBaseHi,  hw::kQFenceLo,    hw::kQFenceHi,     hw::kQMsixVector,
                                  hw::kQPriority,   hw::kQTail};

bool usable_ring(uint32_t entries) {
  return entries >= hw::kMinRingEntries && entries <= hw::kMaxRingEntries && (entries & (entries - 1)) == 0;
}

// A card around the firmware: registers as an array, host memory as a byte array behind a fake
// IOMMU, device memory holding only semaphores and the one program header. It is also the host
// that writes descriptors and rings doorbells, and it checks every firmware access against the
// queue protocol (docs/hardware-interface.md) as it happens.
class Card final : public fw::Hal {
 public:
  Card(fuzz::Input& in, const fw::Limits& limits, const hw::ProgramHeader& program)
      : in_(in), limits_(limits), program_(program), host_(kHostBytes) {}

  void setup_queue(uint32_t q) {
    const auto mode = in_.take<uint8_t>();
    const auto entries = in_.take<uint32_t>();
    const auto head = in_.take<uint32_t>();
    const auto resets = in_.take<uint32_t>();
    const auto status = in_.take<uint8_t>();
    const auto priority = in_.take<uint8_t>();
    next_seq_[q] = in_.take<uint64_t>();
    const uint64_t ring = kHostBase + q * kQueueSpan;
    reg(q, hw::kQRingBaseLo) = static_cast<uint32_t>(ring);
    reg(q, hw::kQCplBaseLo) = static_cast<uint32_t>(ring + 0x4000);
    reg(q, hw::kQFenceLo) = static_cast<uint32_t>(ring + 0x7000);
    reg(q, hw::kQRingEntries) = (mode & 0x80) ? entries : 1u << (mode & 31);
    reg(q, hw::kQHead) = reg(q, hw::kQTail) = head;
    reg(q, hw::kQResets) = resets;
    reg(q, hw::kQStatus) = status & 7u;
    if (status & hw::kQStatusHalted) reg(q, hw::kQStatus) |= hw::kQStatusError;  // as the firmware halts
    if (status & (hw::kQStatusError | hw::kQStatusHalted)) {
      reg(q, hw::kQStatus) |= static_cast<uint32_t>(ErrorCode::kBadOpcode) << 16;
    }
    reg(q, hw::kQPriority) = priority & 1u;
    reg(q, hw::kQMsixVector) = q + 1;
  }

  // ---- the host ----

  void push(uint32_t q, hw::Descriptor d, bool next_seq) {
    host_acted();
    if (next_seq) d.seq = next_seq_[q]++;
    const uint32_t entries = reg(q, hw::kQRingEntries);
    const uint32_t tail = reg(q, hw::kQTail);
    const uint32_t slot = usable_ring(entries) ? tail & (entries - 1) : entries != 0 ? tail % entries : 0;
    const uint64_t iova = base(q, hw::kQRingBaseLo) + uint64_t{slot} * sizeof d;
    if (!mapped(iova, sizeof d)) return;  // the host wrote where the card cannot read
    std::memcpy(&host_[iova - kHostBase], &d, sizeof d);
    forget_pushes(iova, sizeof d);
    pushed_[iova] = ++pushes_;
  }

  void doorbell(uint32_t q, uint32_t n) {
    host_acted();
    reg(q, hw::kQTail) += n;
  }

  void control(uint32_t q, uint8_t v) {
    host_acted();
    uint32_t& status = reg(q, hw::kQStatus);
    status = (status & ~hw::kQStatusEnabled) | (v & hw::kQControlEnable);
    if (v & hw::kQControlReset) reset(q);
  }

  void set_register(uint32_t q, uint8_t which, uint32_t value) {
    host_acted();
    reg(q, kHostRegs[which % (sizeof kHostRegs / sizeof kHostRegs[0])]) = value;
  }

  /// One service_queue() call, checked before, during and after.
  bool service(fw::Firmware& firmware, uint32_t q) {
    // A queue found idle stays idle until the host acts: calling again would only cost time.
    if (services_ >= kMaxServices || idle_[q]) return false;
    ++services_;
    call_ = Call{};
    call_.q = q;
    call_.status = reg(q, hw::kQStatus);
    call_.head = reg(q, hw::kQHead);
    call_.tail = reg(q, hw::kQTail);
    call_.entries = reg(q, hw::kQRingEntries);
    in_call_ = true;
    const bool ran = firmware.service_queue(q);
    in_call_ = false;
    check_call(ran);
    idle_[q] = !ran;
    return ran;
  }

  // ---- the HAL ----

  uint32_t reg_read(uint32_t off) override {
    FUZZ_CHECK(off % 4 == 0, "register 0x%x", off);
    if (off == hw::kRegNumQueues) return kQueues;
    return off / 4 < kRegWords ? regs_[off / 4] : 0;
  }

  void reg_write(uint32_t off, uint32_t v) override {
    FUZZ_CHECK(in_call_, "register 0x%x written outside service_queue", off);
    if (off == hw::queue_reg(call_.q, hw::kQActive)) {  // around a copy or a launch; a reset does not stop it
      FUZZ_CHECK(v == (call_.executing ? 0u : 1u), "ACTIVE %u while %s", v, call_.executing ? "executing" : "idle");
      call_.executing = v == 1;
      return;
    }
    FUZZ_CHECK(off == hw::queue_reg(call_.q, hw::kQHead) || off == hw::queue_reg(call_.q, hw::kQStatus),
               "firmware wrote register 0x%x serving queue %u", off, call_.q);
    FUZZ_CHECK(!call_.executing, "register 0x%x written while ACTIVE", off);
    FUZZ_CHECK(!call_.reset, "register 0x%x written after the queue was reset", off);
    uint32_t& r = regs_[off / 4];
    if (off == hw::queue_reg(call_.q, hw::kQStatus)) {
      FUZZ_CHECK((r & ~v & 0xffffu) == 0, "STATUS 0x%x -> 0x%x clears a bit", r, v);
      FUZZ_CHECK(!(v & hw::kQStatusError) || ((v >> 16) != 0 && (v >> 16) < static_cast<uint32_t>(ErrorCode::kCount)),
                 "STATUS 0x%x: error without a code", v);
      r = v;
      return;
    }
    // Before a completion record is in place, or after HEAD moved past it (the fence was
    // refused), the only HEAD write allowed is a halt's.
    if (!call_.cpl_written || call_.head_moved) {
      FUZZ_CHECK(v == call_.tail, "a halt sets HEAD %u, not TAIL %u", v, call_.tail);
      FUZZ_CHECK((reg(call_.q, hw::kQStatus) & (hw::kQStatusHalted | hw::kQStatusError)) ==
                     (hw::kQStatusHalted | hw::kQStatusError),
                 "HEAD = TAIL without a halt (STATUS 0x%x)", reg(call_.q, hw::kQStatus));
      call_.halted = true;
    } else {
      FUZZ_CHECK(call_.head != call_.tail && v == call_.head + 1, "HEAD %u -> %u with TAIL %u", call_.head, v,
                 call_.tail);
      FUZZ_CHECK(usable_ring(call_.entries) && call_.tail - call_.head <= call_.entries,
                 "a command ran with HEAD %u, TAIL %u and %u entries", call_.head, call_.tail, call_.entries);
      call_.head_moved = true;
    }
    r = v;
  }

  bool host_read(uint64_t iova, void* dst, uint32_t n) override {
    if (in_call_ && call_.fetched && call_.d.opcode == hw::Opcode::kWait) {  // another card's semaphore
      FUZZ_CHECK((call_.d.flags & hw::kWaitHost) && iova == call_.d.semaphore.addr && n == 8,
                 "a wait's host read of %u bytes at 0x%llx", n, (unsigned long long)iova);
      fuzz::check_descriptor_safe(call_.d, limits_);
      if (!mapped(iova, n)) return false;
      std::memcpy(dst, &sems_[iova], 8);  // the semaphores of this card and the others, by address
      return true;
    }
    if (in_call_ && call_.fetched) {  // only a launch's arguments, once, after its program header
      const hw::LaunchArgs& l = call_.d.launch;
      FUZZ_CHECK(call_.d.opcode == hw::Opcode::kLaunch && (call_.d.flags & hw::kLaunchArgsHost) && call_.program_read &&
                     !call_.args_read && iova == l.args && n == l.args_size,
                 "host read of %u bytes at 0x%llx", n, (unsigned long long)iova);
      fuzz::check_descriptor_safe(call_.d, limits_);
      call_.args_read = true;
      if (!mapped(iova, n)) return false;
      std::memcpy(dst, &host_[iova - kHostBase], n);
      return true;
    }
    FUZZ_CHECK(in_call_ && n == sizeof(hw::Descriptor), "host read of %u bytes", n);
    FUZZ_CHECK(!call_.fetched, "two descriptors fetched in one service_queue");
    FUZZ_CHECK(usable_ring(call_.entries) && call_.tail - call_.head <= call_.entries,
               "fetch with HEAD %u, TAIL %u and %u entries", call_.head, call_.tail, call_.entries);
    const uint64_t slot = call_.head & (call_.entries - 1);
    FUZZ_CHECK(iova == base(call_.q, hw::kQRingBaseLo) + slot * n, "fetch at 0x%llx, not slot %llu",
               (unsigned long long)iova, (unsigned long long)slot);
    if (!mapped(iova, n)) return false;
    std::memcpy(dst, &host_[iova - kHostBase], n);
    std::memcpy(&call_.d, dst, n);
    call_.fetched = true;
    call_.fetched_iova = iova;
    return true;
  }

  bool host_write(uint64_t iova, const void* src, uint32_t n) override {
    FUZZ_CHECK(in_call_ && call_.fetched, "host write of %u bytes without a fetched descriptor", n);
    FUZZ_CHECK(!call_.reset, "host write after the queue was reset");
    const uint32_t q = call_.q;
    if (call_.head_moved) {  // the fence
      FUZZ_CHECK(!call_.fence_written && n == 8 && iova == base(q, hw::kQFenceLo), "write of %u bytes at 0x%llx", n,
                 (unsigned long long)iova);
      uint64_t value;
      std::memcpy(&value, src, 8);
      FUZZ_CHECK(value == call_.d.seq, "fence %llu for seq %llu", (unsigned long long)value,
                 (unsigned long long)call_.d.seq);
      FUZZ_CHECK(value > last_fence_[q], "fence moves back from %llu to %llu", (unsigned long long)last_fence_[q],
                 (unsigned long long)value);
      last_fence_[q] = value;
      call_.fence_written = true;
    } else if (n == sizeof(hw::Completion)) {
      const uint64_t slot = call_.head & (call_.entries - 1);
      FUZZ_CHECK(iova == base(q, hw::kQCplBaseLo) + slot * n, "completion at 0x%llx, not slot %llu",
                 (unsigned long long)iova, (unsigned long long)slot);
      FUZZ_CHECK(!call_.cpl_attempted, "two completions in one service_queue");
      call_.cpl_attempted = true;
      std::memcpy(&call_.c, src, n);
      check_completion(call_.c);
      call_.cpl_written = mapped(iova, n);
    } else {  // a timestamp
      FUZZ_CHECK(n == 8 && call_.d.opcode == hw::Opcode::kTimestamp && iova == call_.d.timestamp.dst,
                 "write of %u bytes at 0x%llx for opcode %u", n, (unsigned long long)iova,
                 static_cast<unsigned>(call_.d.opcode));
      check_executable();
    }
    if (!mapped(iova, n)) return false;
    std::memcpy(&host_[iova - kHostBase], src, n);
    forget_pushes(iova, n);
    return true;
  }

  void dev_read(uint64_t addr, void* dst, uint32_t n) override {
    FUZZ_CHECK(fuzz::inside(addr, n, limits_.mem_size), "device read 0x%llx + %u outside %llu bytes",
               (unsigned long long)addr, n, (unsigned long long)limits_.mem_size);
    if (n == sizeof(hw::ProgramHeader)) {
      FUZZ_CHECK(call_.d.opcode == hw::Opcode::kLaunch && addr == call_.d.launch.program, "program read");
      std::memcpy(dst, &program_, n);
      call_.program_read = true;
      return;
    }
    FUZZ_CHECK(n == 8, "device read of %u bytes", n);
    const auto it = sems_.find(addr);
    const uint64_t value = it == sems_.end() ? 0 : it->second;
    std::memcpy(dst, &value, 8);
  }

  void dev_write(uint64_t addr, const void* src, uint32_t n) override {
    FUZZ_CHECK(!call_.reset && n == 8 && fuzz::inside(addr, n, limits_.mem_size), "device write 0x%llx + %u",
               (unsigned long long)addr, n);
    FUZZ_CHECK(call_.d.opcode == hw::Opcode::kSignal && addr == call_.d.semaphore.addr, "device write for opcode %u",
               static_cast<unsigned>(call_.d.opcode));
    fuzz::check_descriptor_safe(call_.d, limits_);
    uint64_t value;
    std::memcpy(&value, src, 8);
    uint64_t& sem = sems_[addr];
    FUZZ_CHECK(value > sem && value == call_.d.semaphore.value, "semaphore %llu -> %llu", (unsigned long long)sem,
               (unsigned long long)value);
    sem = value;
  }

  uint64_t dev_mem_size() override { return limits_.mem_size; }
  uint32_t num_cores() override { return limits_.num_cores; }

  void sanitize(uint32_t queue, const hw::SanitizeArgs& args) override {
    FUZZ_CHECK(queue == call_.q, "a sanitize command of queue %u reported as queue %u's", call_.q, queue);
    FUZZ_CHECK(call_.executing, "a sanitize command runs without ACTIVE");
    FUZZ_CHECK(call_.d.opcode == hw::Opcode::kSanitize && std::memcmp(&args, &call_.d.sanitize, sizeof args) == 0,
               "sanitize for opcode %u", static_cast<unsigned>(call_.d.opcode));
    check_executable();
    FUZZ_CHECK(args.action == hw::SanitizeAction::kEnable || args.action == hw::SanitizeAction::kUnbreak ||
                   fuzz::inside(args.base, args.size, limits_.mem_size),
               "sanitize range 0x%llx + %llu", (unsigned long long)args.base, (unsigned long long)args.size);
  }

  hw::Verdict copy(const hw::CopyArgs& args, uint8_t flags, uint32_t priority) override {
    FUZZ_CHECK(call_.executing, "a copy runs without ACTIVE");
    FUZZ_CHECK(call_.d.opcode == hw::Opcode::kCopy && std::memcmp(&args, &call_.d.copy, sizeof args) == 0 &&
                   flags == call_.d.flags,
               "copy for opcode %u", static_cast<unsigned>(call_.d.opcode));
    check_executable();
    check_priority(priority);
    fuzz::check_copy_safe(args, flags, limits_);
    const uint8_t fate = in_.take<uint8_t>();
    if (fate < 0xe0) return fate < 0xd0 ? hw::Verdict{} : reset_meanwhile();
    return hw::Verdict{ErrorCode::kDmaFault, hw::Field::kCopySrc, 0};
  }

  hw::Verdict launch(uint32_t queue, uint64_t program, const fw::Arguments& args, uint64_t core_mask, uint32_t priority,
                     const fw::Window& window) override {
    FUZZ_CHECK(call_.executing, "a launch runs without ACTIVE");
    FUZZ_CHECK(queue == call_.q, "a launch of queue %u reported as queue %u's", call_.q, queue);
    FUZZ_CHECK(window.base == 0 && window.size == limits_.mem_size, "launch window 0x%llx + %llu",
               (unsigned long long)window.base, (unsigned long long)window.size);
    const hw::LaunchArgs& l = call_.d.launch;
    const bool from_host = (call_.d.flags & hw::kLaunchArgsHost) != 0;
    FUZZ_CHECK(call_.d.opcode == hw::Opcode::kLaunch && program == l.program && args.addr == l.args &&
                   args.size == l.args_size && args.from_host == from_host && core_mask == l.core_mask,
               "launch for opcode %u", static_cast<unsigned>(call_.d.opcode));
    FUZZ_CHECK(!from_host || l.args_size == 0 || call_.args_read, "host arguments not read");
    FUZZ_CHECK(call_.program_read, "launch without reading the program header");
    check_executable();
    check_priority(priority);
    fuzz::check_launch_safe(l, call_.d.flags, limits_);
    fuzz::check_program_safe(program_, l);
    const uint8_t fate = in_.take<uint8_t>();
    if (fate < 0xe0) return fate < 0xd0 ? hw::Verdict{} : reset_meanwhile();
    if (fate < 0xf0) return hw::Verdict{ErrorCode::kCoreFault, hw::Field::kNone, fate};
    return hw::Verdict{ErrorCode::kWatchdog, hw::Field::kNone, fate};
  }

  void raise_msix(uint32_t vector) override {
    FUZZ_CHECK(in_call_ && vector == reg(call_.q, hw::kQMsixVector), "MSI-X vector %u", vector);
    ++call_.irqs;
  }

  uint64_t now_cycles() override { return cycle_ += 7; }

  void wait_for_work(uint32_t) override { FUZZ_CHECK(false, "service_queue() slept waiting for work"); }

  void arm_signal(uint32_t) override {}

  void wait_for_signal(uint32_t q, bool any_card) override {
    FUZZ_CHECK(in_call_ && q == call_.q && call_.d.opcode == hw::Opcode::kWait, "wait for opcode %u on queue %u",
               static_cast<unsigned>(call_.d.opcode), q);
    FUZZ_CHECK(any_card == ((call_.d.flags & hw::kWaitHost) != 0), "a wait for %s card's signal",
               any_card ? "any" : "its own");
    check_executable();
    const uint8_t wake = in_.empty() ? 0 : in_.take<uint8_t>();
    if (wake % 4 == 1) {
      reset(q);  // the host gives up on the queue
    } else if (wake % 4 == 0 || ++call_.wakeups > kMaxWakeups) {
      uint64_t& sem = sems_[call_.d.semaphore.addr];
      if (sem < call_.d.semaphore.value) sem = call_.d.semaphore.value;  // another queue signals
    }
  }

  void signalled() override {
    FUZZ_CHECK(call_.d.opcode == hw::Opcode::kSignal, "signalled() for opcode %u",
               static_cast<unsigned>(call_.d.opcode));
  }

  void command_done(uint32_t q, const hw::Descriptor& d, const hw::Completion& c) override {
    FUZZ_CHECK(in_call_ && q == call_.q && call_.fence_written, "command_done before the fence");
    FUZZ_CHECK(std::memcmp(&d, &call_.d, sizeof d) == 0 && std::memcmp(&c, &call_.c, sizeof c) == 0,
               "command_done reports another command than the one completed");
    const auto it = pushed_.find(call_.fetched_iova);
    if (it != pushed_.end()) {
      FUZZ_CHECK(ran_[q].insert(it->second).second, "queue %u ran the descriptor at 0x%llx (seq %llu) twice", q,
                 (unsigned long long)call_.fetched_iova, (unsigned long long)d.seq);
    }
    ++call_.completions;
  }

 private:
  static constexpr uint32_t kRegWords = (hw::kQueueBase + kQueues * hw::kQueueStride) / 4;

  // What one service_queue() call saw and did.
  struct Call {
    uint32_t q = 0;
    uint32_t status = 0, head = 0, tail = 0, entries = 0;  // as the call began
    hw::Descriptor d{};                                    // the fetched descriptor
    hw::Completion c{};                                    // its completion record
    uint64_t fetched_iova = 0;
    bool fetched = false, program_read = false, args_read = false, cpl_attempted = false, cpl_written = false,
         head_moved = false, fence_written = false;
    bool halted = false, reset = false;
    bool executing = false;  // ACTIVE is 1
    int completions = 0, irqs = 0, wakeups = 0;
  };

  uint32_t& reg(uint32_t q, uint32_t r) { return regs_[hw::queue_reg(q, r) / 4]; }
  uint64_t base(uint32_t q, uint32_t lo) { return reg(q, lo) | uint64_t{reg(q, lo + 4)} << 32; }
  static bool mapped(uint64_t iova, uint64_t n) {
    return iova >= kHostBase && fuzz::inside(iova - kHostBase, n, kHostBytes);
  }

  void host_acted() {
    for (bool& idle : idle_) idle = false;
  }

  // Bytes the host or the card overwrote no longer hold the descriptor pushed there.
  void forget_pushes(uint64_t iova, uint64_t n) {
    const uint64_t from = iova >= sizeof(hw::Descriptor) ? iova - sizeof(hw::Descriptor) + 1 : 0;
    auto it = pushed_.lower_bound(from);
    while (it != pushed_.end() && it->first < iova + n) it = pushed_.erase(it);
  }

  // CONTROL reset: the host starts the ring again (its sequence may start again too).
  void reset(uint32_t q) {
    reg(q, hw::kQStatus) &= hw::kQStatusEnabled;
    reg(q, hw::kQHead) = reg(q, hw::kQTail) = 0;
    ++reg(q, hw::kQResets);
    ran_[q].clear();
    last_fence_[q] = 0;
    if (in_call_ && call_.q == q) call_.reset = true;
  }

  // The host resets the queue while its command runs: the command finishes, its result is dropped.
  hw::Verdict reset_meanwhile() {
    reset(call_.q);
    return {};
  }

  void check_priority(uint32_t priority) {
    const uint32_t expected = reg(call_.q, hw::kQPriority) != 0 ? hw::kQPriorityHigh : hw::kQPriorityNormal;
    FUZZ_CHECK(priority == expected, "priority %u, queue register %u", priority, reg(call_.q, hw::kQPriority));
  }

  // A command is about to act: it must be valid, and its queue not in the error state.
  void check_executable() {
    FUZZ_CHECK(!(call_.status & hw::kQStatusError), "queue %u in error executes opcode %u", call_.q,
               static_cast<unsigned>(call_.d.opcode));
    fuzz::check_descriptor_safe(call_.d, limits_);
  }

  void check_completion(const hw::Completion& c) {
    FUZZ_CHECK(c.seq == call_.d.seq, "completion seq %llu for %llu", (unsigned long long)c.seq,
               (unsigned long long)call_.d.seq);
    FUZZ_CHECK(c.error < ErrorCode::kCount && c.field < hw::Field::kCount, "completion error %u field %u",
               static_cast<unsigned>(c.error), static_cast<unsigned>(c.field));
    FUZZ_CHECK(c.start_cycle <= c.end_cycle, "completion cycles %llu..%llu", (unsigned long long)c.start_cycle,
               (unsigned long long)c.end_cycle);
    if (call_.status & hw::kQStatusError) {
      FUZZ_CHECK(c.error == ErrorCode::kQueueInError, "queue in error completes with %u",
                 static_cast<unsigned>(c.error));
    } else if (c.error == ErrorCode::kOk) {
      fuzz::check_descriptor_safe(call_.d, limits_);
    } else if (c.field != hw::Field::kNone) {  // a validation error, not one the HAL returned
      fuzz::check_descriptor_rejection(call_.d, hw::Verdict{c.error, c.field, c.detail});
    }
  }

  void check_call(bool ran) {
    const uint32_t q = call_.q;
    FUZZ_CHECK(!call_.executing, "service_queue returned with ACTIVE set");
    if (call_.reset) {  // the host reset the queue during a wait: the command is dropped
      FUZZ_CHECK(ran && call_.completions == 0, "a reset command completed");
      return;
    }
    const uint32_t head = reg(q, hw::kQHead);
    if (!(call_.status & hw::kQStatusEnabled) || call_.head == call_.tail) {
      FUZZ_CHECK(!ran && !call_.fetched && head == call_.head && reg(q, hw::kQStatus) == call_.status,
                 "an idle or disabled queue was served");
      return;
    }
    FUZZ_CHECK(uint32_t(call_.tail - head) <= uint32_t(call_.tail - call_.head), "HEAD %u passed TAIL %u", head,
               call_.tail);
    if (call_.status & hw::kQStatusHalted) {  // stopped until a reset: a doorbell runs nothing
      FUZZ_CHECK(!call_.fetched && call_.completions == 0, "halted queue %u fetched a descriptor (HEAD %u TAIL %u)", q,
                 call_.head, call_.tail);
      return;
    }
    FUZZ_CHECK(ran, "service_queue(%u) ignored HEAD %u TAIL %u", q, call_.head, call_.tail);
    const bool overrun = call_.tail - call_.head > call_.entries;
    if (!usable_ring(call_.entries) || overrun) {
      const auto code = static_cast<ErrorCode>(reg(q, hw::kQStatus) >> 16);
      FUZZ_CHECK(call_.halted && !call_.fetched && head == call_.tail, "a bad ring was served");
      FUZZ_CHECK(code == (usable_ring(call_.entries) ? ErrorCode::kRingOverrun : ErrorCode::kBadSize),
                 "halted with error %u", static_cast<unsigned>(code));
    }
    if (call_.halted) {
      FUZZ_CHECK(head == call_.tail && call_.completions == 0 && call_.irqs == 1, "halt: HEAD %u, %d completions", head,
                 call_.completions);
      FUZZ_CHECK((reg(q, hw::kQStatus) & hw::kQStatusError) != 0, "halted without the error bit");
    } else {
      FUZZ_CHECK(head == call_.head + 1 && call_.completions == 1 && call_.irqs == 1,
                 "HEAD %u -> %u with %d completions", call_.head, head, call_.completions);
      const bool failed = call_.c.error != ErrorCode::kOk;
      FUZZ_CHECK(failed == ((reg(q, hw::kQStatus) & hw::kQStatusError) != 0), "completion error %u but STATUS 0x%x",
                 static_cast<unsigned>(call_.c.error), reg(q, hw::kQStatus));
    }
  }

  fuzz::Input& in_;
  const fw::Limits limits_;
  const hw::ProgramHeader program_;
  uint32_t regs_[kRegWords] = {};
  std::vector<uint8_t> host_;
  std::map<uint64_t, uint64_t> sems_;
  std::map<uint64_t, uint64_t> pushed_;  // IOVA of a descriptor the host wrote -> which write it was
  uint64_t pushes_ = 0;
  std::set<uint64_t> ran_[kQueues];  // pushes completed since the queue's last reset
  uint64_t last_fence_[kQueues] = {};
  uint64_t next_seq_[kQueues] = {};
  uint64_t cycle_ = 0;
  int services_ = 0;
  bool idle_[kQueues] = {};  // service_queue() returned false and the host has not acted since
  bool in_call_ = false;
  Call call_;
};

// Part 1: the parsers alone.
void check_parsers(const hw::Descriptor& d, const fw::Limits& limits, const hw::ProgramHeader& header) {
  const hw::Verdict v = fw::validate_descriptor(d, limits);
  if (v.ok()) {
    fuzz::check_descriptor_safe(d, limits);
  } else {
    fuzz::check_descriptor_rejection(d, v);
  }
  if (d.opcode != hw::Opcode::kLaunch) return;
  const hw::Verdict p = fw::validate_program(header, d.launch);
  if (p.ok()) {
    fuzz::check_program_safe(header, d.launch);
  } else {
    fuzz::check_program_rejection(p);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const auto d = in.take<hw::Descriptor>();
  fw::Limits limits{};
  limits.mem_size = in.take<uint64_t>();
  limits.num_cores = in.take<uint8_t>();
  const auto header = in.take<hw::ProgramHeader>();
  check_parsers(d, limits, header);

  Card card(in, limits, header);
  for (uint32_t q = 0; q < kQueues; ++q) card.setup_queue(q);
  fw::Firmware firmware(card);
  while (!in.empty()) {
    const auto op = in.take<uint8_t>();
    const uint32_t q = op >> 7;
    switch (op & 0x0f) {
      case 1: {
        const auto pushed = in.take<hw::Descriptor>();
        card.push(q, pushed, op & 0x10);
        if (op & 0x20) card.doorbell(q, 1);
        break;
      }
      case 2:
        card.doorbell(q, in.take<uint8_t>());
        break;
      case 3:
        card.control(q, in.take<uint8_t>());
        break;
      case 4: {
        const auto which = in.take<uint8_t>();
        card.set_register(q, which, in.take<uint32_t>());
        break;
      }
      case 5:
        while (card.service(firmware, q)) {
        }
        break;
      default:
        card.service(firmware, q);
        break;
    }
  }
  for (uint32_t q = 0; q < kQueues; ++q) {
    while (card.service(firmware, q)) {
    }
  }
  return 0;
}
