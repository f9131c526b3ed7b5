// PCIe endpoint of one card: config space, the BAR0 register file, host DMA across the link
// (with PCIe bandwidth and latency), and MSI-X. Register semantics live here; the register map
// itself is spyre/hw/regs.h.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include <tlm_utils/simple_target_socket.h>

#include "server.h"
#include "spyre/hw/errors.h"
#include "spyre/hw/regs.h"
#include "spyre/sim/config.h"
#include "spyre/sim/simulator.h"
#include "timing.h"
#include "trace.h"

namespace spyre::sim {

class Endpoint : public sc_core::sc_module {
 public:
  /// BAR0 as the host reaches it: 4-byte reads and writes at offsets below hw::kBar0Size.
  tlm_utils::simple_target_socket<Endpoint> bar0;

  /// Card `index` of `server`, whose switch its link goes to.
  Endpoint(const sc_core::sc_module_name& name, const Config& config, uint32_t index, Server& server, uint64_t mem_size,
           CardStats& stats);

  void attach(HostLink* link) { host_ = link; }
  uint32_t cfg_read(uint32_t offset, uint32_t size) const;
  void cfg_write(uint32_t offset, uint32_t size, uint32_t value);

  // Device side (firmware, DMA engine).
  uint32_t reg_read(uint32_t offset);
  void reg_write_device(uint32_t offset, uint32_t value);
  /// DMA across the link, to host memory or (through the switch) to another card's memory window.
  /// `delay` (relative to now) is advanced by the transfer's time.
  bool host_read(uint64_t iova, void* dst, uint64_t n, sc_core::sc_time& delay);
  /// host_read without the copy when the host keeps the bytes (HostLink::keeps_bytes): where the
  /// bytes are, `dst` when they were copied there; nullptr when the read failed.
  const uint8_t* host_read_kept(uint64_t iova, uint8_t* dst, uint64_t n, sc_core::sc_time& delay);
  bool host_write(uint64_t iova, const void* src, uint64_t n, sc_core::sc_time& delay);
  void raise_msix(uint32_t vector);
  /// Called with (base, size) when the host scrubs a range of device memory (hw::kMgmtScrub).
  void on_scrub(std::function<void(uint64_t, uint64_t)> hook) { on_scrub_ = std::move(hook); }
  /// Called with a queue's number when the host resets it (its control register, or the card).
  void on_queue_reset(std::function<void(uint32_t)> hook) { on_queue_reset_ = std::move(hook); }
  /// Called after every MSI-X the card raises (on the simulator thread); for host pacing.
  void on_msix(std::function<void()> hook) { on_msix_ = std::move(hook); }
  /// The firmware completed descriptor `seq` of queue `q` (its fence now holds it); a reset of the
  /// queue or the card starts the count again.
  void note_completed(uint32_t q, uint64_t seq) { completed_[q] = std::max(completed_[q], seq); }
  uint64_t completed(uint32_t q) const { return completed_[q]; }
  bool halted(uint32_t q) const;
  /// Fault injection: the link goes down for good when the card's clock reaches `cycle`. From then
  /// on the host reads all ones from BAR0, its writes are dropped, no interrupt reaches it, and
  /// every DMA to or from host memory fails; the queues halt with kLinkDown.
  void link_down_at(uint64_t cycle);
  bool link_down() const { return link_down_; }
  /// The model failed: halt every enabled queue with `e` and raise its interrupt, so that no
  /// host waiter sleeps forever.
  void halt_all_queues(hw::ErrorCode e);
  /// Notified on every doorbell and control write of queue `q`, and on a device reset.
  const sc_core::sc_event& work_event(uint32_t q) const { return work_[q]; }

 private:
  void b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  void host_reg_write(uint32_t offset, uint32_t value);
  bool bus_master() const;
  /// Bytes on the wire for `n` bytes of data: each packet of pcie.max_payload_bytes carries
  /// pcie.packet_overhead_bytes more.
  uint64_t wire_bytes(uint64_t n) const;

  const Config& config_;
  uint32_t index_;
  Server& server_;
  uint64_t mem_size_;
  CardStats& stats_;
  Clock clock_;
  HostLink* host_ = nullptr;
  std::vector<uint8_t> cfg_;
  std::vector<uint32_t> regs_;  // the queue block storage, indexed by offset / 4
  uint32_t cycle_hi_latch_ = 0;
  bool functional_;
  std::array<sc_core::sc_event, hw::kMaxQueues> work_;
  std::array<uint64_t, hw::kMaxQueues> completed_ = {};
  std::function<void()> on_msix_;
  std::function<void(uint64_t, uint64_t)> on_scrub_;
  std::function<void(uint32_t)> on_queue_reset_;
  bool link_down_ = false;
};

}  // namespace spyre::sim
