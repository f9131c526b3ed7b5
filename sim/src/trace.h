// Trace and stats of a simulation run. The trace is Chrome JSON (opens in ui.perfetto.dev and
// chrome://tracing): one process per card, one track per queue, the DMA engine and each core.
// Both files carry the config and its hash.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "spyre/sim/config.h"

namespace spyre::sim {

class Trace {
 public:
  explicit Trace(const Config& config) : config_(config) {}

  /// Returns the id of the track `name` on card `card`, creating it on first use.
  uint32_t track(uint32_t card, const std::string& name);

  /// Records a complete slice [start, end) in cycles. `args` are small numeric annotations;
  /// `op`, when not empty, names the host operation that caused the slice (args.op).
  void slice(uint32_t track, const std::string& name, uint64_t start, uint64_t end,
             std::initializer_list<std::pair<const char*, uint64_t>> args = {}, const std::string& op = {});

  /// Records one end of flow `id` at `at` cycles on `track` (Chrome's flow events: Perfetto draws
  /// an arrow from the slice enclosing the start to the slice enclosing the end).
  void flow(uint32_t track, uint64_t at, uint64_t id, bool start);

  bool instructions() const { return config_.output.trace_instructions; }
  uint64_t dropped() const { return dropped_; }

  /// Writes the trace to `path`. Throws std::runtime_error when the file cannot be written.
  void write(const std::string& path) const;

 private:
  enum class Kind : uint8_t { kSlice, kFlowStart, kFlowEnd };
  static constexpr uint32_t kMaxArgs = 7;
  struct Event {
    uint32_t track;
    uint32_t name;
    uint64_t start;
    uint64_t dur;  // a flow's id
    Kind kind;
    uint32_t nargs;
    std::pair<uint32_t, uint64_t> args[kMaxArgs];  // an instruction's operands take the most
    uint32_t op;                                   // interned string + 1, or 0 for none
  };
  struct Track {
    uint32_t card;
    std::string name;
  };
  uint32_t intern(const std::string& s);

  const Config& config_;
  std::vector<Track> tracks_;
  std::map<std::pair<uint32_t, std::string>, uint32_t> track_ids_;
  std::vector<std::string> strings_;
  std::unordered_map<std::string, uint32_t> string_ids_;
  std::vector<Event> events_;
  uint64_t dropped_ = 0;
};

/// Where a core's time goes while it runs a program. Idle (no program) is the rest of the run.
enum class Stall : uint8_t {
  kCompute,  // PT and SFP instructions at work
  kMemory,   // waiting for data: program fetch, synchronous loads and stores, WAIT on DMA tags
  kRing,     // the same waits, when a ring link rather than the memory channels set the data's arrival
  kSync,     // waiting at a BARRIER for the other cores of the launch
  kIssue,    // decoding instructions; scalar and branch instructions
  kCount
};
inline constexpr const char* kStallNames[] = {"compute", "memory", "ring", "sync", "issue"};

/// Counters of one core.
struct CoreStats {
  uint64_t programs = 0;
  uint64_t instructions = 0;
  uint64_t busy_cycles = 0;  // from program start to end: the sum of `stall`
  uint64_t stall[static_cast<int>(Stall::kCount)] = {};
  uint64_t flops = 0;         // PT array
  uint64_t sfp_elements = 0;  // elements through the SFP
  uint64_t bytes_loaded = 0;
  uint64_t bytes_stored = 0;
};

/// One launch as the stats report it: the sums over its cores while it ran.
struct LaunchStats {
  std::string name;  // the program's
  std::string op;    // the host operation that queued it, when labelled
  uint32_t queue = 0;
  uint32_t cores = 0;
  uint64_t start = 0, end = 0;  // cycles
  uint64_t stall[static_cast<int>(Stall::kCount)] = {};
  uint64_t flops = 0;
  uint64_t bytes_loaded = 0;
  uint64_t bytes_stored = 0;
};

/// Bytes and busy time of one bandwidth server (a memory channel, a ring link, a PCIe direction).
struct ServerStats {
  uint64_t bytes = 0;
  uint64_t busy_ps = 0;
};

/// Counters of one card.
struct CardStats {
  std::map<std::string, uint64_t> commands;  // by opcode name
  uint64_t command_errors = 0;
  uint64_t h2d_bytes = 0;
  uint64_t d2h_bytes = 0;
  uint64_t d2d_bytes = 0;
  uint64_t msix = 0;
  std::vector<CoreStats> cores;
  std::vector<LaunchStats> launches;  // at most kMaxLaunches; later ones are only counted
  uint64_t launches_dropped = 0;
  static constexpr size_t kMaxLaunches = 100000;
  // Filled from the fabric and the endpoint when the stats are written.
  std::vector<ServerStats> channels;
  struct LinkStats {
    uint32_t from, to;
    bool clockwise;
    ServerStats s;
  };
  std::vector<LinkStats> links;
  uint64_t ring_byte_hops = 0;
  ServerStats pcie_up, pcie_down;  // card to host, host to card (wire bytes, headers included)
};

/// The server's shared PCIe: the switch's crossbar and its upstream port to the host.
struct SwitchStats {
  ServerStats crossbar, host_up, host_down;
};

/// The stats of all cards as the stats file holds them, but for each card's per-launch records.
nlohmann::json stats_document(const Config& config, const std::vector<const CardStats*>& cards,
                              const std::vector<uint64_t>& card_cycles, const SwitchStats& server,
                              uint64_t trace_dropped);
/// Writes `document` (from stats_document) to `path` with each card's launches. Throws
/// std::runtime_error on I/O errors.
void write_stats(const std::string& path, nlohmann::json document, const std::vector<const CardStats*>& cards);

}  // namespace spyre::sim
