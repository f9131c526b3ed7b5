// Every instruction's time on a core, in one place: the cycles an instruction occupies its unit
// after its issue, from the chip's figures (docs/architect-guide.md, "The timing model"). No
// SystemC: the formulas are plain functions, unit-tested against hand calculations
// (sim/tests/test_latency.cpp). Transfers are timed by the fabric (fabric.h), not here.
#pragma once

#include <cstdint>

#include "spyre/hw/isa.h"
#include "spyre/sim/config.h"

namespace spyre::sim::latency {

/// MATMUL of m x k x n in type t on the PT arrays: output-stationary tiles of pt_rows x (pt_cols x
/// corelets) elements, K streamed through pt_simd lanes (fp32 at fp32_rate), the slower of that and
/// the scratchpad port feeding each tile its A and B blocks, plus per-tile, fill and drain cycles.
uint64_t matmul(const ChipConfig& c, uint32_t m, uint32_t k, uint32_t n, hw::DType t);

/// `elements` elements through the SFP: sfp_lanes 16-bit lanes (wider types fill fewer), each
/// group of lanes taking `per_group` cycles, plus sfp_fill_cycles.
uint64_t sfp_elements(const ChipConfig& c, uint64_t elements, hw::DType width, uint32_t per_group);

/// SORT of `rows` rows of `cols`: a bitonic network over each row padded to a power of two, one
/// SFP pass per compare-exchange stage.
uint64_t sort_network(const ChipConfig& c, uint64_t rows, uint64_t cols, hw::DType t);

/// An SFP instruction (CONVERT .. SORT) over a rows x cols block, already validated by the core:
/// its class's cycles per lane group (convert, transcendental, reduce and scan, or 1), over the
/// wider of its types.
uint64_t sfp(const ChipConfig& c, const hw::Instr& in, uint64_t rows, uint64_t cols);

/// The SFP's slow class (exp .. cos; divide, pow, atan2, remainder, fmod, floor-divide): these take
/// sfp_transcendental_cycles per lane group. They are also the float-only functions.
bool unary_is_transcendental(hw::UnaryFn f);
bool binary_is_transcendental(hw::BinaryFn f);

}  // namespace spyre::sim::latency
