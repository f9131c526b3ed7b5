// KTIR in: IBM's Kernel Tile IR (MLIR text in the `ktdp` dialect with arith, math, linalg,
// tensor and scf) compiled into a tile-ISA program for the card. Each compute tile of the
// kernel's grid is one core; each core's instruction stream is that tile's KTIR with its tile id,
// loop counters and addresses resolved (loops unrolled), its tensors in the scratchpad, its loads
// and stores as DMA and its arithmetic as the SFP and PT instructions the rest of the compiler
// emits. docs/ktir.md lists the subset and how each construct lowers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "spyre/compiler/program.h"

namespace spyre::compiler::ktir {

/// A pointer argument of the kernel's function (`%a: index`): the base of a device tensor, in
/// elements of whichever view is built on it (KTIR's base-pointer convention).
struct Argument {
  std::string name;                   // "%a"
  hw::DType dtype = hw::DType::kF32;  // the element type of the first view built on it
  uint64_t bytes = 0;                 // the most bytes past the base that any view on it reaches
};

/// What the kernel does, counted as it is lowered (every core): for a roofline estimate.
struct Work {
  uint64_t load_bytes = 0, store_bytes = 0;  // device memory traffic
  uint64_t macs = 0;                         // PT multiply-adds
  uint64_t fp32_macs = 0;                    // of which with fp32 operands (a quarter rate)
  uint64_t sfp_elements = 0;                 // SFP element operations
};

struct Kernel {
  Program program;  // launch arguments: one per Argument, then the workspace (if any)
  std::string function;
  std::vector<int64_t> grid;
  std::vector<Argument> arguments;
  uint64_t workspace_bytes = 0;  // device memory for tile-to-tile transfers (inter_tile_*)
  Work work;
  /// The fewest cycles the kernel could take on `target`: the largest of its memory traffic over
  /// the load bandwidth, its multiply-adds over the PT arrays of the cores it uses, and its SFP
  /// work over their SFP lanes.
  double roofline_cycles = 0;
  /// Per core: the KTIR source line each instruction came from (the listing's grouping).
  std::vector<std::vector<int>> source_lines;
};

/// Compiles function `function` of KTIR text `text` (the only one, or the first with a `grid`,
/// when empty) for `target`. Throws Unsupported naming the construct the lowering does not take
/// (an op, an attribute, a data-dependent address) and Malformed naming the line of text that is
/// wrong in itself (a view past its bounds, shapes that disagree, an unknown value).
Kernel compile(std::string_view text, const Target& target, const std::string& function = "");

/// The kernel's program as text: each core's instructions under the KTIR line they came from.
std::string listing(const Kernel& kernel, std::string_view text);

}  // namespace spyre::compiler::ktir
