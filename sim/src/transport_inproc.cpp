// The "inproc" transport: the SystemC model runs in a thread of this process. It is the
// simulator's side of the driver's transport seam: the driver does not link it; a program that
// wants the card in-process links spyre_sim_inproc and registers it (spyre/sim/inproc.h). It
// reaches the model only through the wire-level API of spyre/sim/simulator.h, and plays the IOMMU:
// the card's DMA reaches only host ranges mapped here.
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "spyre/driver/transport.h"
#include "spyre/sim/inproc.h"
#include "spyre/sim/iova_map.h"
#include "spyre/sim/simulator.h"

namespace spyre::sim {
namespace {

using driver::Status;
using driver::StatusCode;
using driver::Transport;

constexpr uint64_t kIovaBase = 0x1000'0000'0000ull;
constexpr uint64_t kIovaAlign = 4096;

// One card's IOMMU and interrupt line. A mapping is host memory, or another card's memory window
// (peer-to-peer DMA), which the simulator serves.
class Link final : public HostLink {
 public:
  Status map(void* host, uint64_t len, uint64_t* iova) {
    if (host == nullptr || len == 0) return {StatusCode::kInvalidArgument, "iommu: cannot map an empty range"};
    return add(Region{static_cast<uint8_t*>(host), len, 0, 0}, iova);
  }

  Status map_peer(uint32_t peer, uint64_t offset, uint64_t len, uint64_t* iova) {
    if (len == 0) return {StatusCode::kInvalidArgument, "iommu: cannot map an empty range"};
    return add(Region{nullptr, len, peer, offset}, iova);
  }

  Status unmap(uint64_t iova) {
    std::lock_guard lock(mu_);
    if (!regions_.erase(iova)) {
      return {StatusCode::kInvalidArgument, fmt::format("iommu: no mapping at IOVA {:#x}", iova)};
    }
    return {};
  }

  void set_handler(std::function<void(uint32_t)> h) {
    std::lock_guard lock(mu_);
    handler_ = std::make_shared<std::function<void(uint32_t)>>(std::move(h));
  }

  bool dma_read(uint64_t iova, void* dst, uint64_t n) override {
    std::lock_guard lock(mu_);
    uint64_t off = 0;
    const Region* r = regions_.find(iova, n, &off);
    if (!r || !r->host) return false;  // a peer window is the switch's (peer_window)
    std::memcpy(dst, r->host + off, n);
    return true;
  }

  bool dma_write(uint64_t iova, const void* src, uint64_t n) override {
    std::lock_guard lock(mu_);
    uint64_t off = 0;
    const Region* r = regions_.find(iova, n, &off);
    if (!r || !r->host) return false;
    store_dma_write(r->host + off, src, n);
    return true;
  }

  bool peer_window(uint64_t iova, uint64_t n, uint32_t* card, uint64_t* addr) override {
    std::lock_guard lock(mu_);
    uint64_t off = 0;
    const Region* r = regions_.find(iova, n, &off);
    if (!r || r->host) return false;
    *card = r->peer;
    *addr = r->peer_offset + off;
    return true;
  }

  void raise_irq(uint32_t vector) override {
    std::shared_ptr<std::function<void(uint32_t)>> h;
    {
      std::lock_guard lock(mu_);
      h = handler_;
    }
    if (h && *h) (*h)(vector);
  }

 private:
  struct Region {
    uint8_t* host;  // nullptr: a peer card's memory window
    uint64_t len;
    uint32_t peer;
    uint64_t peer_offset;
  };
  Status add(Region r, uint64_t* iova) {
    std::lock_guard lock(mu_);
    *iova = next_;
    next_ += (r.len + kIovaAlign - 1) / kIovaAlign * kIovaAlign + kIovaAlign;  // a guard page between mappings
    regions_.insert(*iova, r);
    return {};
  }

  std::mutex mu_;
  IovaMap<Region> regions_;
  uint64_t next_ = kIovaBase;
  std::shared_ptr<std::function<void(uint32_t)>> handler_;
};

class InprocTransport final : public Transport {
 public:
  explicit InprocTransport(Simulator& sim) : sim_(sim) {
    for (uint32_t i = 0; i < sim.num_cards(); ++i) {
      links_.push_back(std::make_unique<Link>());
      sim_.attach(i, links_.back().get());
    }
  }
  ~InprocTransport() override {
    for (uint32_t i = 0; i < links_.size(); ++i) sim_.attach(i, nullptr);
  }

  const char* name() const override { return "inproc"; }
  uint32_t device_count() const override { return static_cast<uint32_t>(links_.size()); }
  uint32_t cfg_read(uint32_t dev, uint32_t offset, uint32_t size) override { return sim_.cfg_read(dev, offset, size); }
  void cfg_write(uint32_t dev, uint32_t offset, uint32_t size, uint32_t value) override {
    sim_.cfg_write(dev, offset, size, value);
  }
  uint32_t mmio_read(uint32_t dev, uint32_t offset) override { return sim_.mmio_read(dev, offset); }
  void mmio_write(uint32_t dev, uint32_t offset, uint32_t value) override { sim_.mmio_write(dev, offset, value); }
  Status dma_map(uint32_t dev, void* host, uint64_t len, uint64_t* iova) override {
    return links_.at(dev)->map(host, len, iova);
  }
  Status dma_map_peer(uint32_t dev, uint32_t peer, uint64_t offset, uint64_t len, uint64_t* iova) override {
    if (peer >= links_.size() || peer == dev) {
      return {StatusCode::kInvalidArgument, fmt::format("iommu: no peer card {} for card {}", peer, dev)};
    }
    return links_.at(dev)->map_peer(peer, offset, len, iova);
  }
  Status dma_unmap(uint32_t dev, uint64_t iova) override { return links_.at(dev)->unmap(iova); }
  void set_irq_handler(uint32_t dev, std::function<void(uint32_t)> handler) override {
    links_.at(dev)->set_handler(std::move(handler));
  }
  uint64_t wait_begin(uint32_t dev, uint32_t queue, uint64_t seq) override { return sim_.wait_begin(dev, queue, seq); }
  void wait_end(uint64_t token, bool ended_by_card) override { sim_.wait_end(token, ended_by_card); }
  void note_poll(uint32_t /*dev*/) override { sim_.note_poll(); }
  Status write_sim_reports(std::string* trace_path, std::string* stats_path) override {
    try {
      const Reports r = sim_.flush_reports();
      *trace_path = r.trace_path;
      *stats_path = r.stats_path;
      return {};
    } catch (const std::exception& e) {
      return {StatusCode::kInvalidArgument, e.what()};
    }
  }

 private:
  Simulator& sim_;
  std::vector<std::unique_ptr<Link>> links_;
};

Status open_inproc(std::unique_ptr<Transport>* out) {
  try {
    *out = std::make_unique<InprocTransport>(Simulator::instance());
    return {};
  } catch (const std::exception& e) {
    return {StatusCode::kNotAvailable, fmt::format("transport inproc: {}", e.what())};
  }
}

}  // namespace

void register_inproc_transport() {
  driver::register_transport("inproc", &open_inproc);
}

}  // namespace spyre::sim
