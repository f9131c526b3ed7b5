// Shapes and strides shared by the lowerings: broadcasting a view to an iteration shape, and
// simplifying an iteration space (dropping unit dims, merging dims that every operand walks
// contiguously) so that a kernel sees as few, as long, dims as possible.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "spyre/compiler/ir.h"

namespace spyre::compiler::lower {

/// An iteration space: sizes, and for each operand its stride (in elements) along each dim.
struct Space {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides;  // [operand][dim]

  int64_t numel() const;
};

/// The strides of `v` broadcast to `shape` (right-aligned; broadcast dims get stride 0).
/// Throws std::invalid_argument when the sizes do not broadcast.
std::vector<int64_t> broadcast_strides(const ir::View& v, const std::vector<int64_t>& shape);

/// Drops unit dims and merges neighbours that are contiguous for every operand.
Space simplify(Space s);

/// The fp32 bits of `x`, for SFP immediates.
inline uint32_t f32_bits(double x) {
  const float f = static_cast<float>(x);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

/// Scratchpad bump allocator: 128-byte (one stick) aligned regions.
class LxPlan {
 public:
  uint32_t take(uint64_t bytes) {
    const uint64_t at = used_;
    used_ = (used_ + bytes + 127) / 128 * 128;
    return static_cast<uint32_t>(at);
  }
  uint64_t used() const { return used_; }

 private:
  uint64_t used_ = 0;
};

}  // namespace spyre::compiler::lower
