// The device sanitizer: an emulator-only debugging aid that checks every load and store of the
// cores against what the host told it with SANITIZE commands (hw/commands.h, SanitizeArgs):
// - memcheck: an access that starts in an allocation must end in it, and none may touch a freed one;
// - initcheck: a read may only see bytes written (by a core or a copy) since their allocation;
// - racecheck: two cores of one launch may not touch the same bytes, one of them writing, with no
//   BARRIER between (accumulating SCATTERs are atomic at the memory, so two of them do not race);
// - watchpoints (with or without checks): a core store into a watched range.
// Memory the host never named (programs, arguments, semaphores) is not checked. A finding stops
// the core as a fault would, with kSanitizerReport; the control processor copies the report into
// the queue's kQSan* registers. docs/hardware-interface.md, "The device sanitizer".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "spyre/hw/commands.h"
#include "timing.h"

namespace spyre::sim {

/// A queue's breakpoint (hw::SanitizeAction::kBreak): where to stop, where to dump the core.
struct Breakpoint {
  uint32_t rank = 0, pc = 0;
  uint64_t buffer = 0, size = 0;
};

/// A queue's print buffer (hw::SanitizeAction::kPrintBuffer), size 0 for none.
struct PrintBuffer {
  uint64_t base = 0, size = 0;
};

/// What the sanitizer found, as the queue's kQSan* registers carry it.
struct SanitizerReport {
  hw::SanitizeReport kind = hw::SanitizeReport::kNone;
  bool write = false;
  uint64_t addr = 0, bytes = 0;  // the offending row
  uint64_t tag = 0;              // the allocation concerned (0: none the host named)
  uint32_t other = 0;            // a race: the other core << 24 | its instruction
};

/// The accesses of one launch's cores since its last BARRIER, for racecheck: disjoint byte ranges,
/// each with the ranks that read, wrote or accumulated into it.
class RaceLog {
 public:
  enum class Kind : uint8_t { kRead, kWrite, kAccumulate };
  /// Records that rank `rank` (core `core`, at instruction `pc`) touched [lo, hi); false, with the
  /// other side of the race in `other` (core << 24 | instruction), when another rank did so too
  /// with no barrier between and one of them wrote (two accumulations do not race).
  bool touch(uint64_t lo, uint64_t hi, uint32_t rank, uint32_t core, uint32_t pc, Kind kind, uint32_t* other);
  /// A barrier released every core: what came before is ordered before what follows.
  void clear() { segs_.clear(); }

 private:
  struct Who {
    uint32_t core = 0, pc = 0, rank = 0;
  };
  struct Seg {
    uint64_t end;
    uint64_t readers = 0, writers = 0, accumulators = 0;  // ranks, one bit each
    Who last[3];                                          // the last access of each Kind
  };
  /// Makes `at` a segment boundary (if a segment spans it).
  void split(uint64_t at);
  std::map<uint64_t, Seg> segs_;
};

class Sanitizer {
 public:
  /// Which checks run on the launches of queue `queue` (hw::kSanitize* bits; 0: none). ENABLE
  /// sets them per queue, so that a client of a shared card that sanitizes does not reach the
  /// launches of another that does not.
  uint64_t checks(uint32_t queue) const {
    const auto it = checks_.find(queue);
    return it == checks_.end() ? 0 : it->second;
  }
  /// Whether a watchpoint is set: then every core store is looked at.
  bool watching() const { return !watches_.empty(); }
  /// Whether the host named any memory: writes are then tracked (also while the checks are off,
  /// so that initialisation is right when they are switched on again).
  bool tracks() const { return !regions_.empty(); }
  /// Applies a validated SANITIZE command of queue `queue`.
  void command(uint32_t queue, const hw::SanitizeArgs& a);
  /// Queue `queue` was reset (a new ring, perhaps another client's): its checks go off and its
  /// breakpoint is disarmed.
  void reset_queue(uint32_t queue);
  /// Where queue `queue`'s launches append their PRINT records (size 0: nowhere).
  PrintBuffer print_buffer(uint32_t queue) const {
    const auto it = prints_.find(queue);
    return it == prints_.end() ? PrintBuffer{} : it->second;
  }
  /// The breakpoint queue `queue` armed for its next launch, disarmed by taking it.
  std::optional<Breakpoint> take_break(uint32_t queue);
  /// [base, base + size) was scrubbed (given back, or a client's window handed to the next one):
  /// what the host said of it, allocations and watchpoints, is forgotten.
  void forget(uint64_t base, uint64_t size);
  /// Any writer of device memory (cores, DMA) wrote `rows`: initialised from now on.
  void written(const Rows& rows);
  /// Checks a core's access to `rows` before it moves a byte, under the launch's `checks` (and
  /// the watchpoints). `race` is the launch's log (nullptr: no racecheck). False, with `out`
  /// filled, when a check fails.
  bool check(const Rows& rows, RaceLog::Kind kind, uint64_t checks, uint32_t rank, uint32_t core, uint32_t pc,
             RaceLog* race, SanitizerReport* out);
  /// The report of the last finding of core `core`.
  const SanitizerReport& report(uint32_t core) const;
  void set_report(uint32_t core, const SanitizerReport& r);

 private:
  struct Region {
    uint64_t end;
    uint64_t tag;
    bool freed;
    std::vector<uint64_t> init;  // initcheck: bit i set when byte base + i was written (live regions)
  };
  /// Removes [base, end) from every region (trimming those that stick out).
  void carve(uint64_t base, uint64_t end);
  /// memcheck and initcheck of one row; false with `out` filled.
  bool check_row(uint64_t addr, uint64_t n, bool read, uint64_t checks, SanitizerReport* out) const;
  std::map<uint32_t, uint64_t> checks_;     // by queue
  std::map<uint32_t, PrintBuffer> prints_;  // by queue
  std::map<uint64_t, Region> regions_;      // by base, disjoint
  struct Watch {
    uint64_t end, tag;
  };
  std::map<uint64_t, Watch> watches_;      // by base
  std::map<uint32_t, Breakpoint> breaks_;  // by queue
  std::vector<SanitizerReport> reports_;
};

}  // namespace spyre::sim
