// Capture and replay of a run at the wire: everything the host did to the cards (BAR0 and config
// writes, with the simulated time each was applied at) and everything the cards took from host
// memory (the bytes of every DMA read: descriptors, programs, tensors), with the cards' answers
// (DMA writes, interrupts) as reference points. `$SPYRE_CAPTURE=file` records any run; a replay
// plays the file against cards of any config with no host software at all, and on the capturing
// config reproduces the run's cycles exactly. See docs/architect-guide.md, "Capture and replay".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace spyre::sim {

struct CaptureEvent {
  enum class Kind : uint8_t {
    kMmioWrite,  // host -> card: BAR0 `addr` = `value`
    kCfgWrite,   // host -> card: config space `addr` = `value` (`size` bytes)
    kDmaRead,    // card <- host: `size` bytes at IOVA `addr` (the bytes at `data` in Capture::bytes())
    kDmaWrite,   // card -> host: `size` bytes at IOVA `addr`, FNV-1a `hash` of them
    kIrq,        // card -> host: MSI-X vector `value`
    kEnd,        // the card's cycle counter when the run ended, in `value`
    kIndices,    // core `value` of the card ran a GATHER or SCATTER over these `size` bytes of int64
                 // indices (at `data`): what a replay in timing mode indexes with
    kPeer,       // the card's DMA of `size` bytes at IOVA `addr` went to card `value`'s memory, at
                 // device address `peer_addr` (peer-to-peer, across the server's switch)
  };
  Kind kind = Kind::kEnd;
  bool ok = true;  // DMA: whether the IOMMU let it through
  uint32_t card = 0;
  uint64_t time_ps = 0;  // simulated time at which it happened
  uint64_t addr = 0;
  uint64_t value = 0;
  uint64_t size = 0;
  uint64_t data = 0;       // kDmaRead, kIndices: offset of its bytes in Capture::bytes()
  uint64_t hash = 0;       // kDmaWrite
  uint64_t peer_addr = 0;  // kPeer (kept in the record's hash field)

  /// Events the host caused, which a replay re-enacts; the others are the cards' side.
  bool from_host() const { return kind == Kind::kMmioWrite || kind == Kind::kCfgWrite; }
  bool to_host() const { return kind == Kind::kDmaWrite || kind == Kind::kIrq; }
  /// Events whose `size` bytes follow their record in the file (and sit at `data` once loaded).
  bool has_bytes() const { return (kind == Kind::kDmaRead && ok) || kind == Kind::kIndices; }
};

struct Capture {
  std::string config_json;  // the capturing run's config (canonical JSON)
  std::vector<CaptureEvent> events;

  /// Reads a capture file. Throws std::runtime_error naming the file and what is wrong with it.
  /// The file is mapped, not copied: the events' bytes are read where they lie in it.
  static Capture load(const std::string& path);
  /// The bytes the events' `data` offsets index (the mapped file).
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(file_.get()); }
  /// The cards' cycle counters at the end of the capturing run (one per card).
  std::vector<uint64_t> end_cycles() const;

 private:
  std::shared_ptr<const void> file_;  // the mapping, unmapped with the last copy
};

/// FNV-1a 64 of `n` bytes: how DMA writes are compared between a capture and its replay.
uint64_t fnv1a(const void* p, uint64_t n, uint64_t h = 1469598103934665603ull);

struct ReplayResult {
  std::vector<uint64_t> cycles;  // each card's cycle counter at the end of the replay
  uint64_t host_actions = 0;     // BAR0 and config writes re-enacted
  uint64_t missing_reads = 0;    // DMA reads the capture had no bytes for (they failed as DMA faults)
  uint64_t diverged_writes = 0;  // DMA writes whose bytes differ from the capture's (same config: 0)
  uint64_t played_indices = 0;   // timing mode: indirect instructions that indexed with the capture's
  uint64_t missing_indices = 0;  // timing mode: indirect instructions the capture had no indices for
};

}  // namespace spyre::sim
