#include "spyre/driver/device.h"

#include <algorithm>

#include <fmt/format.h>

#include "spyre/common/log.h"
#include "spyre/hw/pci.h"
#include "spyre/hw/regs.h"

namespace spyre::driver {

namespace {
constexpr uint64_t kAlign = 256;
constexpr uint64_t kReservedLow = uint64_t{64} * 1024;  // device address 0 is never handed out

uint64_t round_up(uint64_t v, uint64_t m) {
  return (v + m - 1) / m * m;
}

std::string gib(uint64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1ull << 30));
}
}  // namespace

HostBuffer::~HostBuffer() {
  (void)transport_.dma_unmap(dev_, iova_);
  transport_.free_host(data_, size_);
}

Device::Device(Transport& t, uint32_t index, DeviceInfo info)
    : transport_(t), index_(index), info_(info), name_(fmt::format("spyre:{}", index)), queue_used_(info.num_queues) {
  free_[info_.memory_base + kReservedLow] = info_.memory_bytes - kReservedLow;
  mem_stats_.total = info_.memory_bytes - kReservedLow;
  transport_.set_irq_handler(index_, [this](uint32_t vector) { on_irq(vector); });
}

Device::~Device() {
  // Closing resets the card, so the next open starts from a clean slate; the read makes sure the
  // posted reset has landed before the handler goes.
  transport_.mmio_write(index_, hw::kRegControl, hw::kControlReset);
  (void)transport_.mmio_read(index_, hw::kRegStatus);
  transport_.set_irq_handler(index_, nullptr);
}

Status Device::open(Transport& t, uint32_t index, std::unique_ptr<Device>* out) {
  if (index >= t.device_count()) {
    return {StatusCode::kInvalidArgument,
            fmt::format("driver: device index {} is out of range ({} device(s) present)", index, t.device_count())};
  }
  if (Status s = t.open(index); !s.ok()) return s;
  DeviceInfo info;
  info.index = index;
  info.vendor_id = static_cast<uint16_t>(t.cfg_read(index, hw::kCfgVendorId, 2));
  info.device_id = static_cast<uint16_t>(t.cfg_read(index, hw::kCfgDeviceId, 2));
  if (info.vendor_id != hw::kPciVendorId || info.device_id != hw::kPciDeviceId) {
    return {StatusCode::kNotAvailable,
            fmt::format("driver: device {} is {:04x}:{:04x}, not a Spyre card", index, info.vendor_id, info.device_id)};
  }
  t.cfg_write(index, hw::kCfgCommand, 2, hw::kCmdMemorySpace | hw::kCmdBusMaster);
  const uint32_t magic = t.mmio_read(index, hw::kRegMagic);
  const uint32_t version = t.mmio_read(index, hw::kRegVersion);
  if (magic == 0xffffffffu && version == 0xffffffffu) {
    return {StatusCode::kNotAvailable,
            fmt::format("driver: device {} does not answer (its registers read all ones: PCIe link down or card lost)",
                        index)};
  }
  if (magic != hw::kRegMagicValue || version != hw::kInterfaceVersion) {
    return {StatusCode::kNotAvailable,
            fmt::format("driver: device {} answers magic {:#x} version {} (expected {:#x} v{})", index, magic, version,
                        hw::kRegMagicValue, hw::kInterfaceVersion)};
  }
  if (!(t.mmio_read(index, hw::kRegStatus) & hw::kStatusFirmwareReady)) {
    return {StatusCode::kNotAvailable, fmt::format("driver: device {} firmware is not ready", index)};
  }
  info.num_queues = std::min(t.mmio_read(index, hw::kRegNumQueues), hw::kMaxQueues);
  info.memory_bytes = t.mmio_read(index, hw::kRegMemSizeLo) | uint64_t{t.mmio_read(index, hw::kRegMemSizeHi)} << 32;
  info.memory_base = t.mmio_read(index, hw::kRegMemBaseLo) | uint64_t{t.mmio_read(index, hw::kRegMemBaseHi)} << 32;
  if (info.memory_bytes <= kReservedLow) {
    return {StatusCode::kNotAvailable,
            fmt::format("driver: device {} offers {} bytes of memory, too few to use", index, info.memory_bytes)};
  }
  hw::CardFigures& card = info.card;
  const auto reg = [&](uint32_t offset) { return t.mmio_read(index, offset); };
  card.cores = reg(hw::kRegNumCores);
  card.clock_mhz = reg(hw::kRegClockMhz);
  card.lx_bytes = reg(hw::kRegLxBytes);
  card.corelets = reg(hw::kRegCorelets);
  card.pt_rows = reg(hw::kRegPtRows);
  card.pt_cols = reg(hw::kRegPtCols);
  card.pt_simd = reg(hw::kRegPtSimd);
  card.fp32_rate = reg(hw::kRegFp32Rate) / 65536.0;
  card.lx_read_bytes_per_cycle = reg(hw::kRegLxReadBytes);
  card.sfp_lanes = reg(hw::kRegSfpLanes);
  card.ring_bytes_per_cycle = reg(hw::kRegRingBytes);
  card.memory_controllers = reg(hw::kRegMemControllers);
  card.memory_mbps = reg(hw::kRegMemMBps);
  if (card.cores == 0 || card.clock_mhz == 0 || card.corelets == 0 || card.pt_rows == 0 || card.pt_cols == 0 ||
      card.pt_simd == 0 || card.fp32_rate <= 0 || card.ring_bytes_per_cycle == 0 || card.memory_controllers == 0 ||
      card.memory_mbps == 0) {
    return {StatusCode::kNotAvailable,
            fmt::format("driver: device {} reports a zero capability (cores, clock, arrays or bandwidths)", index)};
  }
  info.fp16_dlfloat = (t.mmio_read(index, hw::kRegNumerics) & hw::kNumericsFp16DlFloat) != 0;
  out->reset(new Device(t, index, info));
  log("driver").info("spyre:{} opened: {:04x}:{:04x} over {}, {} cores at {} MHz, {} of memory, {} queues", index,
                     info.vendor_id, info.device_id, t.name(), card.cores, card.clock_mhz, gib(info.memory_bytes),
                     info.num_queues);
  return {};
}

Status Device::alloc(uint64_t bytes, uint64_t* addr) {
  const uint64_t size = round_up(std::max<uint64_t>(bytes, 1), kAlign);
  std::lock_guard lock(mem_mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {  // first fit
    if (it->second < size) continue;
    const uint64_t a = it->first;
    const uint64_t rest = it->second - size;
    free_.erase(it);
    if (rest) free_[a + size] = rest;
    used_[a] = size;
    mem_stats_.allocated += size;
    mem_stats_.peak = std::max(mem_stats_.peak, mem_stats_.allocated);
    ++mem_stats_.allocations;
    *addr = a;
    return {};
  }
  uint64_t largest = 0;
  for (const auto& [a, s] : free_) largest = std::max(largest, s);
  log("driver").debug("{}: allocation of {} bytes refused", name_, bytes);
  return {StatusCode::kOutOfMemory,
          fmt::format("{}: out of device memory: tried to allocate {} ({} bytes); {} total, {} allocated, "
                      "largest free block {}",
                      name_, gib(bytes), bytes, gib(mem_stats_.total), gib(mem_stats_.allocated), gib(largest))};
}

bool Device::allocation_at(uint64_t addr, uint64_t* base, uint64_t* size) {
  std::lock_guard lock(mem_mu_);
  auto it = used_.upper_bound(addr);
  if (it == used_.begin()) return false;
  --it;
  if (addr - it->first >= it->second) return false;
  *base = it->first;
  *size = it->second;
  return true;
}

Status Device::free(uint64_t addr) {
  std::lock_guard lock(mem_mu_);
  const auto it = used_.find(addr);
  if (it == used_.end()) {
    return {StatusCode::kInvalidArgument, fmt::format("{}: free of unknown device address {:#x}", name_, addr)};
  }
  uint64_t a = addr;
  uint64_t size = it->second;
  used_.erase(it);
  mem_stats_.allocated -= size;
  --mem_stats_.allocations;
  // Coalesce with the neighbours.
  auto next = free_.lower_bound(a);
  if (next != free_.end() && a + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == a) {
      a = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_[a] = size;
  return {};
}

void Device::scrub(uint64_t addr, uint64_t bytes) {
  // Under the memory lock: the five writes of two scrubs must not interleave.
  std::lock_guard lock(mem_mu_);
  write64(hw::kMgmtScrubBaseLo, addr);
  write64(hw::kMgmtScrubSizeLo, bytes);
  transport_.mmio_write(index_, hw::kMgmtScrub, 1);
  (void)transport_.mmio_read(index_, hw::kRegStatus);  // a read: the posted writes have landed
}

void Device::write64(uint32_t lo, uint64_t value) {
  transport_.mmio_write(index_, lo, static_cast<uint32_t>(value));
  transport_.mmio_write(index_, lo + 4, static_cast<uint32_t>(value >> 32));
}

MemoryStats Device::memory_stats() {
  std::lock_guard lock(mem_mu_);
  MemoryStats s = mem_stats_;
  for (const auto& [a, size] : free_) s.largest_free = std::max(s.largest_free, size);
  return s;
}

Status Device::map_host(uint64_t bytes, std::unique_ptr<HostBuffer>* out) {
  const uint64_t size = round_up(std::max<uint64_t>(bytes, 1), 4096);
  void* p = nullptr;
  if (Status s = transport_.alloc_host(size, &p); !s.ok()) {
    return {s.code(), fmt::format("{}: {}", name_, s.message())};
  }
  uint64_t iova = 0;
  if (Status s = transport_.dma_map(index_, p, size, &iova); !s.ok()) {
    transport_.free_host(p, size);
    return s;
  }
  out->reset(new HostBuffer(transport_, index_, p, size, iova));
  return {};
}

uint64_t Device::cycles() {
  std::lock_guard lock(cycles_mu_);
  const uint64_t lo = transport_.mmio_read(index_, hw::kRegCycleLo);  // latches HI
  return lo | uint64_t{transport_.mmio_read(index_, hw::kRegCycleHi)} << 32;
}

DeviceStatus Device::status() {
  DeviceStatus st;
  st.info = info_;
  const uint32_t dev = index_;
  st.interface_version = transport_.mmio_read(dev, hw::kRegVersion);
  const uint32_t card_status = transport_.mmio_read(dev, hw::kRegStatus);
  st.answers = st.interface_version != 0xffffffffu || card_status != 0xffffffffu;
  st.firmware_ready = st.answers && (card_status & hw::kStatusFirmwareReady) != 0;
  st.cycles = st.answers ? cycles() : 0;
  st.memory = memory_stats();
  {
    std::lock_guard lock(irq_mu_);
    st.interrupts = irq_count_;
  }
  std::vector<bool> open;
  {
    std::lock_guard lock(queue_mu_);
    open = queue_used_;
  }
  for (uint32_t q = 0; q < info_.num_queues && st.answers; ++q) {
    QueueStatus qs;
    qs.id = q;
    qs.open = q < open.size() && open[q];
    const uint32_t status = transport_.mmio_read(dev, hw::queue_reg(q, hw::kQStatus));
    qs.enabled = (status & hw::kQStatusEnabled) != 0;
    qs.error = (status & hw::kQStatusError) != 0;
    qs.halted = (status & hw::kQStatusHalted) != 0;
    qs.last_error = qs.error ? static_cast<hw::ErrorCode>(status >> 16) : hw::ErrorCode::kOk;
    qs.entries = transport_.mmio_read(dev, hw::queue_reg(q, hw::kQRingEntries));
    qs.head = transport_.mmio_read(dev, hw::queue_reg(q, hw::kQHead));
    qs.tail = transport_.mmio_read(dev, hw::queue_reg(q, hw::kQTail));
    qs.resets = transport_.mmio_read(dev, hw::queue_reg(q, hw::kQResets));
    qs.high_priority = transport_.mmio_read(dev, hw::queue_reg(q, hw::kQPriority)) == hw::kQPriorityHigh;
    st.queues.push_back(qs);
  }
  return st;
}

void Device::on_irq(uint32_t /*vector*/) {
  bool wake = false;
  {
    std::lock_guard lock(irq_mu_);
    ++irq_count_;
    for (const Sleeper& s : sleepers_) {
      const uint64_t fence = s.queue->fence_value();
      wake = wake || fence >= s.seq || fence == s.seen;
    }
  }
  if (wake) irq_cv_.notify_all();
}

void Device::release_queue(uint32_t id) {
  std::lock_guard lock(queue_mu_);
  queue_used_[id] = false;
}

Status Device::map_peer(uint32_t peer, uint64_t addr, uint64_t len, uint64_t* iova) {
  return transport_.dma_map_peer(index_, peer, addr, len, iova);
}

Status Device::unmap_peer(uint64_t iova) {
  return transport_.dma_unmap(index_, iova);
}

Status Device::ipc_export(uint64_t addr, uint64_t len, uint64_t* handle) {
  return transport_.ipc_export(index_, addr, len, handle);
}

Status Device::ipc_open(uint64_t handle, Transport::IpcWindow* out) {
  return transport_.ipc_open(index_, handle, out);
}

Status Device::create_queue(uint32_t entries, std::unique_ptr<Queue>* out, uint32_t priority) {
  if (entries < hw::kMinRingEntries || entries > hw::kMaxRingEntries || (entries & (entries - 1)) != 0) {
    return {StatusCode::kInvalidArgument, fmt::format("{}: queue size {} must be a power of two in [{}, {}]", name_,
                                                      entries, hw::kMinRingEntries, hw::kMaxRingEntries)};
  }
  uint32_t id = 0;
  {
    std::lock_guard lock(queue_mu_);
    while (id < queue_used_.size() && queue_used_[id]) ++id;
    if (id == queue_used_.size()) {
      return {StatusCode::kOutOfMemory,
              fmt::format("{}: all {} hardware queues are in use", name_, queue_used_.size())};
    }
    queue_used_[id] = true;
  }
  std::unique_ptr<HostBuffer> ring, cpl, fence, args;
  Status s = map_host(uint64_t{entries} * sizeof(hw::Descriptor), &ring);
  if (s.ok()) s = map_host(uint64_t{entries} * sizeof(hw::Completion), &cpl);
  if (s.ok()) s = map_host(sizeof(uint64_t), &fence);
  if (s.ok()) s = map_host(uint64_t{entries} * hw::kMaxLaunchArgs * sizeof(uint64_t), &args);
  if (!s.ok()) {
    release_queue(id);
    return s;
  }
  auto w = [&](uint32_t r, uint32_t v) { transport_.mmio_write(index_, hw::queue_reg(id, r), v); };
  w(hw::kQControl, hw::kQControlReset);
  w(hw::kQRingBaseLo, static_cast<uint32_t>(ring->iova()));
  w(hw::kQRingBaseHi, static_cast<uint32_t>(ring->iova() >> 32));
  w(hw::kQRingEntries, entries);
  w(hw::kQCplBaseLo, static_cast<uint32_t>(cpl->iova()));
  w(hw::kQCplBaseHi, static_cast<uint32_t>(cpl->iova() >> 32));
  w(hw::kQFenceLo, static_cast<uint32_t>(fence->iova()));
  w(hw::kQFenceHi, static_cast<uint32_t>(fence->iova() >> 32));
  w(hw::kQMsixVector, id);
  w(hw::kQPriority, priority);
  w(hw::kQControl, hw::kQControlEnable);
  log("driver").debug("{}: queue {} created with {} entries, priority {}", name_, id, entries, priority);
  out->reset(new Queue(*this, id, entries, std::move(ring), std::move(cpl), std::move(fence), std::move(args)));
  return {};
}

}  // namespace spyre::driver
