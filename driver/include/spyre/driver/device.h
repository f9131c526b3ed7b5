// The userspace driver API: devices, device memory, DMA-mapped host buffers, hardware queues
// with rings, doorbells, completions and fences. No torch, no SystemC.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spyre/driver/status.h"
#include "spyre/driver/transport.h"
#include "spyre/hw/commands.h"
#include "spyre/hw/figures.h"
#include "spyre/hw/regs.h"

namespace spyre::driver {

struct DeviceInfo {
  uint32_t index = 0;
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint32_t num_queues = 0;
  uint64_t memory_bytes = 0;  // usable device memory: [memory_base, memory_base + memory_bytes)
  uint64_t memory_base = 0;   // 0, unless the card is shared (spyre-simd gives each client a window)
  bool fp16_dlfloat = false;  // fp16 in device memory is DLFloat16: copies convert (hw/dlfloat16.h)
  hw::CardFigures card;       // cores, clock, scratchpad, arrays and bandwidths: what a compiler plans with
};

struct MemoryStats {
  uint64_t total = 0;
  uint64_t allocated = 0;
  uint64_t peak = 0;
  uint64_t largest_free = 0;
  uint64_t allocations = 0;  // live blocks
};

/// One hardware queue as its registers show it, for status tools.
struct QueueStatus {
  uint32_t id = 0;
  bool open = false;  // this driver holds a Queue on it
  bool enabled = false, error = false, halted = false;
  hw::ErrorCode last_error = hw::ErrorCode::kOk;  // the error the queue is in (when `error`)
  uint32_t entries = 0, head = 0, tail = 0, resets = 0;
  bool high_priority = false;
};

/// What `spyre-smi` shows of a card: identity, interface version, clock, memory, queues.
struct DeviceStatus {
  DeviceInfo info;
  uint32_t interface_version = 0;
  bool firmware_ready = false;
  bool answers = true;  // false: the card's registers read all ones (PCIe link down, card lost)
  uint64_t cycles = 0;
  MemoryStats memory;
  std::vector<QueueStatus> queues;
  uint64_t interrupts = 0;
};

/// Host memory that the card can reach by DMA. Unmapped and freed on destruction.
class HostBuffer {
 public:
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }
  uint64_t iova() const { return iova_; }
  uint64_t size() const { return size_; }

 private:
  friend class Device;

  HostBuffer(Transport& t, uint32_t dev, void* data, uint64_t size, uint64_t iova)
      : transport_(t), dev_(dev), data_(data), size_(size), iova_(iova) {}
  Transport& transport_;
  uint32_t dev_;
  void* data_;
  uint64_t size_;
  uint64_t iova_;
};

/// How host waits on a queue end early. Process-wide, set by the host runtime; the default waits
/// as long as the card takes. A wait that ends early returns kTimeout or the interrupt's status,
/// and the work it waited for goes on.
struct WaitPolicy {
  std::chrono::milliseconds timeout{0};  // 0: no timeout
  /// Called every few milliseconds while a wait sleeps (never with a driver lock held); a non-ok
  /// Status ends the wait with it. Empty: no check.
  std::function<Status()> interrupted;
};
void set_wait_policy(WaitPolicy policy);
WaitPolicy wait_policy();

class Device;

/// A device sanitizer's finding, as the queue's kQSan* registers gave it (hw/regs.h).
struct SanitizerFinding {
  hw::SanitizeReport kind = hw::SanitizeReport::kNone;
  bool write = false;
  uint64_t addr = 0, bytes = 0;
  uint64_t tag = 0;    // the allocation concerned, as named by sanitize(); 0: none
  uint32_t other = 0;  // a race: the other core << 24 | its instruction (0xffffff: not known)
};

/// One hardware queue: a descriptor ring and a completion ring in mapped host memory, a doorbell,
/// and a fence word that the card advances to each completed descriptor's sequence number.
/// Thread-safe.
class Queue {
 public:
  ~Queue();
  uint32_t id() const { return id_; }

  /// Submits a DMA copy; `flags` are hw::kCopySrcHost / hw::kCopyDstHost. Returns its sequence number.
  /// `label`: the device address of a NUL-terminated name for traces, or 0.
  Status copy(uint64_t src, uint64_t dst, uint64_t size, uint8_t flags, uint64_t* seq, uint64_t label = 0);
  /// Submits a program launch on `core_mask`. `label` is the device address of a NUL-terminated
  /// name for traces (the host operation), or 0.
  Status launch(uint64_t program, uint64_t program_size, uint64_t args, uint64_t args_size, uint64_t core_mask,
                uint64_t label, uint64_t* seq);
  /// The same with the arguments carried by the queue: the driver writes `args` (at most
  /// hw::kMaxLaunchArgs) into the queue's argument ring, in the slot of the launch's descriptor,
  /// and the card reads them from there as the launch starts (hw::kLaunchArgsHost). No copy
  /// command and no device memory hold them.
  Status launch(uint64_t program, uint64_t program_size, const uint64_t* args, size_t num_args, uint64_t core_mask,
                uint64_t label, uint64_t* seq);
  /// Submits a SIGNAL: raises the u64 timeline semaphore at device address `sem` to `value`.
  Status signal(uint64_t sem, uint64_t value, uint64_t* seq);
  /// Submits a WAIT: later descriptors of this queue start once the semaphore at `sem` is at
  /// least `value`. The host does not wait. `across_pcie`: `sem` is an IOVA the card reads by DMA
  /// (another card's semaphore through map_peer's window), and any card's SIGNAL wakes the wait.
  Status wait_semaphore(uint64_t sem, uint64_t value, uint64_t* seq, bool across_pcie = false);
  /// Submits a SANITIZE command (hw/commands.h, SanitizeArgs): in this queue's order, switches the
  /// card's sanitizer to `tag`'s checks (kEnable), or names the allocation [base, base + size) as
  /// `tag` (kAlloc) or frees it (kFree).
  Status sanitize(hw::SanitizeAction action, uint64_t base, uint64_t size, uint64_t tag, uint64_t* seq);
  /// Submits a TIMESTAMP: the card writes its cycle counter (u64) to host IOVA `iova` when the
  /// queue reaches it.
  Status timestamp(uint64_t iova, uint64_t* seq);
  /// Submits a descriptor exactly as given (only `seq` is assigned). The card validates it; a
  /// malformed one completes with an error and puts this queue, and only this queue, in error.
  Status submit_raw(const hw::Descriptor& d, uint64_t* seq);

  /// Blocks until descriptor `seq` has completed: spins briefly, then sleeps until an interrupt.
  /// Returns the queue's error if a descriptor up to and including `seq` failed or was not
  /// executed because of an earlier failure, or if the card halted the queue (see error()).
  Status wait(uint64_t seq);
  /// Waits for everything submitted so far.
  Status synchronize();
  /// True when `seq` has completed. Never blocks.
  bool is_complete(uint64_t seq);
  /// The last sequence number handed out.
  uint64_t last_seq();
  /// Runs `fn` once descriptor `seq` has completed (at once if it has); used to release staging
  /// buffers and temporaries. `fn` runs on a host thread inside a queue call and must not call the queue.
  void on_complete(uint64_t seq, std::function<void()> fn);
  /// Calls `fn` with each completion seen from now on (an empty function stops it), for
  /// profilers. `fn` runs inside queue calls and must not call the queue.
  void observe(std::function<void(hw::Opcode op, const hw::Completion& c)> fn);
  /// The completion record of `seq`, once complete and not yet overwritten; for tests and tools.
  Status completion(uint64_t seq, hw::Completion* out);

  /// The first error since creation or the last reset(); ok when none.
  Status error();
  /// Descriptors completed as "not executed" (after an error on this queue) since the last reset.
  uint64_t not_executed();
  /// The descriptor whose failure is error(), as submitted (a launch's program and op label say
  /// what failed), and its completion record (the error, and for a core fault the core and
  /// instruction); false when no command has failed since the last reset.
  bool failed_command(hw::Descriptor* out, hw::Completion* completion);
  /// When error() is a sanitizer report: what the sanitizer found. False otherwise.
  bool sanitizer_finding(SanitizerFinding* out);
  /// Waits for outstanding work (or a halt), then clears the error state in the card and the driver.
  /// Work dropped by a halt releases its on_complete callbacks here.
  Status reset();

 private:
  friend class Device;
  struct Pending {
    uint64_t seq;
    uint32_t slot;
    hw::Opcode opcode;
  };
  Queue(Device& dev, uint32_t id, uint32_t entries, std::unique_ptr<HostBuffer> ring, std::unique_ptr<HostBuffer> cpl,
        std::unique_ptr<HostBuffer> fence, std::unique_ptr<HostBuffer> args);
  /// Submits `d`; with `args`, a launch's `num_args` arguments go into the argument ring's slot.
  Status submit_locked(std::unique_lock<std::mutex>& lock, hw::Descriptor d, uint64_t* seq,
                       const uint64_t* args = nullptr, size_t num_args = 0);
  void poll_locked();
  void run_due_callbacks_locked();
  uint64_t fence_value() const;
  enum class WaitEnd { kReached, kHalted, kAbandoned };
  /// Waits until the fence reaches `seq`, the card halts the queue, or the wait policy ends the
  /// wait (then `*why` says why, and the queue is marked abandoned).
  WaitEnd wait_for_fence(std::unique_lock<std::mutex>& lock, uint64_t seq, Status* why);
  void note_halt_locked();
  uint32_t reg(uint32_t r) const;

  Device& dev_;
  uint32_t id_;
  uint32_t entries_;
  std::unique_ptr<HostBuffer> ring_;
  std::unique_ptr<HostBuffer> cpl_;
  std::unique_ptr<HostBuffer> fence_;
  std::unique_ptr<HostBuffer> args_;  // one slot of hw::kMaxLaunchArgs u64 per ring entry
  std::mutex mu_;
  uint64_t next_seq_ = 1;
  uint64_t completed_ = 0;  // highest sequence number processed by poll_locked()
  uint32_t tail_ = 0;       // descriptors written since the last reset
  std::deque<Pending> pending_;
  std::multimap<uint64_t, std::function<void()>> callbacks_;
  std::map<uint64_t, hw::Completion> recent_;  // last completions, for completion()
  std::function<void(hw::Opcode, const hw::Completion&)> observer_;
  Status error_;
  uint64_t error_seq_ = UINT64_MAX;  // first sequence number that failed or was not executed
  hw::Descriptor failed_{};          // the command that set error_, when has_failed_
  hw::Completion failed_completion_{};
  bool has_failed_ = false;
  SanitizerFinding finding_;  // read with the failed completion, when it is a sanitizer report
  bool abandoned_ = false;    // a wait on this queue ended early (timeout, interrupt)
  uint64_t not_executed_ = 0;
};

class Device {
 public:
  /// Opens card `index` of `transport`: checks its identity, enables DMA and reads its limits.
  static Status open(Transport& transport, uint32_t index, std::unique_ptr<Device>* out);
  ~Device();

  const DeviceInfo& info() const { return info_; }
  /// "spyre:N", for messages.
  const std::string& name() const { return name_; }

  /// Allocates `bytes` of device memory (256-byte aligned). kOutOfMemory names the sizes.
  Status alloc(uint64_t bytes, uint64_t* addr);
  /// Frees a block returned by alloc(). Freeing an unknown address is a kInvalidArgument.
  Status free(uint64_t addr);
  /// The block of alloc() that holds device address `addr`: its start and size; false when none.
  bool allocation_at(uint64_t addr, uint64_t* base, uint64_t* size);
  /// Zeroes device memory that nothing uses any more (a block about to be freed, no work queued on
  /// it) through the management page's scrub; on a shared card the daemon scrubs it when it lies
  /// in this client's window, and drops it otherwise. Returns once the card has taken it. On the
  /// simulated card a scrub also gives the host memory behind those pages back to the operating
  /// system. Must not be called from a completion callback (it reads a register).
  void scrub(uint64_t addr, uint64_t bytes);
  MemoryStats memory_stats();

  /// Allocates and maps host memory for DMA.
  Status map_host(uint64_t bytes, std::unique_ptr<HostBuffer>* out);
  /// Maps `len` bytes of card `peer`'s device memory, from `addr`, for this card's DMA: a copy
  /// with the host flag on that side and `*iova` as its address moves data card to card across
  /// PCIe, not through host memory. Undo with unmap_peer.
  Status map_peer(uint32_t peer, uint64_t addr, uint64_t len, uint64_t* iova);
  Status unmap_peer(uint64_t iova);
  /// Shares [addr, addr + len) of this card's memory with other processes of the same cards
  /// (Transport::ipc_export); `*handle` names it to them.
  Status ipc_export(uint64_t addr, uint64_t len, uint64_t* handle);
  /// Maps another process's shared memory (its handle) for this card's DMA, as map_peer; undo
  /// with unmap_peer.
  Status ipc_open(uint64_t handle, Transport::IpcWindow* out);

  /// Creates a queue on a free hardware queue with `entries` descriptors (a power of two).
  /// `priority` (hw::kQPriorityNormal or hw::kQPriorityHigh) decides who gets the cores and DMA
  /// channels first when queues compete for them.
  Status create_queue(uint32_t entries, std::unique_ptr<Queue>* out, uint32_t priority = hw::kQPriorityNormal);

  /// The card's cycle counter.
  uint64_t cycles();
  /// The card's state from its registers and this driver's books (a few dozen MMIO reads).
  DeviceStatus status();

 private:
  friend class Queue;
  Device(Transport& t, uint32_t index, DeviceInfo info);
  Transport& transport() { return transport_; }
  void on_irq(uint32_t vector);
  void release_queue(uint32_t id);
  /// A 64-bit register pair (LO at `lo`, HI at `lo + 4`).
  void write64(uint32_t lo, uint64_t value);

  Transport& transport_;
  uint32_t index_;
  DeviceInfo info_;
  std::string name_;

  std::mutex mem_mu_;
  std::map<uint64_t, uint64_t> free_;  // address -> size
  std::map<uint64_t, uint64_t> used_;  // address -> size
  MemoryStats mem_stats_;

  std::mutex cycles_mu_;  // reading the counter's low half latches the high half
  std::mutex queue_mu_;
  std::vector<bool> queue_used_;

  // A thread asleep in Queue::wait_for_fence: it wants `queue`'s fence at `seq`, and saw it at
  // `seen` when it went to sleep.
  struct Sleeper {
    const Queue* queue;
    uint64_t seq;
    uint64_t seen;
  };
  // An interrupt wakes the sleepers it may concern: one whose fence reached its seq, or one whose
  // fence has not moved (the interrupt may be a halt, which writes no fence). A completion that
  // only moves a fence part of the way wakes nobody: a host thread waiting for half a ring sleeps
  // through the other completions instead of waking for each.
  std::mutex irq_mu_;
  std::condition_variable irq_cv_;
  uint64_t irq_count_ = 0;
  std::vector<Sleeper> sleepers_;  // under irq_mu_
};

}  // namespace spyre::driver
