// `spyre-sim launch FILE`: one captured launch (spyre/common/launch_file.h) replayed alone on the
// card the config describes, through the driver, and its memory compared with the captured output.
#pragma once

#include <cstdint>
#include <string>

#include "spyre/common/launch_file.h"
#include "spyre/driver/device.h"

namespace spyre::simtool {

struct LaunchReplay {
  std::string error;             // the launch's device error; empty when it ran
  uint64_t cycles = 0;           // its completion's end - start
  uint64_t bytes = 0;            // bytes of the captured blocks
  uint64_t differing_bytes = 0;  // of those, bytes that differ from the captured output
  uint32_t first_block = 0;      // where the first difference is
  uint64_t first_offset = 0;
};

/// Loads the launch's blocks and program into fresh device memory of `dev` (its arguments moved
/// with them), runs it with `label` as its op, and compares the blocks with the captured output.
/// Throws std::runtime_error when the card's numerics differ from the capture's, or a driver call
/// fails.
LaunchReplay replay_launch(driver::Device& dev, const launchfile::LaunchFile& f);

}  // namespace spyre::simtool
