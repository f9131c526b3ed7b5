// The figures a card reports about itself in its capability registers (spyre/hw/regs.h): what a
// compiler needs to plan tile sizes and work division for this card rather than for a default one.
// The driver reads them once when it opens the card; the compiler's Target is built from them.
#pragma once

#include <algorithm>
#include <cstdint>

namespace spyre::hw {

struct CardFigures {
  uint32_t cores = 32;
  uint64_t lx_bytes = 2u << 20;  // scratchpad per core
  uint32_t clock_mhz = 1500;
  uint32_t corelets = 2;  // PT arrays per core
  uint32_t pt_rows = 8, pt_cols = 8;
  uint32_t pt_simd = 8;                    // fp16 multiply-add lanes per PE
  double fp32_rate = 0.25;                 // fp32 PT throughput relative to fp16
  uint32_t lx_read_bytes_per_cycle = 512;  // scratchpad port feeding the PT arrays, per core
  uint32_t sfp_lanes = 64;                 // SFP 16-bit elements per cycle per core
  uint32_t ring_bytes_per_cycle = 128;     // per link and direction
  uint32_t memory_controllers = 4;
  uint64_t memory_mbps = 204800;  // device memory bandwidth, 10^6 bytes per second

  /// fp16 multiply-adds per cycle of one core (every corelet's array).
  double pt_macs_per_cycle() const { return static_cast<double>(corelets) * pt_rows * pt_cols * pt_simd; }
  /// Device memory bandwidth in bytes per core cycle.
  double memory_bytes_per_cycle() const { return static_cast<double>(memory_mbps) / clock_mhz; }
  /// The most bytes per cycle the ring can carry from the memory controllers into the cores: each
  /// controller puts bytes on its two outgoing links, and bytes bound for cores spread evenly
  /// round a bidirectional ring cross a quarter of it on average (8 links' worth of capacity).
  double ring_load_bytes_per_cycle() const {
    return static_cast<double>(ring_bytes_per_cycle) * std::min<uint32_t>(2 * memory_controllers, 8);
  }
  /// What loads from device memory into the cores can sustain: the slower of memory and ring.
  double load_bytes_per_cycle() const { return std::min(memory_bytes_per_cycle(), ring_load_bytes_per_cycle()); }
};

}  // namespace spyre::hw
