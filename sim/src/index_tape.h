// The indices of the indirect instructions of a run, in order: how a capture lets a replay in
// timing mode (which computes no values) index as the captured run did.
#pragma once

#include <cstdint>

namespace spyre::sim {

/// The indices of a card's GATHERs and SCATTERs, in the order each core ran them: written into a
/// capture, and read back by a replay in timing mode, whose cores compute no values to index with.
class IndexTape {
 public:
  virtual ~IndexTape() = default;
  /// Core `core` ran an indirect instruction over these `n` bytes of int64 indices (a tape that
  /// plays ignores it).
  virtual void record(uint32_t core, const uint8_t* indices, uint64_t n) = 0;
  /// The next `n` bytes of indices core `core` ran with in the captured run; false when the tape
  /// has none (or records).
  virtual bool play(uint32_t core, uint8_t* indices, uint64_t n) = 0;
  /// True for a tape that plays: the cores of a replay in timing mode then need no values at all.
  virtual bool plays() const = 0;
};

}  // namespace spyre::sim
