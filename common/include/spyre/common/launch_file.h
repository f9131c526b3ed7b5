// One launch, captured to a file: the program, its arguments, and the device memory around them
// before and after it ran (torch_spyre.debug.capture_launch writes it; `spyre-sim launch` replays
// it alone, on any config, and checks that the memory it leaves is the captured output, bit for
// bit). docs/debugging-guide.md, "One launch, captured and replayed".
//
// Layout: the 8 bytes "SPYRELF1", a little-endian u64 header length, the header (JSON), then the
// program's bytes, each block's input bytes and each block's output bytes, in block order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spyre::launchfile {

/// A launch argument: a plain value, or an address inside one of the captured blocks (a replay
/// moves it with the block).
struct Arg {
  bool in_block = false;
  uint64_t value = 0;   // !in_block
  uint32_t block = 0;   // in_block
  uint64_t offset = 0;  // in_block: bytes from the block's start
};

/// A range of device memory the launch's arguments point into (a whole allocation of the driver),
/// as it was before the launch and after it.
struct Block {
  uint64_t addr = 0;
  uint64_t size = 0;
  std::vector<uint8_t> input, output;
};

struct LaunchFile {
  std::string kernel;  // the program's name
  std::string op;      // the host op that launched it ("aten::index_select"), or empty
  uint64_t core_mask = 0;
  bool fp16_dlfloat = false;  // the card's fp16 format: a replay needs the same numerics
  std::vector<uint8_t> program;
  std::vector<Arg> args;
  std::vector<Block> blocks;

  /// Writes the file; std::runtime_error naming the path when it cannot.
  void save(const std::string& path) const;
  /// Reads one; std::runtime_error naming the path and what is wrong with it.
  static LaunchFile load(const std::string& path);
};

}  // namespace spyre::launchfile
