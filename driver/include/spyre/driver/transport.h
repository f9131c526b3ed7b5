// The wire between the driver and a card: PCI config space, BAR0 MMIO, DMA mappings of host
// memory (the IOMMU) and MSI-X. Nothing else crosses it. One implementation per kind of card:
// "inproc" (the SystemC model in a thread of this process), later "socket" (a simulator daemon)
// and "vfio" (silicon).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "spyre/driver/status.h"

namespace spyre::driver {

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const char* name() const = 0;
  /// Cards reachable through this transport.
  virtual uint32_t device_count() const = 0;
  /// Takes card `dev` for this process before any other call names it (vfio: opening the
  /// device). kNotAvailable when the card serves as many processes as it can; a card served in
  /// slots is this process's slot of it from here on.
  virtual Status open(uint32_t dev) {
    (void)dev;
    return {};
  }

  virtual uint32_t cfg_read(uint32_t dev, uint32_t offset, uint32_t size) = 0;
  virtual void cfg_write(uint32_t dev, uint32_t offset, uint32_t size, uint32_t value) = 0;
  /// 32-bit BAR0 read; blocks until the card answers.
  virtual uint32_t mmio_read(uint32_t dev, uint32_t offset) = 0;
  /// 32-bit BAR0 write; posted: returns at once, writes arrive in order.
  virtual void mmio_write(uint32_t dev, uint32_t offset, uint32_t value) = 0;

  /// Allocates `len` bytes (a multiple of 4096) of zeroed host memory that dma_map can hand to
  /// the card: anonymous memory in-process; a transport whose card lives in another process
  /// allocates memory it can share with it. kOutOfMemory when the host has none.
  virtual Status alloc_host(uint64_t len, void** host);
  /// Frees what alloc_host returned (unmap it first).
  virtual void free_host(void* host, uint64_t len);

  /// Makes `len` bytes at `host` reachable by the card's DMA; returns the device-visible address.
  /// `host` lies in memory from alloc_host.
  virtual Status dma_map(uint32_t dev, void* host, uint64_t len, uint64_t* iova) = 0;
  /// Makes `len` bytes of card `peer`'s device memory, from `offset`, reachable by card `dev`'s
  /// DMA (peer-to-peer through the peer's memory window); returns the device-visible address.
  virtual Status dma_map_peer(uint32_t dev, uint32_t peer, uint64_t offset, uint64_t len, uint64_t* iova) = 0;
  /// Removes a mapping made by dma_map or dma_map_peer.
  virtual Status dma_unmap(uint32_t dev, uint64_t iova) = 0;

  /// Device memory shared between processes (as cudaIpcGetMemHandle): makes [addr, addr + len)
  /// of card `dev`, which this process owns, reachable by other processes of the same cards;
  /// returns an unguessable handle to give them. The sharing ends when this process closes the
  /// device. kNotAvailable where the cards serve one process (in-process).
  virtual Status ipc_export(uint32_t dev, uint64_t addr, uint64_t len, uint64_t* handle);
  /// What ipc_open mapped: `bytes` from `addr` of card `card`, at `iova` for this card's DMA.
  struct IpcWindow {
    uint64_t iova = 0;
    uint32_t card = 0;
    uint64_t addr = 0;
    uint64_t bytes = 0;
  };
  /// Maps another process's export (`handle`, from ipc_export on another card) for card `dev`'s
  /// DMA, as dma_map_peer does for this process's own memory. Undo with dma_unmap.
  virtual Status ipc_open(uint32_t dev, uint64_t handle, IpcWindow* out);

  /// Installs the MSI-X handler of `dev`. It runs on a transport thread and must not block.
  virtual void set_irq_handler(uint32_t dev, std::function<void(uint32_t vector)> handler) = 0;

  /// Simulator service, not part of the wire: writes the configured trace and stats files and
  /// returns their paths (empty when not configured). kNotAvailable on silicon.
  virtual Status write_sim_reports(std::string* trace_path, std::string* stats_path) = 0;

  /// Simulator service, not part of the wire (nothing to do on silicon): a host thread is about
  /// to block until queue `queue` of card `dev` completes descriptor `seq`. A host-paced simulator
  /// (`sim.host_paced`) advances simulated time only while a host thread blocks this way, so that
  /// what the host does between two waits lands at a simulated time its speed cannot change.
  /// Returns a token for wait_end.
  virtual uint64_t wait_begin(uint32_t dev, uint32_t queue, uint64_t seq) {
    (void)dev;
    (void)queue;
    (void)seq;
    return 0;
  }
  /// The wait of `token` is over: the fence reached it or the queue halted (`ended_by_card`), or
  /// the host gave up (a timeout, Ctrl-C). On a host-paced simulator, returns once the card holds
  /// still at the interrupt that ended it (at once when the host gave up).
  virtual void wait_end(uint64_t token, bool ended_by_card) {
    (void)token;
    (void)ended_by_card;
  }
  /// A host thread looked at a fence without waiting and found work unfinished (a poll). A
  /// host-paced simulator that sees polls while no thread waits lets its time run free after a
  /// while, rather than stall a host that polls forever.
  virtual void note_poll(uint32_t dev) { (void)dev; }
};

/// Opens a transport of one kind; kNotAvailable with the reason when it cannot be used here.
using TransportOpener = Status (*)(std::unique_ptr<Transport>* out);

/// Makes `kind` openable by open_transport (replacing an earlier opener of that kind). A program
/// that links a transport of its own calls this before the driver's first use.
void register_transport(const std::string& kind, TransportOpener open);

/// Opens a transport by kind: "inproc" (default; registered by the program), "socket" or "vfio".
/// kNotAvailable with a reason when the kind cannot be used on this host or is not linked in.
Status open_transport(const std::string& kind, std::unique_ptr<Transport>* out);

}  // namespace spyre::driver
