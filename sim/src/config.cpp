#include "spyre/sim/config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace spyre::sim {
namespace {

using nlohmann::json;

json to_tree(const Config& c) {
  json j;
  j["sim"] = {{"devices", c.sim.devices},
              {"host_quantum_ns", c.sim.host_quantum_ns},
              {"async_compute", c.sim.async_compute},
              {"mode", c.sim.mode},
              {"host_paced", c.sim.host_paced},
              {"host_memory_bytes", c.sim.host_memory_bytes}};
  j["chip"] = {{"cores", c.chip.cores},
               {"corelets_per_core", c.chip.corelets_per_core},
               {"clock_mhz", c.chip.clock_mhz},
               {"lx_bytes", c.chip.lx_bytes},
               {"pt_rows", c.chip.pt_rows},
               {"pt_cols", c.chip.pt_cols},
               {"pt_simd", c.chip.pt_simd},
               {"fp32_rate", c.chip.fp32_rate},
               {"pt_fill_cycles", c.chip.pt_fill_cycles},
               {"pt_drain_cycles", c.chip.pt_drain_cycles},
               {"pt_tile_cycles", c.chip.pt_tile_cycles},
               {"lx_read_bytes_per_cycle", c.chip.lx_read_bytes_per_cycle},
               {"sfp_lanes", c.chip.sfp_lanes},
               {"sfp_fill_cycles", c.chip.sfp_fill_cycles},
               {"sfp_transcendental_cycles", c.chip.sfp_transcendental_cycles},
               {"sfp_reduce_cycles", c.chip.sfp_reduce_cycles},
               {"sfp_convert_cycles", c.chip.sfp_convert_cycles},
               {"issue_cycles", c.chip.issue_cycles},
               {"scalar_cycles", c.chip.scalar_cycles},
               {"barrier_cycles", c.chip.barrier_cycles},
               {"dma_channels", c.chip.dma_channels},
               {"fp16_format", c.chip.fp16_format}};
  j["ring"] = {{"bytes_per_cycle", c.ring.bytes_per_cycle}, {"hop_cycles", c.ring.hop_cycles}};
  j["memory"] = {{"size_bytes", c.memory.size_bytes},
                 {"usable_bytes", c.memory.usable_bytes},
                 {"channels", c.memory.channels},
                 {"controllers", c.memory.controllers},
                 {"interleave_bytes", c.memory.interleave_bytes},
                 {"channel_hash", c.memory.channel_hash},
                 {"bandwidth_gbps", c.memory.bandwidth_gbps},
                 {"latency_ns", c.memory.latency_ns}};
  j["pcie"] = {{"bandwidth_gbps", c.pcie.bandwidth_gbps},
               {"latency_ns", c.pcie.latency_ns},
               {"max_payload_bytes", c.pcie.max_payload_bytes},
               {"packet_overhead_bytes", c.pcie.packet_overhead_bytes}};
  j["firmware"] = {{"queues", c.firmware.queues},
                   {"command_cycles", c.firmware.command_cycles},
                   {"watchdog_cycles", c.firmware.watchdog_cycles}};
  j["energy"] = {
      {"pt_pj_per_flop", c.energy.pt_pj_per_flop},         {"sfp_pj_per_element", c.energy.sfp_pj_per_element},
      {"memory_pj_per_byte", c.energy.memory_pj_per_byte}, {"ring_pj_per_byte_hop", c.energy.ring_pj_per_byte_hop},
      {"pcie_pj_per_byte", c.energy.pcie_pj_per_byte},     {"static_watts", c.energy.static_watts}};
  j["faults"] = {{"card", c.faults.card},
                 {"dma_error_copy", c.faults.dma_error_copy},
                 {"ecc_addr", c.faults.ecc_addr},
                 {"ecc_bytes", c.faults.ecc_bytes},
                 {"hang_core", c.faults.hang_core},
                 {"hang_launch", c.faults.hang_launch},
                 {"link_down_cycle", c.faults.link_down_cycle}};
  j["output"] = {{"trace_path", c.output.trace_path},
                 {"stats_path", c.output.stats_path},
                 {"capture_path", c.output.capture_path},
                 {"trace_instructions", c.output.trace_instructions},
                 {"max_trace_events", c.output.max_trace_events}};
  return j;
}

// Every key of `over` must exist in `base` with a value of the same kind.
void check_keys(const json& over, const json& base, const std::string& path) {
  if (!over.is_object()) throw std::invalid_argument(fmt::format("config: '{}' must be an object", path));
  for (const auto& [key, value] : over.items()) {
    const std::string name = path.empty() ? key : path + "." + key;
    if (!base.contains(key)) throw std::invalid_argument(fmt::format("config: unknown key '{}'", name));
    const json& want = base.at(key);
    if (want.is_object()) {
      check_keys(value, want, name);
    } else if (want.is_number() != value.is_number() || want.is_string() != value.is_string() ||
               want.is_boolean() != value.is_boolean()) {
      throw std::invalid_argument(
          fmt::format("config: '{}' must be a {} (got {})", name, want.type_name(), value.dump()));
    } else if (want.is_number_unsigned() && value.is_number() && value.get<double>() < 0) {
      throw std::invalid_argument(fmt::format("config: '{}' must not be negative (got {})", name, value.dump()));
    }
  }
}

template <typename T>
void get(const json& j, const char* section, const char* key, T& out) {
  out = j.at(section).at(key).get<T>();
}

Config from_tree(const json& j) {
  Config c;
  get(j, "sim", "devices", c.sim.devices);
  get(j, "sim", "host_quantum_ns", c.sim.host_quantum_ns);
  get(j, "sim", "async_compute", c.sim.async_compute);
  get(j, "sim", "mode", c.sim.mode);
  get(j, "sim", "host_paced", c.sim.host_paced);
  get(j, "sim", "host_memory_bytes", c.sim.host_memory_bytes);
  get(j, "chip", "cores", c.chip.cores);
  get(j, "chip", "corelets_per_core", c.chip.corelets_per_core);
  get(j, "chip", "clock_mhz", c.chip.clock_mhz);
  get(j, "chip", "lx_bytes", c.chip.lx_bytes);
  get(j, "chip", "pt_rows", c.chip.pt_rows);
  get(j, "chip", "pt_cols", c.chip.pt_cols);
  get(j, "chip", "pt_simd", c.chip.pt_simd);
  get(j, "chip", "fp32_rate", c.chip.fp32_rate);
  get(j, "chip", "pt_fill_cycles", c.chip.pt_fill_cycles);
  get(j, "chip", "pt_drain_cycles", c.chip.pt_drain_cycles);
  get(j, "chip", "pt_tile_cycles", c.chip.pt_tile_cycles);
  get(j, "chip", "lx_read_bytes_per_cycle", c.chip.lx_read_bytes_per_cycle);
  get(j, "chip", "sfp_lanes", c.chip.sfp_lanes);
  get(j, "chip", "sfp_fill_cycles", c.chip.sfp_fill_cycles);
  get(j, "chip", "sfp_transcendental_cycles", c.chip.sfp_transcendental_cycles);
  get(j, "chip", "sfp_reduce_cycles", c.chip.sfp_reduce_cycles);
  get(j, "chip", "sfp_convert_cycles", c.chip.sfp_convert_cycles);
  get(j, "chip", "issue_cycles", c.chip.issue_cycles);
  get(j, "chip", "scalar_cycles", c.chip.scalar_cycles);
  get(j, "chip", "barrier_cycles", c.chip.barrier_cycles);
  get(j, "chip", "dma_channels", c.chip.dma_channels);
  get(j, "chip", "fp16_format", c.chip.fp16_format);
  get(j, "ring", "bytes_per_cycle", c.ring.bytes_per_cycle);
  get(j, "ring", "hop_cycles", c.ring.hop_cycles);
  get(j, "memory", "size_bytes", c.memory.size_bytes);
  get(j, "memory", "usable_bytes", c.memory.usable_bytes);
  get(j, "memory", "channels", c.memory.channels);
  get(j, "memory", "controllers", c.memory.controllers);
  get(j, "memory", "interleave_bytes", c.memory.interleave_bytes);
  get(j, "memory", "channel_hash", c.memory.channel_hash);
  get(j, "memory", "bandwidth_gbps", c.memory.bandwidth_gbps);
  get(j, "memory", "latency_ns", c.memory.latency_ns);
  get(j, "pcie", "bandwidth_gbps", c.pcie.bandwidth_gbps);
  get(j, "pcie", "latency_ns", c.pcie.latency_ns);
  get(j, "pcie", "max_payload_bytes", c.pcie.max_payload_bytes);
  get(j, "pcie", "packet_overhead_bytes", c.pcie.packet_overhead_bytes);
  get(j, "energy", "pt_pj_per_flop", c.energy.pt_pj_per_flop);
  get(j, "energy", "sfp_pj_per_element", c.energy.sfp_pj_per_element);
  get(j, "energy", "memory_pj_per_byte", c.energy.memory_pj_per_byte);
  get(j, "energy", "ring_pj_per_byte_hop", c.energy.ring_pj_per_byte_hop);
  get(j, "energy", "pcie_pj_per_byte", c.energy.pcie_pj_per_byte);
  get(j, "energy", "static_watts", c.energy.static_watts);
  get(j, "faults", "card", c.faults.card);
  get(j, "faults", "dma_error_copy", c.faults.dma_error_copy);
  get(j, "faults", "ecc_addr", c.faults.ecc_addr);
  get(j, "faults", "ecc_bytes", c.faults.ecc_bytes);
  get(j, "faults", "hang_core", c.faults.hang_core);
  get(j, "faults", "hang_launch", c.faults.hang_launch);
  get(j, "faults", "link_down_cycle", c.faults.link_down_cycle);
  get(j, "firmware", "queues", c.firmware.queues);
  get(j, "firmware", "command_cycles", c.firmware.command_cycles);
  get(j, "firmware", "watchdog_cycles", c.firmware.watchdog_cycles);
  get(j, "output", "trace_path", c.output.trace_path);
  get(j, "output", "stats_path", c.output.stats_path);
  get(j, "output", "capture_path", c.output.capture_path);
  get(j, "output", "trace_instructions", c.output.trace_instructions);
  get(j, "output", "max_trace_events", c.output.max_trace_events);
  return c;
}

void require(bool ok, const char* key, const std::string& why) {
  if (!ok) throw std::invalid_argument(fmt::format("config: '{}' {}", key, why));
}

void validate(const Config& c) {
  require(c.sim.devices >= 1 && c.sim.devices <= 16, "sim.devices", "must be 1..16");
  require(c.sim.host_quantum_ns >= 1, "sim.host_quantum_ns", "must be at least 1");
  require(c.sim.host_memory_bytes == 0 || c.sim.host_memory_bytes >= (1u << 20), "sim.host_memory_bytes",
          "must be 0 (as much as the host has) or at least 1 MiB");
  require(c.chip.cores >= 1 && c.chip.cores <= 64, "chip.cores", "must be 1..64");
  require(c.chip.corelets_per_core >= 1, "chip.corelets_per_core", "must be at least 1");
  require(c.chip.clock_mhz >= 1, "chip.clock_mhz", "must be at least 1");
  require(c.sim.mode == "timed" || c.sim.mode == "functional", "sim.mode", "must be \"timed\" or \"functional\"");
  require(c.chip.lx_read_bytes_per_cycle >= 1, "chip.lx_read_bytes_per_cycle", "must be at least 1");
  require(c.chip.sfp_reduce_cycles >= 1 && c.chip.sfp_convert_cycles >= 1, "chip.sfp_*_cycles", "must be at least 1");
  require(c.chip.fp16_format == "dlfloat16" || c.chip.fp16_format == "ieee", "chip.fp16_format",
          "must be \"dlfloat16\" (the silicon's) or \"ieee\"");
  require(c.chip.lx_bytes >= 64 * 1024 && c.chip.lx_bytes <= (1ull << 31), "chip.lx_bytes", "must be 64 KiB..2 GiB");
  require(c.chip.pt_rows >= 1 && c.chip.pt_cols >= 1 && c.chip.pt_simd >= 1, "chip.pt_*", "must be at least 1");
  require(c.chip.fp32_rate > 0, "chip.fp32_rate", "must be positive");
  require(c.chip.sfp_lanes >= 1, "chip.sfp_lanes", "must be at least 1");
  require(c.chip.sfp_transcendental_cycles >= 1, "chip.sfp_transcendental_cycles", "must be at least 1");
  require(c.chip.dma_channels >= 1 && c.chip.dma_channels <= 64, "chip.dma_channels", "must be 1..64");
  require(c.ring.bytes_per_cycle >= 1, "ring.bytes_per_cycle", "must be at least 1");
  require(c.memory.usable_bytes >= (1ull << 20) && c.memory.usable_bytes <= c.memory.size_bytes, "memory.usable_bytes",
          "must be at least 1 MiB and at most memory.size_bytes");
  require(c.memory.channels >= 1 && c.memory.channels <= 1024, "memory.channels", "must be 1..1024");
  require(c.memory.controllers >= 1 && c.memory.controllers <= c.memory.channels, "memory.controllers",
          "must be 1..memory.channels");
  require(c.memory.interleave_bytes >= 64 && (c.memory.interleave_bytes & (c.memory.interleave_bytes - 1)) == 0,
          "memory.interleave_bytes", "must be a power of two of at least 64");
  require(c.memory.channel_hash == "modulo" ||
              (c.memory.channel_hash == "xor" && (c.memory.channels & (c.memory.channels - 1)) == 0),
          "memory.channel_hash", "must be \"modulo\", or \"xor\" with a power-of-two channel count");
  require(c.memory.bandwidth_gbps > 0, "memory.bandwidth_gbps", "must be positive");
  require(c.pcie.bandwidth_gbps > 0, "pcie.bandwidth_gbps", "must be positive");
  require(c.pcie.max_payload_bytes >= 64, "pcie.max_payload_bytes", "must be at least 64");
  for (const double v : {c.energy.pt_pj_per_flop, c.energy.sfp_pj_per_element, c.energy.memory_pj_per_byte,
                         c.energy.ring_pj_per_byte_hop, c.energy.pcie_pj_per_byte, c.energy.static_watts}) {
    require(v >= 0, "energy.*", "must not be negative");
  }
  require(c.firmware.queues >= 1 && c.firmware.queues <= 16, "firmware.queues", "must be 1..16");
  require(c.faults.card < c.sim.devices, "faults.card", "must name a card of sim.devices");
  require(c.faults.hang_core >= -1 && c.faults.hang_core < static_cast<int64_t>(c.chip.cores), "faults.hang_core",
          "must be -1 (none) or a core of chip.cores");
  require(c.faults.hang_launch >= 1, "faults.hang_launch", "must be at least 1");
  require(
      c.faults.ecc_bytes <= c.memory.usable_bytes && c.faults.ecc_addr <= c.memory.usable_bytes - c.faults.ecc_bytes,
      "faults.ecc_addr", "the range must lie inside memory.usable_bytes");
}

}  // namespace

std::string Config::to_json() const {
  return to_tree(*this).dump();
}

Config Config::without_paths() const {
  Config c = *this;
  c.output.trace_path.clear();
  c.output.stats_path.clear();
  c.output.capture_path.clear();
  c.sim.async_compute = Config{}.sim.async_compute;  // where the arithmetic runs changes no result
  return c;
}

std::string Config::hash() const {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char ch : without_paths().to_json()) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

Config parse_config(const std::string& json_text) {
  json over;
  try {
    over = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(fmt::format("config: not valid JSON ({})", e.what()));
  }
  json tree = to_tree(Config{});
  check_keys(over, tree, "");
  tree.merge_patch(over);
  Config c = from_tree(tree);
  validate(c);
  return c;
}

Config load_config_from_env() {
  Config c;
  std::string text = "{}";
  const char* path = std::getenv("SPYRE_CONFIG");
  if (path && *path) {
    std::ifstream in(path);
    if (!in) throw std::invalid_argument(fmt::format("config: cannot read SPYRE_CONFIG file '{}'", path));
    std::stringstream read;
    read << in.rdbuf();
    text = read.str();
  }
  // $SPYRE_FAULTS: a JSON object of faults.* keys, laid over the file's.
  if (const char* faults = std::getenv("SPYRE_FAULTS"); faults && *faults) {
    json over, patch;
    try {
      over = json::parse(text);
      patch = json::parse(faults);
    } catch (const json::parse_error& e) {
      throw std::invalid_argument(fmt::format("config: SPYRE_CONFIG or SPYRE_FAULTS is not valid JSON ({})", e.what()));
    }
    if (!patch.is_object()) throw std::invalid_argument("config: SPYRE_FAULTS must be a JSON object of faults.* keys");
    over["faults"].merge_patch(patch);
    text = over.dump();
  }
  try {
    c = parse_config(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{} (in {})", e.what(), path && *path ? path : "SPYRE_FAULTS"));
  }
  if (const char* p = std::getenv("SPYRE_TRACE"); p && *p) c.output.trace_path = p;
  if (const char* p = std::getenv("SPYRE_STATS"); p && *p) c.output.stats_path = p;
  if (const char* p = std::getenv("SPYRE_CAPTURE"); p && *p) c.output.capture_path = p;
  return c;
}

}  // namespace spyre::sim
