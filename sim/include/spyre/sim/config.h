// The hardware and simulation parameters of a run: one typed tree, defaults equal to the public
// Spyre figures (see docs/architect-guide.md), loaded from one JSON file. The figures a card also
// reports to the compiler take their defaults from hw::CardFigures, their one home.
#pragma once

#include <cstdint>
#include <string>

#include "spyre/hw/figures.h"

namespace spyre::sim {

/// The public Spyre figures (hw/figures.h): the defaults of the keys a card reports.
inline constexpr hw::CardFigures kPublicCard{};

struct ChipConfig {
  uint32_t cores = kPublicCard.cores;
  uint32_t corelets_per_core = kPublicCard.corelets;
  uint32_t clock_mhz = kPublicCard.clock_mhz;  // inferred from the 98.3 TFLOPS fp16 peak
  uint64_t lx_bytes = kPublicCard.lx_bytes;    // scratchpad per core
  uint32_t pt_rows = kPublicCard.pt_rows;      // PT systolic array per corelet
  uint32_t pt_cols = kPublicCard.pt_cols;
  uint32_t pt_simd = kPublicCard.pt_simd;    // fp16 FMA lanes per PE
  double fp32_rate = kPublicCard.fp32_rate;  // fp32 matmul throughput relative to fp16
  uint32_t pt_fill_cycles = 24;              // operands skewed into the array at the start of a matmul instruction
  uint32_t pt_drain_cycles = 8;              // the last output tile's accumulators leaving the array
  uint32_t pt_tile_cycles = 0;               // extra cycles per output tile (0: double-buffered accumulators)
  uint32_t pt_queue_depth = 2;  // MATMULs the PT arrays hold (running or queued) while the core issues on; 0: none
  uint32_t lx_read_bytes_per_cycle = kPublicCard.lx_read_bytes_per_cycle;  // scratchpad port feeding the PT arrays
  uint32_t sfp_lanes = kPublicCard.sfp_lanes;  // SFP 16-bit elements per cycle per core (wider types: fewer)
  uint32_t sfp_fill_cycles = 8;
  uint32_t sfp_transcendental_cycles = 4;  // cycles per lane-group of exp, log, tanh, divide, ...
  uint32_t sfp_reduce_cycles = 1;          // cycles per lane-group of a reduction or scan
  uint32_t sfp_convert_cycles = 1;         // cycles per lane-group of a type conversion
  uint32_t issue_cycles = 2;               // fixed cost of decoding one instruction
  uint32_t scalar_cycles = 1;              // a scalar-register or branch instruction
  uint32_t barrier_cycles = 32;            // from the last core's arrival to every core's release
  uint32_t dma_channels = 4;               // copies the DMA engine runs at once (queues share them)
  std::string fp16_format = "dlfloat16";   // fp16 data in device memory: "dlfloat16" (silicon) or "ieee"
};

struct RingConfig {
  uint32_t bytes_per_cycle = kPublicCard.ring_bytes_per_cycle;  // per link and direction
  uint32_t hop_cycles = 1;                                      // latency of one link
};

struct MemoryConfig {
  uint64_t size_bytes = 128ull << 30;
  uint64_t usable_bytes = 112ull << 30;  // the rest holds ECC
  uint32_t channels = 16;
  uint32_t controllers =
      kPublicCard.memory_controllers;  // ring stops serving the channels (c: controller c % controllers)
  uint64_t interleave_bytes = 256;     // granules of this size go round the channels
  std::string channel_hash = "xor";    // "xor": granule index hashed (power-of-two strides spread); "modulo"
  double bandwidth_gbps = kPublicCard.memory_mbps / 1000.0;  // aggregate over all channels
  uint32_t latency_ns = 120;
};

struct PcieConfig {
  double bandwidth_gbps = 64.0;         // per direction, Gen5 x16
  uint32_t latency_ns = 600;            // one DMA round trip to host memory
  uint32_t max_payload_bytes = 256;     // data per transaction-layer packet
  uint32_t packet_overhead_bytes = 24;  // header, sequence number, CRC and framing per packet
};

/// The server the cards sit in: each card's PCIe link (pcie.*) goes to one port of a PCIe switch,
/// whose upstream port goes to the host. Host traffic crosses the card's link and the upstream
/// port; peer-to-peer DMA crosses the sender's link, the switch and the receiver's link.
struct ServerConfig {
  double switch_gbps = 512.0;        // the switch's crossbar, aggregate over its ports, per direction
  uint32_t switch_latency_ns = 150;  // one way, card to card through the switch
  double host_port_gbps = 0;         // the upstream port to the host, per direction; 0: pcie.bandwidth_gbps
};

/// Energy per unit of work, for the estimate in the stats (all assumptions: see the architect guide).
struct EnergyConfig {
  double pt_pj_per_flop = 0.3;
  double sfp_pj_per_element = 1.0;
  double memory_pj_per_byte = 40.0;  // LPDDR5, about 5 pJ/bit
  double ring_pj_per_byte_hop = 0.5;
  double pcie_pj_per_byte = 40.0;  // about 5 pJ/bit
  double static_watts = 20.0;
};

struct FirmwareConfig {
  uint32_t queues = 16;
  uint32_t command_cycles = 300;  // control-processor work per descriptor
  // A core still running this many cycles after its launch started is stopped (kWatchdog, with
  // its core and pc); 0 turns the watchdog off. 15 G cycles = 10 s at 1.5 GHz: a memory-bound
  // kernel over tens of GB (an amax over a large unfolded view) runs for most of a second.
  uint64_t watchdog_cycles = 15'000'000'000;
};

/// Faults to inject, to test what a host does with them. All off by default; each hits the card
/// `card` only. Also settable from $SPYRE_FAULTS (a JSON object of these keys).
struct FaultsConfig {
  uint32_t card = 0;
  uint64_t dma_error_copy = 0;  // the card's n-th COPY (from 1) fails with a DMA transfer error; 0: none
  uint64_t ecc_addr = 0;        // reads of [ecc_addr, ecc_addr + ecc_bytes) hit an uncorrectable ECC error
  uint64_t ecc_bytes = 0;       // 0: no ECC fault
  int32_t hang_core = -1;       // this core hangs in its hang_launch-th program (from 1); -1: none
  uint64_t hang_launch = 1;
  uint64_t link_down_cycle = 0;  // the PCIe link goes down for good when the card's clock reaches this; 0: never
};

struct SimConfig {
  uint32_t devices = 1;              // cards in this process
  uint64_t host_quantum_ns = 10000;  // simulated time between looks at host requests
  bool async_compute = true;         // tile arithmetic on a worker thread beside SystemC (same results)
  std::string mode = "timed";        // "functional": results, no timing; "timing": timing, no arithmetic
  bool host_paced = true;            // time advances only while the host waits: host speed cannot change it
  uint64_t host_memory_bytes = 0;    // host memory a card's written pages may take; 0 = while the host has it
};

struct OutputConfig {
  std::string trace_path;          // Chrome/Perfetto JSON trace; empty = none
  std::string stats_path;          // JSON stats; empty = none
  std::string capture_path;        // capture of the run for replay (spyre/sim/capture.h); empty = none
  bool trace_instructions = true;  // false: commands only
  uint64_t max_trace_events = 2000000;
};

struct Config {
  SimConfig sim;
  ChipConfig chip;
  RingConfig ring;
  MemoryConfig memory;
  PcieConfig pcie;
  ServerConfig server;
  FirmwareConfig firmware;
  EnergyConfig energy;
  FaultsConfig faults;
  OutputConfig output;

  /// The config as canonical JSON text (sorted keys), as written into stats and traces.
  std::string to_json() const;
  /// The same config with the report paths cleared: what was simulated, as traces and stats
  /// record it (so that a trace does not depend on where it was written).
  Config without_paths() const;  // and without the keys that change no result (sim.async_compute)
  /// FNV-1a 64 of without_paths().to_json(), printed as 16 hex digits.
  std::string hash() const;
};

/// Parses a JSON document that overrides any subset of the defaults.
/// Throws std::invalid_argument naming the key on an unknown key, a wrong type or a bad value.
Config parse_config(const std::string& json_text);

/// Throws std::invalid_argument when `json_text` is not valid JSON or an object in it names a key
/// twice (JSON parsers keep the last silently; a config must say each figure once).
void check_config_text(const std::string& json_text);

/// A config from its source: defaults, then the JSON `text` of the config file `origin` (no origin
/// and no text: no file), then the faults.* keys of the JSON object `faults` (empty: none).
/// Throws std::invalid_argument on errors. Output paths stay empty.
Config load_config(const std::string& text, const std::string& faults, const std::string& origin);

/// Loads the run's config: defaults, then the file named by $SPYRE_CONFIG (if set), then the
/// faults of $SPYRE_FAULTS, then $SPYRE_TRACE / $SPYRE_STATS / $SPYRE_CAPTURE for the output paths. Throws
/// std::invalid_argument on errors.
Config load_config_from_env();

}  // namespace spyre::sim
