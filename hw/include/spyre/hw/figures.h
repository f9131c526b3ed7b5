// The figures a card reports about itself in its capability registers (spyre/hw/regs.h): what a
// compiler needs to plan tile sizes and work division for this card rather than for a default one.
// The driver reads them once when it opens the card; the compiler's Target is built from them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace spyre::hw {

/// The ring's stops: stop 0 is the PCIe endpoint, then the cores in order, controller j after
/// core (j + 1) * cores / controllers - 1, so the controllers sit evenly between the cores (with
/// more controllers than cores, several follow one core).
struct RingStops {
  std::vector<uint32_t> cores, controllers;  // the stop of each core and of each controller
  uint32_t count = 1;                        // stops in all
};
inline RingStops ring_stops(uint32_t cores, uint32_t controllers) {
  RingStops r;
  for (uint32_t c = 0; c < cores; ++c) {
    r.cores.push_back(r.count++);
    while (r.controllers.size() < controllers && (uint64_t{r.controllers.size()} + 1) * cores / controllers <= c + 1) {
      r.controllers.push_back(r.count++);
    }
  }
  return r;
}

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
  /// Each ring link direction's share of uniform traffic between the memory controllers and the
  /// cores (every controller sending every core, or receiving from it, an equal part), over the
  /// stops of ring_stops(); each transfer takes the shorter way, clockwise on a tie. Loads
  /// (controller to core) and stores (core to controller) cross different links.
  struct LinkShare {
    double load = 0, store = 0;
  };
  std::vector<LinkShare> ring_link_shares() const {
    const RingStops ring = ring_stops(cores, memory_controllers);
    const uint32_t stops = ring.count;
    // Links 0 .. stops-1 run clockwise (stop i to i + 1), links stops .. 2 stops-1 back.
    std::vector<LinkShare> links(size_t{2} * stops);
    const double part = 1.0 / static_cast<double>(std::max<size_t>(ring.cores.size() * ring.controllers.size(), 1));
    const auto route = [&](uint32_t from, uint32_t to, double LinkShare::*kind) {
      const uint32_t ahead = (to + stops - from) % stops;
      if (ahead <= stops - ahead) {
        for (uint32_t h = 0; h < ahead; ++h) links[(from + h) % stops].*kind += part;
      } else {
        for (uint32_t h = 0; h < stops - ahead; ++h) links[stops + (from + stops - 1 - h) % stops].*kind += part;
      }
    };
    for (const uint32_t m : ring.controllers) {
      for (const uint32_t c : ring.cores) {
        route(m, c, &LinkShare::load);
        route(c, m, &LinkShare::store);
      }
    }
    return links;
  }
  /// The most bytes per cycle the ring carries from the memory controllers into the cores, every
  /// controller serving every core alike: the busiest link direction's share sets it.
  double ring_load_bytes_per_cycle() const {
    double busiest = 0;
    for (const LinkShare& l : ring_link_shares()) busiest = std::max(busiest, l.load);
    return busiest > 0 ? static_cast<double>(ring_bytes_per_cycle) / busiest
                       : static_cast<double>(ring_bytes_per_cycle);
  }
  /// What loads from device memory into the cores can sustain: the slower of memory and ring.
  double load_bytes_per_cycle() const { return std::min(memory_bytes_per_cycle(), ring_load_bytes_per_cycle()); }
};

}  // namespace spyre::hw
