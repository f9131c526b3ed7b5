// The card's data paths as timing: LPDDR5 channels behind memory controllers, and the
// bidirectional ring whose stops are the PCIe endpoint (with the DMA engine), the cores and the
// memory controllers. Every channel and every link direction is a bandwidth server. A transfer
// books, from one start time, the bytes it puts on each channel and on each link its bytes cross,
// and its last byte lands when the busiest of them has moved its share, plus the memory latency and
// the hops of its longest route. Nothing ticks per cycle.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "spyre/sim/config.h"
#include "timing.h"

namespace spyre::sim {

class Fabric {
 public:
  explicit Fabric(const Config& config);

  /// Ring stops (hw::ring_stops): 0 is the PCIe endpoint; cores and memory controllers follow
  /// around the ring, the controllers spread evenly between the cores.
  uint32_t stops() const { return stops_; }
  static constexpr uint32_t pcie_stop() { return 0; }
  uint32_t core_stop(uint32_t core) const { return core_stops_.at(core); }
  uint32_t controller_stop(uint32_t mc) const { return controller_stops_.at(mc); }
  /// The memory channel that holds device address `addr`: granules of memory.interleave_bytes go
  /// round the channels, in order ("modulo") or with the granule index hashed ("xor").
  uint32_t channel_of(uint64_t addr) const;
  /// The controller that serves channel `c`: consecutive channels go to different controllers.
  uint32_t controller_of(uint32_t c) const { return c % controllers_; }

  /// Books the rows moving between device memory and ring stop `stop` (towards the stop when
  /// `to_stop`), starting at `at_ps`. Returns the picosecond at which
  /// the last byte has arrived. In functional mode nothing is booked and the bytes arrive at once.
  /// `ring_bound`, when given, says whether a ring link (rather than a memory channel) was the
  /// busiest server of the transfer: the stall it causes is ring time.
  uint64_t transfer(uint64_t at_ps, uint32_t stop, bool to_stop, const Rows& rows, bool* ring_bound = nullptr);

  struct Link {
    uint32_t from, to;  // neighbouring stops
    bool clockwise;
    const BandwidthServer* server;
  };
  const std::vector<BandwidthServer>& channels() const { return channels_; }
  /// Both directions of every link; a link that never carried a byte is listed too.
  std::vector<Link> links() const;
  /// Byte-hops moved on the ring (a byte crossing three links counts three), for energy.
  uint64_t byte_hops() const { return byte_hops_; }

 private:
  /// Adds the bytes of [addr, addr + n) to each channel's count in `bytes_per_channel_`.
  void spread(uint64_t addr, uint64_t n);
  /// spread() of every row of `rows`.
  void spread(const Rows& rows);
  /// spread(Rows) of `count` rows of n bytes at granules g, g + step, ..., where `low` is g's bits
  /// below a bit that no row's index carries into: the pattern of `low` (counted once, then kept),
  /// permuted by the channel of g's bits above.
  void spread_pattern(uint64_t low, uint64_t g, uint64_t step, uint64_t count, uint64_t n);
  /// Adds to counts[c] the rows at granules g, g + step, ... (`rows` of them) on channel c; counts
  /// holds four sets of channels_.size(), the last three zero before and after.
  void count_channels(uint64_t g, uint64_t step, uint64_t rows, uint64_t* counts) const;
  /// The granule that holds `addr`, and the channel of granule `g` (channel_of's two halves).
  uint64_t granule(uint64_t addr) const { return shift_ >= 0 ? addr >> shift_ : addr / interleave_; }
  uint32_t channel_of_granule(uint64_t g) const;
  /// Adds `bytes` to every link from stop `from` to stop `to` by the shorter way; returns the hops.
  uint32_t route(uint32_t from, uint32_t to, uint64_t bytes);

  uint32_t stops_ = 0;
  std::vector<uint32_t> core_stops_, controller_stops_;
  uint64_t interleave_;
  uint32_t controllers_;
  bool hashed_;
  uint32_t channel_bits_ = 0;  // log2 of the channel count
  int32_t shift_ = -1;         // log2 of the interleave when it is a power of two
  // The XOR of the granule's channel_bits_-bit digits folds in halves (32, 16, ... bits) when the
  // channels are a power of two whose exponent divides 64: the same channel, in log steps.
  bool fold_halves_ = false;
  bool functional_;
  uint64_t memory_latency_ps_, hop_ps_;
  std::vector<BandwidthServer> channels_;
  std::vector<BandwidthServer> clockwise_, counter_;  // link i joins stop i and stop i + 1
  // Scratch of one transfer, kept to avoid allocating per transfer.
  std::vector<uint64_t> bytes_per_channel_, bytes_per_controller_;
  std::vector<uint32_t> controller_of_;  // controller_of(c), looked up rather than divided
  std::vector<uint64_t> row_counts_;     // rows per channel of strided rows, four interleaved sets
  // Rows per channel of strided rows by (low granule bits, granule step, rows): see spread(Rows).
  struct PatternKey {
    uint64_t low, step, rows;
    bool operator==(const PatternKey& o) const { return low == o.low && step == o.step && rows == o.rows; }
  };
  struct PatternHash {
    size_t operator()(const PatternKey& k) const {
      return std::hash<uint64_t>()(k.low * 0x9e3779b97f4a7c15ull ^ k.step * 0xc2b2ae3d27d4eb4full ^ k.rows);
    }
  };
  static constexpr uint64_t kPatternRows = 16;          // fewer rows are counted directly
  static constexpr uint64_t kPatternEntries = 1 << 20;  // patterns x channels kept at most
  bool linear_ = false;                                 // whether a granule's channel is XOR-linear in its index
  std::unordered_map<PatternKey, uint64_t, PatternHash> patterns_;  // offset into pattern_counts_
  std::vector<uint64_t> pattern_counts_;
  std::vector<uint64_t> clockwise_bytes_, counter_bytes_;
  std::vector<uint32_t> touched_cw_, touched_ccw_;
  uint64_t byte_hops_ = 0;
};

}  // namespace spyre::sim
