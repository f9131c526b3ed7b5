// The firmware's view of the hardware around the control processor. The simulator implements it
// (sim/src/control_processor.cpp); unit tests implement it with a fake. Every call may consume
// device time; none may throw.
#pragma once

#include <cstdint>

#include "spyre/hw/commands.h"
#include "spyre/hw/errors.h"

namespace spyre::fw {

/// A range of device memory: a queue's window (hw/regs.h, the management page). size 0: no window,
/// all of memory.
struct Window {
  uint64_t base = 0;
  uint64_t size = 0;
};

/// A launch's u64 argument block of `size` bytes: at `addr` in device memory, where each core reads
/// it as it starts; or, `from_host`, read by the firmware from host memory at IOVA `addr` into
/// `values`, which the cores take as they are.
struct Arguments {
  uint64_t addr = 0;
  uint64_t size = 0;
  bool from_host = false;
  uint64_t values[hw::kMaxLaunchArgs] = {};
};

class Hal {
 public:
  virtual ~Hal() = default;

  /// Reads a BAR0 register as the device sees it (host-written values and device-owned state).
  virtual uint32_t reg_read(uint32_t offset) = 0;
  /// Writes a device-owned register (queue head and status); host-only registers ignore it.
  virtual void reg_write(uint32_t offset, uint32_t value) = 0;

  /// Reads `n` bytes at IOVA `iova` of host memory by DMA. False when the IOMMU refuses it.
  virtual bool host_read(uint64_t iova, void* dst, uint32_t n) = 0;
  /// Writes `n` bytes to host memory by DMA. False when the IOMMU refuses it.
  virtual bool host_write(uint64_t iova, const void* src, uint32_t n) = 0;
  /// Reads device memory; the caller has checked the range.
  virtual void dev_read(uint64_t addr, void* dst, uint32_t n) = 0;
  /// Writes device memory; the caller has checked the range.
  virtual void dev_write(uint64_t addr, const void* src, uint32_t n) = 0;

  virtual uint64_t dev_mem_size() = 0;
  virtual uint32_t num_cores() = 0;

  /// Runs a validated copy on a free DMA channel (waiting for one, ahead of lower `priority`
  /// waiters) and returns when it has finished.
  virtual hw::Verdict copy(const hw::CopyArgs& args, uint8_t flags, uint32_t priority) = 0;
  /// Waits until every core in `core_mask` is free (ahead of lower `priority` waiters), starts the
  /// program on them with the argument block `args` for queue `queue`, and returns when all have
  /// stopped. The cores fault (kDmaFault) on any device access outside `window`.
  virtual hw::Verdict launch(uint32_t queue, uint64_t program, const Arguments& args, uint64_t core_mask,
                             uint32_t priority, const Window& window) = 0;
  /// Hands a validated SANITIZE command of queue `queue` to the device sanitizer, in queue order.
  virtual void sanitize(uint32_t queue, const hw::SanitizeArgs& args) = 0;

  virtual void raise_msix(uint32_t vector) = 0;
  virtual uint64_t now_cycles() = 0;
  /// Sleeps until the host writes queue `queue`'s doorbell or control register, or resets the device.
  virtual void wait_for_work(uint32_t queue) = 0;
  /// Starts watching queue `queue`'s signals: the next wait_for_signal(queue, ...) returns at once
  /// if one came after this call. The firmware arms before it reads a semaphore it may then wait
  /// on, so that a signal raised while the read is in flight (across PCIe, it takes a round trip)
  /// is not lost.
  virtual void arm_signal(uint32_t queue) = 0;
  /// Sleeps until a semaphore of this card (`any_card`: of any card of the server) is signalled
  /// (or was since arm_signal(queue)), or as wait_for_work(queue).
  virtual void wait_for_signal(uint32_t queue, bool any_card) = 0;
  /// Wakes every wait_for_signal() of this card, and those of any card that wait for any card's.
  virtual void signalled() = 0;
  /// Tells the model a command ran on queue `queue` (for traces and stats); no effect on results.
  virtual void command_done(uint32_t queue, const hw::Descriptor& d, const hw::Completion& c) = 0;
};

}  // namespace spyre::fw
