#include "endpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "spyre/hw/pci.h"
#include "spyre/hw/regs.h"

namespace spyre::sim {

namespace hw = spyre::hw;

Endpoint::Endpoint(const sc_core::sc_module_name& name, const Config& config, uint32_t index, Server& server,
                   uint64_t mem_size, CardStats& stats)
    : sc_core::sc_module(name),
      bar0("bar0"),
      config_(config),
      index_(index),
      server_(server),
      mem_size_(mem_size),
      stats_(stats),
      clock_(config.chip.clock_mhz),
      cfg_(hw::kCfgSize, 0),
      regs_(hw::kBar0Size / 4, 0),
      functional_(config.sim.mode == "functional") {
  bar0.register_b_transport(this, &Endpoint::b_transport);
  auto put16 = [&](uint32_t off, uint16_t v) { std::memcpy(&cfg_[off], &v, 2); };
  put16(hw::kCfgVendorId, hw::kPciVendorId);
  put16(hw::kCfgDeviceId, hw::kPciDeviceId);
  cfg_[hw::kCfgClassCode] = hw::kPciClassCode;
  cfg_[hw::kCfgBar0] = 0x4;  // 64-bit memory BAR
}

uint32_t Endpoint::cfg_read(uint32_t offset, uint32_t size) const {
  if (offset >= cfg_.size() || size > cfg_.size() - offset || (size != 1 && size != 2 && size != 4)) {
    return 0xffffffffu;
  }
  uint32_t v = 0;
  std::memcpy(&v, &cfg_[offset], size);
  return v;
}

void Endpoint::cfg_write(uint32_t offset, uint32_t size, uint32_t value) {
  // Only the command register is writable; the rest of the header is read-only in this model.
  if (offset == hw::kCfgCommand && size == 2) {
    const uint16_t v = static_cast<uint16_t>(value) & (hw::kCmdMemorySpace | hw::kCmdBusMaster);
    std::memcpy(&cfg_[offset], &v, 2);
  }
}

bool Endpoint::bus_master() const {
  return (cfg_read(hw::kCfgCommand, 2) & hw::kCmdBusMaster) != 0;
}

uint32_t Endpoint::reg_read(uint32_t offset) {
  switch (offset) {
    case hw::kRegMagic:
      return hw::kRegMagicValue;
    case hw::kRegVersion:
      return hw::kInterfaceVersion;
    case hw::kRegNumQueues:
      return config_.firmware.queues;
    case hw::kRegNumCores:
      return config_.chip.cores;
    case hw::kRegMemSizeLo:
      return static_cast<uint32_t>(mem_size_);
    case hw::kRegMemSizeHi:
      return static_cast<uint32_t>(mem_size_ >> 32);
    case hw::kRegMemBaseLo:
    case hw::kRegMemBaseHi:
      return 0;  // the physical function: all of memory
    case hw::kRegStatus:
      return hw::kStatusFirmwareReady;
    case hw::kRegCycleLo: {
      const uint64_t now = clock_.now_cycles();
      cycle_hi_latch_ = static_cast<uint32_t>(now >> 32);
      return static_cast<uint32_t>(now);
    }
    case hw::kRegCycleHi:
      return cycle_hi_latch_;
    case hw::kRegClockMhz:
      return config_.chip.clock_mhz;
    case hw::kRegLxBytes:
      return static_cast<uint32_t>(config_.chip.lx_bytes);
    case hw::kRegNumerics:
      return config_.chip.fp16_format == "dlfloat16" ? hw::kNumericsFp16DlFloat : 0;
    case hw::kRegCorelets:
      return config_.chip.corelets_per_core;
    case hw::kRegPtRows:
      return config_.chip.pt_rows;
    case hw::kRegPtCols:
      return config_.chip.pt_cols;
    case hw::kRegPtSimd:
      return config_.chip.pt_simd;
    case hw::kRegFp32Rate:
      return static_cast<uint32_t>(std::lround(config_.chip.fp32_rate * 65536));
    case hw::kRegLxReadBytes:
      return config_.chip.lx_read_bytes_per_cycle;
    case hw::kRegSfpLanes:
      return config_.chip.sfp_lanes;
    case hw::kRegRingBytes:
      return config_.ring.bytes_per_cycle;
    case hw::kRegMemControllers:
      return config_.memory.controllers;
    case hw::kRegMemMBps:
      return static_cast<uint32_t>(std::max(1.0, std::round(config_.memory.bandwidth_gbps * 1000)));
    default:
      return offset < hw::kBar0Size ? regs_[offset / 4] : 0;
  }
}

void Endpoint::reg_write_device(uint32_t offset, uint32_t value) {
  if (offset >= hw::kQueueBase && offset < hw::kQueueBase + hw::kMaxQueues * hw::kQueueStride) {
    const uint32_t reg = (offset - hw::kQueueBase) % hw::kQueueStride;
    if (reg == hw::kQHead || reg == hw::kQStatus || reg == hw::kQActive ||
        (reg >= hw::kQSanKind && reg <= hw::kQSanOther)) {
      regs_[offset / 4] = value;
    }
  }
}

void Endpoint::host_reg_write(uint32_t offset, uint32_t value) {
  if (offset == hw::kRegControl) {
    if (value & hw::kControlReset) {
      for (uint32_t q = 0; q < hw::kMaxQueues; ++q) {
        const uint32_t resets = regs_[hw::queue_reg(q, hw::kQResets) / 4];
        const uint32_t active = regs_[hw::queue_reg(q, hw::kQActive) / 4];
        for (uint32_t r = 0; r < hw::kQueueStride; r += 4) regs_[hw::queue_reg(q, r) / 4] = 0;
        regs_[hw::queue_reg(q, hw::kQResets) / 4] = resets + 1;
        regs_[hw::queue_reg(q, hw::kQActive) / 4] = active;  // what runs, runs on
        completed_[q] = 0;
        if (on_queue_reset_) on_queue_reset_(q);
        work_[q].notify(sc_core::SC_ZERO_TIME);
      }
    }
    return;
  }
  if (offset >= hw::kMgmtBase && offset < hw::kMgmtEnd) {
    if (offset == hw::kMgmtScrub) {
      const uint64_t base = regs_[hw::kMgmtScrubBaseLo / 4] | uint64_t{regs_[hw::kMgmtScrubBaseHi / 4]} << 32;
      const uint64_t size = regs_[hw::kMgmtScrubSizeLo / 4] | uint64_t{regs_[hw::kMgmtScrubSizeHi / 4]} << 32;
      if ((value & 1) && on_scrub_) on_scrub_(base, size);
    } else {
      regs_[offset / 4] = value;
    }
    return;
  }
  if (offset < hw::kQueueBase || offset >= hw::kQueueBase + config_.firmware.queues * hw::kQueueStride) return;
  const uint32_t q = (offset - hw::kQueueBase) / hw::kQueueStride;
  const uint32_t reg = (offset - hw::kQueueBase) % hw::kQueueStride;
  uint32_t& status = regs_[hw::queue_reg(q, hw::kQStatus) / 4];
  switch (reg) {
    case hw::kQHead:
    case hw::kQStatus:
    case hw::kQResets:
    case hw::kQActive:
    case hw::kQSanKind:
    case hw::kQSanAddrLo:
    case hw::kQSanAddrHi:
    case hw::kQSanBytes:
    case hw::kQSanTagLo:
    case hw::kQSanTagHi:
    case hw::kQSanOther:
      return;  // device-owned
    case hw::kQControl:
      if (value & hw::kQControlReset) {
        status = 0;
        regs_[hw::queue_reg(q, hw::kQHead) / 4] = 0;
        regs_[hw::queue_reg(q, hw::kQTail) / 4] = 0;
        ++regs_[hw::queue_reg(q, hw::kQResets) / 4];
        completed_[q] = 0;  // a new ring: its sequence numbers start again
        if (on_queue_reset_) on_queue_reset_(q);
      }
      status = (status & ~hw::kQStatusEnabled) | ((value & hw::kQControlEnable) ? hw::kQStatusEnabled : 0);
      work_[q].notify(sc_core::SC_ZERO_TIME);
      return;
    case hw::kQTail:
      regs_[offset / 4] = value;
      work_[q].notify(sc_core::SC_ZERO_TIME);
      return;
    default:
      regs_[offset / 4] = value;
      return;
  }
}

void Endpoint::b_transport(tlm::tlm_generic_payload& gp, sc_core::sc_time& /*delay*/) {
  const uint64_t offset = gp.get_address();
  if (gp.get_data_length() != 4 || offset % 4 != 0) {
    gp.set_response_status(tlm::TLM_BURST_ERROR_RESPONSE);
    return;
  }
  if (offset >= hw::kBar0Size) {
    gp.set_response_status(tlm::TLM_ADDRESS_ERROR_RESPONSE);
    return;
  }
  // A card behind a link that is down answers nothing: reads complete with all ones.
  const bool decoding = !link_down_ && (cfg_read(hw::kCfgCommand, 2) & hw::kCmdMemorySpace) != 0;
  uint32_t value = 0;
  if (gp.is_read()) {
    value = decoding ? reg_read(static_cast<uint32_t>(offset)) : 0xffffffffu;
    std::memcpy(gp.get_data_ptr(), &value, 4);
  } else if (gp.is_write() && decoding) {
    std::memcpy(&value, gp.get_data_ptr(), 4);
    host_reg_write(static_cast<uint32_t>(offset), value);
  }
  gp.set_response_status(tlm::TLM_OK_RESPONSE);
}

uint64_t Endpoint::wire_bytes(uint64_t n) const {
  const uint64_t packets = (n + config_.pcie.max_payload_bytes - 1) / config_.pcie.max_payload_bytes;
  return n + packets * config_.pcie.packet_overhead_bytes;
}

bool Endpoint::host_read(uint64_t iova, void* dst, uint64_t n, sc_core::sc_time& delay) {
  auto* out = static_cast<uint8_t*>(dst);
  const uint8_t* at = host_read_kept(iova, out, n, delay);
  if (at && at != out) std::memcpy(out, at, n);
  return at != nullptr;
}

const uint8_t* Endpoint::host_read_kept(uint64_t iova, uint8_t* dst, uint64_t n, sc_core::sc_time& delay) {
  if (link_down_ || !host_ || !bus_master()) return nullptr;
  uint32_t peer = 0;
  uint64_t addr = 0;
  if (host_->peer_window(iova, n, &peer, &addr)) {
    return server_.peer_read(index_, peer, addr, dst, n, wire_bytes(n), !functional_, delay, nullptr) ? dst : nullptr;
  }
  const uint8_t* at = host_->keeps_bytes() ? host_->dma_kept(iova, n) : (host_->dma_read(iova, dst, n) ? dst : nullptr);
  if (!at || functional_) return at;
  // A read is a request upstream and completions with the data downstream: a round trip.
  const uint64_t now = sc_core::sc_time_stamp().value();
  const uint64_t done = server_.host_transfer(index_, /*to_host=*/false, now + delay.value(), wire_bytes(n)) +
                        uint64_t{config_.pcie.latency_ns} * 1000;
  delay = sc_core::sc_time::from_value(done - now);
  return at;
}

bool Endpoint::host_write(uint64_t iova, const void* src, uint64_t n, sc_core::sc_time& delay) {
  if (link_down_ || !host_ || !bus_master()) return false;
  uint32_t peer = 0;
  uint64_t addr = 0;
  if (host_->peer_window(iova, n, &peer, &addr)) {
    return server_.peer_write(index_, peer, addr, static_cast<const uint8_t*>(src), n, wire_bytes(n), !functional_,
                              delay, nullptr);
  }
  if (!host_->dma_write(iova, src, n)) return false;
  if (functional_) return true;
  // A posted write: one way, half the round trip.
  const uint64_t now = sc_core::sc_time_stamp().value();
  const uint64_t done = server_.host_transfer(index_, /*to_host=*/true, now + delay.value(), wire_bytes(n)) +
                        uint64_t{config_.pcie.latency_ns} * 500;
  delay = sc_core::sc_time::from_value(done - now);
  return true;
}

void Endpoint::halt_all_queues(hw::ErrorCode e) {
  for (uint32_t q = 0; q < config_.firmware.queues; ++q) {
    uint32_t& status = regs_[hw::queue_reg(q, hw::kQStatus) / 4];
    if (!(status & hw::kQStatusEnabled)) continue;
    status = (status & 0xffffu) | hw::kQStatusError | hw::kQStatusHalted | (static_cast<uint32_t>(e) << 16);
    raise_msix(regs_[hw::queue_reg(q, hw::kQMsixVector) / 4]);
  }
}

void Endpoint::raise_msix(uint32_t vector) {
  ++stats_.msix;
  if (host_ && bus_master() && !link_down_) host_->raise_irq(vector);
  if (on_msix_) on_msix_();
}

void Endpoint::link_down_at(uint64_t cycle) {
  sc_core::sc_spawn([this, cycle] {
    const uint64_t now = clock_.now_cycles();
    if (cycle > now) wait(clock_.cycles(cycle - now));
    link_down_ = true;
    // Every queue stops: what the host waits for will never come. No interrupt crosses the link;
    // a host waiter finds out by reading STATUS (all ones).
    for (uint32_t q = 0; q < config_.firmware.queues; ++q) {
      uint32_t& status = regs_[hw::queue_reg(q, hw::kQStatus) / 4];
      if (!(status & hw::kQStatusEnabled)) continue;
      status = (status & 0xffffu) | hw::kQStatusError | hw::kQStatusHalted |
               (static_cast<uint32_t>(hw::ErrorCode::kLinkDown) << 16);
    }
    if (on_msix_) on_msix_();  // the simulator's own bookkeeping of host waits
  });
}

bool Endpoint::halted(uint32_t q) const {
  return (regs_[hw::queue_reg(q, hw::kQStatus) / 4] & hw::kQStatusHalted) != 0;
}

}  // namespace spyre::sim
