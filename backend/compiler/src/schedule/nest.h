// Work division: a loop nest of tiles whose iterations ("items") are split into one contiguous
// share per core. The emitted code is SPMD: every core runs the same instructions and derives its
// share and its starting addresses from its rank, so program size does not grow with the problem
// or with the core count.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "spyre/compiler/emit.h"

namespace spyre::compiler::schedule {

/// One operand of a nest: the argument slot of its buffer and its byte offset from it.
struct NestOperand {
  uint32_t arg = 0;
  int64_t offset_bytes = 0;
};

/// One loop level: its trip count and how far each operand's address moves per iteration.
struct Level {
  uint64_t count = 1;
  std::vector<int64_t> stride_bytes;  // one per operand
};

struct Nest {
  std::vector<NestOperand> operands;
  std::vector<Level> levels;  // outermost first
  // Levels whose last iteration runs a separate body variant (a partial tile): bit i of the body's
  // `tails` is set on the last iteration of tail_levels[i]. At most kMaxTailLevels.
  std::vector<uint32_t> tail_levels;
  uint32_t serial_levels = 0;  // the innermost levels that one core runs whole (an accumulation)
  // Every core runs every item, the body dividing each item between the cores by rank (and
  // keeping them in step with barriers): the launch then takes all of the target's cores. The
  // scratchpad halves do not alternate: r[kBufferReg] belongs to the body across items, and
  // `before` and `after` (if set) run once before the first item and after the last.
  bool replicated = false;
  std::function<void(emit::Builder&)> before, after;
  // Scratchpad: [0, fixed_bytes) keeps its contents across items (accumulators); after it, two
  // halves of half_bytes alternate between items, so a store may still drain from one half while
  // the next item fills the other.
  uint64_t fixed_bytes = 0;
  uint64_t half_bytes = 0;
};

inline constexpr uint32_t kMaxOperands = 4;
inline constexpr uint32_t kMaxLevels = 5;
inline constexpr uint32_t kMaxTailLevels = 3;

// Registers of a nest's body: r[operand_reg(i)] is operand i's device address for the current
// item; r[kBufferReg] the scratchpad address of the half that this item uses; r[level_reg(l)] the
// iteration of level l; r[kBodyReg] is free for the body. Other registers belong to the loop.
constexpr uint32_t operand_reg(uint32_t i) {
  return 1 + i;
}
constexpr uint32_t level_reg(uint32_t level) {
  return 9 + level;
}
inline constexpr uint32_t kBodyReg = 14;
inline constexpr uint32_t kBufferReg = 15;

/// Emits the body once per combination of tail levels at their last iteration (bit i: tail_levels[i]).
using Body = std::function<void(emit::Builder&, uint32_t tails)>;

/// Appends the nest to `b`, split over `cores` cores. After the last item every asynchronous
/// transfer has landed. Throws std::invalid_argument when the nest has too many operands or levels.
void emit_nest(emit::Builder& b, const Nest& nest, uint32_t cores, const Body& body);

/// Items in the nest (the product of its level counts).
uint64_t nest_items(const Nest& nest);
/// Shares the nest can be divided into (items / the serial levels' items).
uint64_t nest_units(const Nest& nest);

}  // namespace spyre::compiler::schedule
