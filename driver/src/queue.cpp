#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "spyre/common/log.h"
#include "spyre/driver/device.h"
#include "spyre/hw/regs.h"

namespace spyre::driver {

namespace {
// Spin this long on the fence before sleeping on the interrupt (a parked wake-up costs ~90 us).
constexpr auto kSpin = std::chrono::microseconds(100);
constexpr auto kHaltPoll = std::chrono::milliseconds(2);  // longest a halt goes unseen by a waiter
constexpr size_t kRecentCompletions = 256;

std::mutex g_policy_mu;
WaitPolicy g_policy;

}  // namespace

void set_wait_policy(WaitPolicy policy) {
  std::lock_guard lock(g_policy_mu);
  g_policy = std::move(policy);
}

WaitPolicy wait_policy() {
  std::lock_guard lock(g_policy_mu);
  return g_policy;
}

Queue::Queue(Device& dev, uint32_t id, uint32_t entries, std::unique_ptr<HostBuffer> ring,
             std::unique_ptr<HostBuffer> cpl, std::unique_ptr<HostBuffer> fence, std::unique_ptr<HostBuffer> args)
    : dev_(dev),
      id_(id),
      entries_(entries),
      ring_(std::move(ring)),
      cpl_(std::move(cpl)),
      fence_(std::move(fence)),
      args_(std::move(args)) {}

Queue::~Queue() {
  // A queue whose host gave up waiting (a timeout, Ctrl-C) is not waited for again: the reset
  // below drops what it holds.
  bool abandoned;
  {
    std::lock_guard lock(mu_);
    abandoned = abandoned_;
  }
  if (!abandoned) (void)synchronize();
  dev_.transport().mmio_write(dev_.info().index, hw::queue_reg(id_, hw::kQControl), hw::kQControlReset);
  // The card must stop using the rings before they are unmapped: a read orders after the posted write.
  (void)dev_.transport().mmio_read(dev_.info().index, hw::queue_reg(id_, hw::kQStatus));
  dev_.release_queue(id_);
}

uint64_t Queue::fence_value() const {
  return __atomic_load_n(static_cast<const uint64_t*>(fence_->data()), __ATOMIC_ACQUIRE);
}

uint32_t Queue::reg(uint32_t r) const {
  return dev_.transport().mmio_read(dev_.info().index, hw::queue_reg(id_, r));
}

void Queue::poll_locked() {
  const uint64_t fence = fence_value();
  while (!pending_.empty() && pending_.front().seq <= fence) {
    const Pending p = pending_.front();
    pending_.pop_front();
    hw::Completion c;
    std::memcpy(&c, static_cast<const uint8_t*>(cpl_->data()) + uint64_t{p.slot} * sizeof c, sizeof c);
    if (c.seq != p.seq) {
      c.seq = p.seq;
      c.error = hw::ErrorCode::kDmaFault;  // the card could not write the record
    }
    if (c.error != hw::ErrorCode::kOk) {
      error_seq_ = std::min(error_seq_, p.seq);
      if (c.error == hw::ErrorCode::kQueueInError) ++not_executed_;
    }
    if (c.error != hw::ErrorCode::kOk && error_.ok()) {
      std::string what = fmt::format("{} queue {}: command {} ({}) failed: {}", dev_.name(), id_, p.seq,
                                     hw::opcode_name(p.opcode), hw::error_name(c.error));
      if (c.field != hw::Field::kNone) what += fmt::format(" in field {}", hw::field_name(c.field));
      const bool memory = c.error == hw::ErrorCode::kEccError || c.error == hw::ErrorCode::kHostMemory;
      if (c.error == hw::ErrorCode::kCoreFault || c.error == hw::ErrorCode::kWatchdog ||
          c.error == hw::ErrorCode::kSanitizerReport || (memory && p.opcode == hw::Opcode::kLaunch)) {
        what += fmt::format(" (core {} at instruction {})", c.detail >> 24, c.detail & 0xffffff);
      }
      finding_ = {};
      if (c.error == hw::ErrorCode::kSanitizerReport) {
        // The card wrote the report before the completion: the registers hold it now.
        const uint32_t kind = reg(hw::kQSanKind);
        finding_.kind = static_cast<hw::SanitizeReport>(kind & 0xff);
        finding_.write = (kind & hw::kSanReportWrite) != 0;
        finding_.addr = reg(hw::kQSanAddrLo) | uint64_t{reg(hw::kQSanAddrHi)} << 32;
        finding_.bytes = reg(hw::kQSanBytes);
        finding_.tag = reg(hw::kQSanTagLo) | uint64_t{reg(hw::kQSanTagHi)} << 32;
        finding_.other = reg(hw::kQSanOther);
        what += fmt::format(": {} ({} of {} bytes at 0x{:x})", hw::sanitize_report_name(finding_.kind),
                            finding_.write ? "a write" : "a read", finding_.bytes, finding_.addr);
      }
      log("driver").warn("{}", what);
      // The failed command as submitted: its slot is not reused while it is pending.
      std::memcpy(&failed_, static_cast<const uint8_t*>(ring_->data()) + uint64_t{p.slot} * sizeof failed_,
                  sizeof failed_);
      failed_completion_ = c;
      has_failed_ = true;
      // The emulator's host ran out of memory for the card's: the caller's out-of-memory, not a fault.
      if (c.error == hw::ErrorCode::kHostMemory) {
        error_ = Status(StatusCode::kOutOfMemory,
                        what + "; free device tensors, or run on a host with more memory (sim.host_memory_bytes)");
      } else {
        error_ = Status(StatusCode::kDeviceError, what);
      }
    }
    recent_[p.seq] = c;
    if (recent_.size() > kRecentCompletions) recent_.erase(recent_.begin());
    if (observer_) observer_(p.opcode, c);
    completed_ = p.seq;
  }
  run_due_callbacks_locked();
}

void Queue::run_due_callbacks_locked() {
  while (!callbacks_.empty() && callbacks_.begin()->first <= completed_) {
    auto fn = std::move(callbacks_.begin()->second);
    callbacks_.erase(callbacks_.begin());
    fn();
  }
}

Queue::WaitEnd Queue::wait_for_fence(std::unique_lock<std::mutex>& lock, uint64_t seq, Status* why) {
  // Called with mu_ held; drops it while waiting so other threads can submit.
  lock.unlock();
  const uint64_t token = fence_value() < seq ? dev_.transport().wait_begin(dev_.index_, id_, seq) : 0;
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + kSpin;
  while (fence_value() < seq && std::chrono::steady_clock::now() < until) {
  }
  WaitEnd end = WaitEnd::kReached;
  WaitPolicy pol;  // fetched once the wait sleeps
  bool fetched = false;
  uint64_t checked = ~uint64_t{0};  // the fence value at the last status read
  bool slept_out = false;           // the last sleep lasted kHaltPoll: no interrupt for this waiter
  while (fence_value() < seq) {
    // Take the interrupt count before looking at the queue's status: a halt raises the interrupt
    // after setting the status, so either the status read sees it or the count changes.
    uint64_t seen;
    {
      std::lock_guard irq(dev_.irq_mu_);
      seen = dev_.irq_count_;
    }
    const uint64_t fence = fence_value();
    if (fence >= seq) break;
    // The status is an MMIO read (a round trip to the card); a queue whose fence moved since the
    // last read is running, so only a wake-up without progress reads it, or a sleep that no
    // interrupt ended: a halt right after progress wakes no sleeper (Device::on_irq), and is seen
    // after kHaltPoll.
    if (slept_out || fence == checked || checked == ~uint64_t{0}) {
      if (reg(hw::kQStatus) & hw::kQStatusHalted) {
        end = WaitEnd::kHalted;
        break;
      }
    }
    checked = fence;
    if (!fetched) {
      pol = wait_policy();
      fetched = true;
    }
    if (pol.interrupted) {
      if (Status s = pol.interrupted(); !s.ok()) {
        *why = std::move(s);
        end = WaitEnd::kAbandoned;
        break;
      }
    }
    if (pol.timeout.count() > 0 && std::chrono::steady_clock::now() - start >= pol.timeout) {
      *why = Status(StatusCode::kTimeout,
                    fmt::format("{} queue {}: wait for command {} timed out after {:.3f} s (the fence is at {}); the "
                                "command is still queued or running on the card",
                                dev_.name(), id_, seq, pol.timeout.count() / 1e3, fence));
      end = WaitEnd::kAbandoned;
      break;
    }
    std::unique_lock irq(dev_.irq_mu_);
    dev_.sleepers_.push_back({this, seq, fence});
    const auto slept = std::chrono::steady_clock::now();
    dev_.irq_cv_.wait_for(irq, kHaltPoll, [&] { return fence_value() >= seq || dev_.irq_count_ != seen; });
    slept_out = std::chrono::steady_clock::now() - slept >= kHaltPoll;
    auto mine = std::find_if(dev_.sleepers_.begin(), dev_.sleepers_.end(), [&](const Device::Sleeper& s) {
      return s.queue == this && s.seq == seq && s.seen == fence;
    });
    dev_.sleepers_.erase(mine);
  }
  if (token != 0) dev_.transport().wait_end(token, end != WaitEnd::kAbandoned);
  lock.lock();
  if (end == WaitEnd::kAbandoned) abandoned_ = true;
  return end;
}

void Queue::note_halt_locked() {
  const uint32_t status = reg(hw::kQStatus);
  if (!pending_.empty()) error_seq_ = std::min(error_seq_, pending_.front().seq);
  if (status == 0xffffffffu) {  // a read nobody answered: the link is down or the card is gone
    log("driver").error("{} queue {}: the card does not answer", dev_.name(), id_);
    if (error_.ok()) {
      error_ = Status(
          StatusCode::kDeviceError,
          fmt::format("{} queue {}: the card does not answer (its registers read all ones: PCIe link down "
                      "or card lost); {} command(s) from {} on will not complete",
                      dev_.name(), id_, pending_.size(), pending_.empty() ? completed_ + 1 : pending_.front().seq));
    }
    return;
  }
  const auto code = static_cast<hw::ErrorCode>(status >> 16);
  log("driver").error("{} queue {}: halted by the card ({})", dev_.name(), id_, hw::error_name(code));
  if (error_.ok()) {
    error_ = Status(StatusCode::kDeviceError,
                    fmt::format("{} queue {}: halted by the card ({}): its rings or fence are unreachable; "
                                "{} command(s) from {} on were dropped; reset the queue",
                                dev_.name(), id_, hw::error_name(code), pending_.size(),
                                pending_.empty() ? completed_ + 1 : pending_.front().seq));
  }
}

Status Queue::submit_locked(std::unique_lock<std::mutex>& lock, hw::Descriptor d, uint64_t* seq, const uint64_t* args,
                            size_t num_args) {
  poll_locked();
  while (pending_.size() >= entries_) {
    // Ring full: wait until half of it is free, not one slot, so that a host far ahead of the card
    // blocks once per half ring rather than once per command (the card stays busy with the other
    // half meanwhile; a host-paced simulator pays a hand-over per wait).
    Status why;
    const WaitEnd end = wait_for_fence(lock, pending_[pending_.size() / 2].seq, &why);
    if (end == WaitEnd::kAbandoned) return why;  // nothing submitted
    if (end == WaitEnd::kHalted) {
      note_halt_locked();
      return error_;
    }
    poll_locked();
  }
  d.seq = next_seq_++;
  const uint32_t slot = tail_ & (entries_ - 1);
  if (args != nullptr || num_args != 0) {
    // The slot's last descriptor has completed (the ring was not full), so its launch has read
    // its arguments already.
    constexpr uint64_t kSlot = uint64_t{hw::kMaxLaunchArgs} * sizeof(uint64_t);
    std::memcpy(static_cast<uint8_t*>(args_->data()) + slot * kSlot, args, num_args * sizeof(uint64_t));
    d.flags |= hw::kLaunchArgsHost;
    d.launch.args = args_->iova() + slot * kSlot;
    d.launch.args_size = num_args * sizeof(uint64_t);
  }
  std::memcpy(static_cast<uint8_t*>(ring_->data()) + uint64_t{slot} * sizeof d, &d, sizeof d);
  pending_.push_back({d.seq, slot, d.opcode});
  ++tail_;
  // The doorbell is a posted MMIO write: it orders after the descriptor stores above.
  __atomic_thread_fence(__ATOMIC_RELEASE);
  dev_.transport().mmio_write(dev_.info().index, hw::queue_reg(id_, hw::kQTail), tail_);
  log("driver").trace("{} queue {}: submitted command {} ({})", dev_.name(), id_, d.seq, hw::opcode_name(d.opcode));
  *seq = d.seq;
  return {};
}

Status Queue::copy(uint64_t src, uint64_t dst, uint64_t size, uint8_t flags, uint64_t* seq, uint64_t label) {
  hw::Descriptor d{};
  d.opcode = hw::Opcode::kCopy;
  d.flags = flags;
  d.copy.src = src;
  d.copy.dst = dst;
  d.copy.size = size;
  d.copy.label = label;
  std::unique_lock lock(mu_);
  return submit_locked(lock, d, seq);
}

namespace {
hw::Descriptor launch_op(uint64_t program, uint64_t program_size, uint64_t core_mask, uint64_t label) {
  hw::Descriptor d{};
  d.opcode = hw::Opcode::kLaunch;
  d.launch.program = program;
  d.launch.program_size = program_size;
  d.launch.core_mask = core_mask;
  d.launch.label = label;
  return d;
}
}  // namespace

Status Queue::launch(uint64_t program, uint64_t program_size, uint64_t args, uint64_t args_size, uint64_t core_mask,
                     uint64_t label, uint64_t* seq) {
  hw::Descriptor d = launch_op(program, program_size, core_mask, label);
  d.launch.args = args;
  d.launch.args_size = args_size;
  std::unique_lock lock(mu_);
  return submit_locked(lock, d, seq);
}

Status Queue::launch(uint64_t program, uint64_t program_size, const uint64_t* args, size_t num_args, uint64_t core_mask,
                     uint64_t label, uint64_t* seq) {
  if (args == nullptr && num_args != 0) {
    return {StatusCode::kInvalidArgument,
            fmt::format("{} queue {}: a launch of {} arguments needs them (null pointer)", dev_.name(), id_, num_args)};
  }
  if (num_args > hw::kMaxLaunchArgs) {
    return {StatusCode::kInvalidArgument, fmt::format("{} queue {}: a launch takes at most {} arguments, not {}",
                                                      dev_.name(), id_, hw::kMaxLaunchArgs, num_args)};
  }
  std::unique_lock lock(mu_);
  return submit_locked(lock, launch_op(program, program_size, core_mask, label), seq, args, num_args);
}

namespace {
hw::Descriptor semaphore_op(hw::Opcode op, uint64_t sem, uint64_t value) {
  hw::Descriptor d{};
  d.opcode = op;
  d.semaphore.addr = sem;
  d.semaphore.value = value;
  return d;
}
}  // namespace

Status Queue::signal(uint64_t sem, uint64_t value, uint64_t* seq) {
  return submit_raw(semaphore_op(hw::Opcode::kSignal, sem, value), seq);
}

Status Queue::wait_semaphore(uint64_t sem, uint64_t value, uint64_t* seq, bool across_pcie) {
  hw::Descriptor d = semaphore_op(hw::Opcode::kWait, sem, value);
  if (across_pcie) d.flags = hw::kWaitHost;
  return submit_raw(d, seq);
}

Status Queue::sanitize(hw::SanitizeAction action, uint64_t base, uint64_t size, uint64_t tag, uint64_t* seq) {
  hw::Descriptor d{};
  d.opcode = hw::Opcode::kSanitize;
  d.sanitize.action = action;
  d.sanitize.base = base;
  d.sanitize.size = size;
  d.sanitize.tag = tag;
  return submit_raw(d, seq);
}

Status Queue::timestamp(uint64_t iova, uint64_t* seq) {
  hw::Descriptor d{};
  d.opcode = hw::Opcode::kTimestamp;
  d.timestamp.dst = iova;
  return submit_raw(d, seq);
}

void Queue::observe(std::function<void(hw::Opcode, const hw::Completion&)> fn) {
  std::lock_guard lock(mu_);
  observer_ = std::move(fn);
}

Status Queue::submit_raw(const hw::Descriptor& d, uint64_t* seq) {
  std::unique_lock lock(mu_);
  return submit_locked(lock, d, seq);
}

Status Queue::wait(uint64_t seq) {
  std::unique_lock lock(mu_);
  if (seq >= next_seq_) {
    return {StatusCode::kInvalidArgument,
            fmt::format("{} queue {}: wait for command {} that was never submitted (last is {})", dev_.name(), id_, seq,
                        next_seq_ - 1)};
  }
  poll_locked();
  while (completed_ < seq) {
    Status why;
    const WaitEnd end = wait_for_fence(lock, seq, &why);
    poll_locked();
    if (completed_ >= seq) break;
    if (end == WaitEnd::kAbandoned) return why;
    if (end == WaitEnd::kHalted) {
      note_halt_locked();
      break;
    }
  }
  return error_seq_ <= seq ? error_ : Status();
}

Status Queue::synchronize() {
  uint64_t last;
  {
    std::lock_guard lock(mu_);
    last = next_seq_ - 1;
  }
  return last == 0 ? error() : wait(last);
}

bool Queue::is_complete(uint64_t seq) {
  std::lock_guard lock(mu_);
  poll_locked();
  if (completed_ >= seq) return true;
  dev_.transport().note_poll(dev_.index_);
  return false;
}

uint64_t Queue::last_seq() {
  std::lock_guard lock(mu_);
  return next_seq_ - 1;
}

void Queue::on_complete(uint64_t seq, std::function<void()> fn) {
  std::lock_guard lock(mu_);
  callbacks_.emplace(seq, std::move(fn));
  poll_locked();
}

Status Queue::completion(uint64_t seq, hw::Completion* out) {
  std::lock_guard lock(mu_);
  poll_locked();
  const auto it = recent_.find(seq);
  if (it == recent_.end()) {
    return {StatusCode::kInvalidArgument,
            fmt::format("{} queue {}: no completion record for command {}", dev_.name(), id_, seq)};
  }
  *out = it->second;
  return {};
}

Status Queue::error() {
  std::lock_guard lock(mu_);
  poll_locked();
  return error_;
}

bool Queue::failed_command(hw::Descriptor* out, hw::Completion* completion) {
  std::lock_guard lock(mu_);
  poll_locked();
  if (has_failed_) {
    *out = failed_;
    *completion = failed_completion_;
  }
  return has_failed_;
}

bool Queue::sanitizer_finding(SanitizerFinding* out) {
  std::lock_guard lock(mu_);
  poll_locked();
  if (!has_failed_ || failed_completion_.error != hw::ErrorCode::kSanitizerReport) return false;
  *out = finding_;
  return true;
}

uint64_t Queue::not_executed() {
  std::lock_guard lock(mu_);
  poll_locked();
  return not_executed_;
}

Status Queue::reset() {
  std::unique_lock lock(mu_);
  // Everything submitted completes, if only as "not executed", unless the card halted the queue.
  while (!pending_.empty()) {
    Status why;
    const WaitEnd end = wait_for_fence(lock, pending_.back().seq, &why);
    poll_locked();
    if (end != WaitEnd::kReached) break;  // halted, or the host stopped waiting: reset anyway
  }
  const uint32_t dev = dev_.info().index;
  dev_.transport().mmio_write(dev, hw::queue_reg(id_, hw::kQControl), hw::kQControlReset | hw::kQControlEnable);
  // What a halt dropped will never complete: forget it and release what waited on it.
  pending_.clear();
  completed_ = next_seq_ - 1;
  run_due_callbacks_locked();
  tail_ = 0;
  error_ = Status();
  error_seq_ = UINT64_MAX;
  not_executed_ = 0;
  has_failed_ = false;
  abandoned_ = false;
  return {};
}

}  // namespace spyre::driver
