// The card's control processor: runs the firmware (firmware/) and gives it the hardware through
// fw::Hal. Every Hal call costs device time. One firmware context (a SystemC thread) per hardware
// queue, so queues run concurrently; they meet at the cores and DMA channels, which arbiters hand
// out by queue priority.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "arbiter.h"
#include "core.h"
#include "device_memory.h"
#include "dma_engine.h"
#include "endpoint.h"
#include "server.h"
#include "spyre/firmware/firmware.h"

namespace spyre::sim {

class ControlProcessor : public sc_core::sc_module, private fw::Hal {
 public:
  ControlProcessor(const sc_core::sc_module_name& name, const Config& config, uint32_t card, Endpoint& endpoint,
                   DeviceMemory& memory, DmaEngine& dma, std::vector<Core*> cores, Trace& trace, CardStats& stats,
                   Server& server);
  /// The device sanitizer that SANITIZE commands reach, and whose reports land in queue registers.
  void set_sanitizer(Sanitizer* s) { sanitizer_ = s; }

 private:
  // fw::Hal
  uint32_t reg_read(uint32_t offset) override { return endpoint_.reg_read(offset); }
  void reg_write(uint32_t offset, uint32_t value) override { endpoint_.reg_write_device(offset, value); }
  bool host_read(uint64_t iova, void* dst, uint32_t n) override;
  bool host_write(uint64_t iova, const void* src, uint32_t n) override;
  void dev_read(uint64_t addr, void* dst, uint32_t n) override { memory_.read(addr, dst, n); }
  void dev_write(uint64_t addr, const void* src, uint32_t n) override { memory_.write(addr, src, n); }
  uint64_t dev_mem_size() override { return memory_.size(); }
  uint32_t num_cores() override { return static_cast<uint32_t>(cores_.size()); }
  hw::Verdict copy(const hw::CopyArgs& args, uint8_t flags, uint32_t priority) override {
    return dma_.copy(args, flags, priority);
  }
  hw::Verdict launch(uint32_t queue, uint64_t program, const fw::Arguments& args, uint64_t core_mask, uint32_t priority,
                     const fw::Window& window) override;
  void sanitize(uint32_t queue, const hw::SanitizeArgs& args) override {
    if (sanitizer_) sanitizer_->command(queue, args);
  }
  void raise_msix(uint32_t vector) override { endpoint_.raise_msix(vector); }
  uint64_t now_cycles() override { return clock_.now_cycles(); }
  /// The NUL-terminated label at `addr` (at most kMaxLabelBytes - 1 characters).
  std::string read_label(uint64_t addr) const;
  void wait_for_work(uint32_t queue) override { wait(endpoint_.work_event(queue)); }
  void arm_signal(uint32_t queue) override { armed_[queue] = {signals_, server_.signals()}; }
  void wait_for_signal(uint32_t queue, bool any_card) override {
    const auto [own, any] = armed_[queue];
    if (any_card ? server_.signals() != any : signals_ != own) return;  // one came since the arm
    wait(endpoint_.work_event(queue) | (any_card ? server_.signal() : signalled_));
  }
  void signalled() override {
    ++signals_;
    signalled_.notify(sc_core::SC_ZERO_TIME);
    server_.raise_signal();
  }
  void command_done(uint32_t queue, const hw::Descriptor& d, const hw::Completion& c) override;
  /// Puts a sanitizer report in queue `queue`'s kQSan* registers.
  void report(uint32_t queue, const SanitizerReport& r);

  const Config& config_;
  Clock clock_;
  Endpoint& endpoint_;
  DeviceMemory& memory_;
  DmaEngine& dma_;
  std::vector<Core*> cores_;
  Arbiter core_arbiter_;
  std::vector<std::unique_ptr<Launch>> idle_launches_;  // barrier state, one per launch in flight
  sc_core::sc_event signalled_;
  uint64_t signals_ = 0;                                               // this card's, ever
  std::array<std::pair<uint64_t, uint64_t>, hw::kMaxQueues> armed_{};  // per queue: (own, server's) at the arm
  Server& server_;
  // Launches whose cores are done, until command_done names them: by (program, argument block).
  std::multimap<std::pair<uint64_t, uint64_t>, LaunchStats> finished_launches_;
  std::vector<uint32_t> queue_tracks_;  // trace track of each queue, made on its first command (0: none yet)
  /// The trace track of queue `queue`.
  uint32_t queue_track(uint32_t queue);
  uint64_t next_flow_ = 1;  // the trace's flows from launches to their cores' programs
  Trace& trace_;
  CardStats& stats_;
  uint32_t card_;
  Sanitizer* sanitizer_ = nullptr;
  fw::Firmware firmware_;
};

}  // namespace spyre::sim
