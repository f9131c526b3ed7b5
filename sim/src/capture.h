// The simulator's side of capture and replay (spyre/sim/capture.h): a writer that streams events
// to the capture file, a HostLink that records what passes through it, and the replay host that
// stands in for the host software, re-enacting its writes and serving the cards' DMA reads.
// Everything here runs on the simulator thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "index_tape.h"
#include "spyre/sim/capture.h"
#include "spyre/sim/simulator.h"

namespace spyre::sim {

class CaptureWriter {
 public:
  /// Creates `path` and writes the header. Throws std::runtime_error when it cannot.
  CaptureWriter(const std::string& path, const std::string& config_json);
  ~CaptureWriter();
  /// Appends `e` (and for a DMA read, its `e.size` bytes at `bytes`). Throws on an I/O error.
  void write(const CaptureEvent& e, const void* bytes = nullptr);
  void flush();

 private:
  std::string path_;
  FILE* f_;
};

/// Records the DMA and interrupts of one card while passing them on to the real link.
class RecordingLink final : public HostLink {
 public:
  RecordingLink(uint32_t card, HostLink* inner, CaptureWriter& writer) : card_(card), inner_(inner), writer_(writer) {}
  bool dma_read(uint64_t iova, void* dst, uint64_t n) override;
  bool dma_write(uint64_t iova, const void* src, uint64_t n) override;
  bool peer_window(uint64_t iova, uint64_t n, uint32_t* card, uint64_t* addr) override;
  void raise_irq(uint32_t vector) override;

 private:
  CaptureEvent event(CaptureEvent::Kind kind) const;  // of this card, now

  uint32_t card_;
  HostLink* inner_;
  CaptureWriter& writer_;
};

/// Records the indices of one card's GATHERs and SCATTERs.
class RecordingTape final : public IndexTape {
 public:
  RecordingTape(uint32_t card, CaptureWriter& writer) : card_(card), writer_(writer) {}
  void record(uint32_t core, const uint8_t* indices, uint64_t n) override;
  bool play(uint32_t /*core*/, uint8_t* /*indices*/, uint64_t /*n*/) override { return false; }
  bool plays() const override { return false; }

 private:
  uint32_t card_;
  CaptureWriter& writer_;
};

/// Plays a capture: the host's writes at the times the capture gives, moved by as much as the
/// card's answer they followed moved (so that on another config the host still waits for what it
/// waited for), and the card's DMA reads served from the captured bytes.
class ReplayHost {
 public:
  /// `apply` performs one host write on the cards.
  ReplayHost(const Capture& capture, uint32_t cards, std::function<void(const CaptureEvent&)> apply);
  ~ReplayHost();
  HostLink* link(uint32_t card);
  /// The captured indices of `card`'s indirect instructions, for a replay in timing mode.
  IndexTape* tape(uint32_t card);

  /// Applies every host write due at `now_ps`. Returns the time of the next one, or UINT64_MAX
  /// when none is left or the next waits for an answer the cards have not given yet.
  uint64_t step(uint64_t now_ps);
  /// Every host write has been applied.
  bool done() const { return next_ >= actions_.size(); }
  ReplayResult& result() { return result_; }

 private:
  class Link;
  class Tape;
  struct Action {
    size_t event;    // index into the capture's events
    int64_t answer;  // the ordinal of the last card answer before it in the capture, or -1
  };
  void answered(uint32_t card, const CaptureEvent& e, uint64_t hash);
  const Capture& capture_;
  std::function<void(const CaptureEvent&)> apply_;
  std::vector<std::unique_ptr<Link>> links_;
  std::vector<std::unique_ptr<Tape>> tapes_;
  std::vector<Action> actions_;
  std::vector<uint64_t> answer_times_;    // capture: each answer's time
  std::vector<uint64_t> answer_hashes_;   // capture: each DMA write's hash (0 for an interrupt)
  std::vector<uint64_t> replayed_times_;  // replay: the answers so far
  /// Events in the order they are to be taken.
  class EventQueue {
   public:
    void push(size_t event) { events_.push_back(event); }
    bool empty() const { return next_ == events_.size(); }
    bool holds_none() const { return events_.empty(); }
    size_t take() { return events_[next_++]; }
    /// The event taken last (call only after a take()).
    size_t last() const { return events_[next_ - 1]; }

   private:
    std::vector<size_t> events_;
    size_t next_ = 0;
  };
  struct ReadKey {
    uint32_t card;
    uint64_t iova, size;
    bool operator==(const ReadKey& o) const { return card == o.card && iova == o.iova && size == o.size; }
  };
  struct ReadKeyHash {
    size_t operator()(const ReadKey& k) const {
      return std::hash<uint64_t>()(k.iova * 0x9e3779b97f4a7c15ull ^ k.size ^ (uint64_t{k.card} << 56));
    }
  };
  std::unordered_map<ReadKey, EventQueue, ReadKeyHash> reads_;  // the card's DMA reads, in capture order
  std::unordered_map<ReadKey, EventQueue, ReadKeyHash> peers_;  // its DMA to other cards' memory, likewise
  size_t next_ = 0;
  uint64_t last_applied_ = 0;
  ReplayResult result_;
};

}  // namespace spyre::sim
