// `spyre-sim launch FILE`: one captured launch (spyre/common/launch_file.h) replayed alone on the
// card the config describes, through the driver, and its memory compared with the captured output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spyre/common/launch_file.h"
#include "spyre/driver/device.h"

namespace spyre::simtool {

/// Where to stop a replayed launch (a breakpoint): before core rank `rank` executes `instruction`.
struct Stop {
  uint32_t rank = 0;
  uint32_t instruction = 0;
};

struct LaunchReplay {
  std::string error;             // the launch's device error; empty when it ran
  uint64_t cycles = 0;           // its completion's end - start
  uint64_t bytes = 0;            // bytes of the captured blocks
  uint64_t differing_bytes = 0;  // of those, bytes that differ from the captured output
  uint32_t first_block = 0;      // where the first difference is
  uint64_t first_offset = 0;
  // With a Stop: the stopped core's 16 scalar registers and its whole scratchpad (the launch does
  // not go on, so nothing is compared).
  std::vector<uint64_t> registers;
  std::vector<uint8_t> scratchpad;
};

/// The instruction at which core rank `rank` of the launch's program ends (its first END from its
/// entry): where a dump of its final state stops it. Throws std::runtime_error for a malformed
/// program or rank.
uint32_t end_of(const launchfile::LaunchFile& f, uint32_t rank);

/// Loads the launch's blocks and program into fresh device memory of `dev` (its arguments moved
/// with them), runs it with `label` as its op, and compares the blocks with the captured output.
/// Throws std::runtime_error when the card's numerics differ from the capture's, or a driver call
/// fails.
/// With `stop`, the launch stops there instead and the core's registers and scratchpad are returned.
LaunchReplay replay_launch(driver::Device& dev, const launchfile::LaunchFile& f, std::optional<Stop> stop = {});

}  // namespace spyre::simtool
