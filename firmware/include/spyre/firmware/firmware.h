// Device firmware: owns the command rings. Fetches descriptors by DMA, validates every field,
// runs copies and launches, writes completions and fences, raises MSI-X.
// Freestanding C++: no exceptions, no heap, no library beyond <cstdint>.
#pragma once

#include <cstdint>

#include "spyre/firmware/hal.h"
#include "spyre/hw/commands.h"
#include "spyre/hw/isa.h"
#include "spyre/hw/regs.h"

namespace spyre::fw {

/// What validation needs to know about the device and the queue: the device memory its commands
/// may name ([mem_base, mem_base + mem_size), inside device memory) and the IOVAs its DMA may reach.
struct Limits {
  uint64_t mem_size;
  uint32_t num_cores;
  uint64_t mem_base = 0;
  uint64_t iova_base = 0;
  uint64_t iova_size = 0;  // 0: every IOVA (the host's IOMMU still checks each one)
};

/// Checks every field of `d` that can be checked without touching memory.
/// Returns kOk or the first error with the field to blame.
hw::Verdict validate_descriptor(const hw::Descriptor& d, const Limits& limits);

/// Checks a program header against its launch descriptor.
hw::Verdict validate_program(const hw::ProgramHeader& header, const hw::LaunchArgs& launch);

class Firmware {
 public:
  explicit Firmware(Hal& hal) : hal_(hal) {}

  /// Services every enabled queue once, at most one descriptor each, round robin.
  /// Returns true when any descriptor was consumed.
  bool poll_once();

  /// Services queue `q`'s next descriptor, if any. Returns true when one was consumed.
  bool service_queue(uint32_t q);

  /// One queue's context: services queue `q` and sleeps when it is empty. Never returns. The
  /// control processor runs one context per hardware queue, so queues run concurrently and meet
  /// only at the cores and DMA channels they share (the Hal arbitrates them by queue priority).
  [[noreturn]] void serve(uint32_t q);

 private:
  /// Queue `q`'s limits: the device's, narrowed by its windows in the management page.
  Limits limits(uint32_t q);
  uint64_t reg64(uint32_t lo);
  // `resets` is the queue's reset count when its descriptor was fetched.
  hw::Verdict execute(uint32_t q, uint32_t resets, const hw::Descriptor& d, const Limits& limits);
  hw::Verdict run_launch(uint32_t q, uint32_t resets, const hw::LaunchArgs& l, uint8_t flags, uint32_t priority,
                         const Limits& limits);
  hw::Verdict signal(const hw::SemaphoreArgs& s);
  /// Holds queue `q` until the semaphore of WAIT `d` reaches its value; false when the queue was reset
  /// meanwhile. A semaphore across PCIe (kWaitHost) that the IOMMU refuses sets `v` to a DMA fault.
  bool wait_semaphore(uint32_t q, const hw::Descriptor& d, uint32_t resets, hw::Verdict& v);
  void fail_queue(uint32_t q, hw::ErrorCode e);
  void halt_queue(uint32_t q, hw::ErrorCode e, uint32_t tail);

  Hal& hal_;
  uint32_t next_queue_ = 0;
  // Per queue: the seq of the last descriptor it completed, and the RESETS count it was seen
  // under (a reset starts a new ring, whose sequence may start again).
  uint64_t last_seq_[hw::kMaxQueues] = {};
  uint32_t seq_resets_[hw::kMaxQueues] = {};
};

}  // namespace spyre::fw
