// One card's IOMMU and interrupt lines in spyre-simd, for every client: a mapping is a client's
// memfd, mapped here; an MSI-X goes to the eventfd of the client that owns the queue whose vector
// it is (the daemon sets each queue's vector to its own index).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "spyre/hw/regs.h"
#include "spyre/sim/iova_map.h"
#include "spyre/sim/simulator.h"

namespace spyre::simd {

// A client's IOVAs: its id above bit 44, so one client's addresses never name another's mapping.
// That range is also its queues' IOVA window in the management page: the card's own IOMMU domain.
inline constexpr int kClientShift = 44;

class CardLink final : public sim::HostLink {
 public:
  /// Maps `bytes` of the client's memfd `fd` from `offset`; its IOVA in `iova`. "" or the error.
  std::string map(uint32_t client, int fd, uint64_t bytes, uint64_t offset, uint64_t* iova);
  /// Maps [addr, addr + bytes) of card `peer`'s memory for the client's DMA (peer-to-peer).
  uint64_t map_peer(uint32_t client, uint32_t peer, uint64_t addr, uint64_t bytes);
  /// Removes the client's mapping at `iova`; false when it has none there.
  bool unmap(uint32_t client, uint64_t iova);
  /// Queue `q`'s interrupts go to `client` (0: nobody).
  void set_owner(uint32_t q, uint32_t client);
  /// The client's interrupt eventfd (this link owns it from now on).
  void set_irq(uint32_t client, int fd);
  /// Forgets every mapping and the eventfd of a client that left.
  void drop(uint32_t client);
  /// Removes every client's peer mapping that reaches into [addr, addr + bytes) of card `peer`
  /// (memory another client exported, given back when it leaves); the DMA that next meets one faults.
  void revoke_peer(uint32_t peer, uint64_t addr, uint64_t bytes);

  bool dma_read(uint64_t iova, void* dst, uint64_t n) override;
  bool dma_write(uint64_t iova, const void* src, uint64_t n) override;
  bool peer_window(uint64_t iova, uint64_t n, uint32_t* card, uint64_t* addr) override;
  void raise_irq(uint32_t vector) override;

 private:
  struct Region {
    uint8_t* host;  // nullptr: device memory of card `peer` from `peer_addr`
    uint64_t len;
    uint32_t client;
    uint32_t peer = 0;
    uint64_t peer_addr = 0;
  };

  std::mutex mu_;
  sim::IovaMap<Region> regions_;
  std::map<uint32_t, uint64_t> next_;
  std::map<uint32_t, int> irqs_;
  std::array<uint32_t, hw::kMaxQueues> owner_ = {};
};

}  // namespace spyre::simd
