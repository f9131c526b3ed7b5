// The model's side of the wire. A Simulator runs the SystemC model of one or more Spyre cards in
// a thread of its own; the only ways in are PCI config space, BAR0 MMIO, and the HostLink through
// which a card reaches host memory (DMA, checked by the caller's IOMMU) and raises MSI-X.
// Used only by driver transports; nothing above the transport sees this header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "spyre/sim/capture.h"
#include "spyre/sim/config.h"

namespace spyre::sim {

/// Host memory and interrupts as one card sees them. Implemented by the transport; called from the
/// simulator thread.
class HostLink {
 public:
  virtual ~HostLink() = default;
  /// Copies `n` bytes at IOVA `iova` into `dst`. False when the range is not mapped for reading.
  virtual bool dma_read(uint64_t iova, void* dst, uint64_t n) = 0;
  /// Whether the link keeps what the card reads: bytes that stay unchanged for as long as the
  /// link lives (a replay's capture). The card's DMA engine then takes them with dma_kept instead
  /// of copying them, and device memory reads them where they are (DeviceMemory::write_kept).
  virtual bool keeps_bytes() const { return false; }
  /// When keeps_bytes(): dma_read without the copy, where the `n` bytes at `iova` are kept;
  /// nullptr when the range is not mapped for reading.
  virtual const uint8_t* dma_kept(uint64_t /*iova*/, uint64_t /*n*/) { return nullptr; }
  /// Copies `n` bytes from `src` to IOVA `iova`. False when the range is not mapped for writing.
  virtual bool dma_write(uint64_t iova, const void* src, uint64_t n) = 0;
  /// Delivers MSI-X vector `vector`.
  virtual void raise_irq(uint32_t vector) = 0;
  /// Whether [iova, iova + n) lies in a mapping of another card's memory window (peer-to-peer):
  /// then that card in `card` and the range's device address there in `addr`, and the card's DMA
  /// crosses the server's switch to it instead of calling dma_read or dma_write.
  virtual bool peer_window(uint64_t /*iova*/, uint64_t /*n*/, uint32_t* /*card*/, uint64_t* /*addr*/) { return false; }
};

/// Paths of the report files written by flush_reports(); empty when not configured.
struct Reports {
  std::string trace_path;
  std::string stats_path;
};

class Simulator {
 public:
  /// The process's simulator, elaborated on first use from the config given to configure(), or
  /// from load_config_from_env() when configure() was not called. SystemC allows one elaboration
  /// per process, so every card of the process lives here.
  /// Throws std::invalid_argument when the config is invalid.
  static Simulator& instance();

  /// Sets the config the process's simulator will be elaborated with, in place of the
  /// environment's ($SPYRE_CONFIG, $SPYRE_TRACE, $SPYRE_STATS), for tools that build their config
  /// themselves. Call it before anything opens a device; a later call replaces an earlier one.
  /// `config`: the whole config (defaults plus overrides), report paths included.
  /// Throws std::invalid_argument naming the key when a value is out of range, and
  /// std::logic_error when the simulator has already been elaborated (instance() was called).
  static void configure(const Config& config);

  virtual ~Simulator() = default;
  virtual const Config& config() const = 0;
  virtual uint32_t num_cards() const = 0;

  /// Connects card `card` to host memory and interrupts (nullptr detaches). Thread-safe.
  virtual void attach(uint32_t card, HostLink* link) = 0;

  /// PCI config space access (1, 2 or 4 bytes). Thread-safe; blocks until the model answered.
  virtual uint32_t cfg_read(uint32_t card, uint32_t offset, uint32_t size) = 0;
  virtual void cfg_write(uint32_t card, uint32_t offset, uint32_t size, uint32_t value) = 0;

  /// BAR0 access, 32 bits. Writes are posted (return at once, applied in order);
  /// reads block until the model answered. Thread-safe.
  virtual uint32_t mmio_read(uint32_t card, uint32_t offset) = 0;
  virtual void mmio_write(uint32_t card, uint32_t offset, uint32_t value) = 0;

  /// Simulator service, not part of the wire: a host thread will block until queue `queue` of
  /// card `card` completes `seq`. With `sim.host_paced`, simulated time advances only while some
  /// such wait is unfinished, and stops at the interrupt that finishes the last one. Returns a
  /// token for wait_end (0 when not host-paced). Thread-safe.
  virtual uint64_t wait_begin(uint32_t card, uint32_t queue, uint64_t seq) = 0;
  /// The host thread stopped waiting; with `sim.host_paced` and a wait the card ended
  /// (`ended_by_card`: its fence or a halt), returns once the card holds still at the interrupt
  /// that finished it (at most a second later, if none comes). Thread-safe.
  virtual void wait_end(uint64_t token, bool ended_by_card) = 0;
  /// A host thread polled a fence and found work unfinished. With `sim.host_paced`, polls while
  /// no thread waits let simulated time run free after 200 ms of wall time (a host that polls and
  /// never waits would otherwise stall); a host busy with its own work holds the card as long as it
  /// takes. Thread-safe.
  virtual void note_poll() = 0;

  /// Simulator service, not part of the wire: plays `capture` against the cards in place of any
  /// host (nothing else may be attached), until every host write has been applied and the cards
  /// are idle, and returns what happened. On the capturing config the cycles equal the capture's.
  /// Throws std::runtime_error when the simulator has stopped.
  virtual ReplayResult replay(const Capture& capture) = 0;

  /// Simulator service, not part of the wire: writes the trace and stats files configured in
  /// the config's "output" section and returns their paths. Thread-safe.
  virtual Reports flush_reports() = 0;
  /// Simulator service: the stats the stats file would hold, as JSON text, without its config and
  /// per-launch records, whatever the config's "output" says (no file is written). Thread-safe.
  virtual std::string stats_summary() = 0;

  /// Stops the simulator thread and writes the reports; called once at process exit.
  virtual void shutdown() = 0;
};

}  // namespace spyre::sim
