#include "spyre/sim/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <vector>

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
               {"pt_queue_depth", c.chip.pt_queue_depth},
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
  j["server"] = {{"switch_gbps", c.server.switch_gbps},
                 {"switch_latency_ns", c.server.switch_latency_ns},
                 {"host_port_gbps", c.server.host_port_gbps}};
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
    const std::string name = path.empty() ? key : fmt::format("{}.{}", path, key);
    if (!base.contains(key)) throw std::invalid_argument(fmt::format("config: unknown key '{}'", name));
    const json& want = base.at(key);
    if (want.is_object()) {
      check_keys(value, want, name);
    } else if (want.is_number() != value.is_number() || want.is_string() != value.is_string() ||
               want.is_boolean() != value.is_boolean()) {
      throw std::invalid_argument(
          fmt::format("config: '{}' must be a {} (got {})", name, want.type_name(), value.dump()));
    }  // a number's range (negative ones included) is from_tree's to check, with the range named
  }
}

std::string bound(long double v) {
  if (v == std::floor(v) && v >= static_cast<long double>(std::numeric_limits<int64_t>::min()) &&
      v <= static_cast<long double>(std::numeric_limits<uint64_t>::max())) {
    return v < 0 ? fmt::format("{}", static_cast<int64_t>(v)) : fmt::format("{}", static_cast<uint64_t>(v));
  }
  return fmt::format("{:g}", static_cast<double>(v));
}

// One field: its value must be of its kind (an integer field takes no fraction, 16.0 is 16) and
// inside [lo, hi], clipped to what the field's type holds. The message names the key, the range and
// the value given. Strings and booleans are taken as they are (check_keys has seen their kind).
template <typename T>
void get(const json& j, const char* section, const char* key, T& out, long double lo = 0, long double hi = 0) {
  const json& v = j.at(section).at(key);
  if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
    const auto x = v.get<long double>();
    if constexpr (std::is_integral_v<T>) {
      lo = std::max(lo, static_cast<long double>(std::numeric_limits<T>::min()));
      hi = std::min(hi, static_cast<long double>(std::numeric_limits<T>::max()));
    }
    const bool integral = !std::is_integral_v<T> || x == std::floor(x);
    if (!integral || !(x >= lo && x <= hi)) {
      throw std::invalid_argument(fmt::format("config: '{}.{}' must be {} in {}..{} (got {})", section, key,
                                              std::is_integral_v<T> ? "an integer" : "a number", bound(lo), bound(hi),
                                              v.dump()));
    }
    out = static_cast<T>(x);
  } else {
    out = v.get<T>();
  }
}

constexpr long double kMax = 1.8446744073709551615e19L;  // clipped to each field's type
constexpr long double kMiB = 1 << 20;
constexpr long double kGiB = 1 << 30;

// Every key with its range: a config outside them is refused at load (docs/architect-guide.md
// lists the same ranges; backend/tests/test_spyre_sim.py holds the two to each other).
Config from_tree(const json& j) {
  Config c;
  get(j, "sim", "devices", c.sim.devices, 1, 16);
  get(j, "sim", "host_quantum_ns", c.sim.host_quantum_ns, 1, 1e9);
  get(j, "sim", "async_compute", c.sim.async_compute);
  get(j, "sim", "mode", c.sim.mode);
  get(j, "sim", "host_paced", c.sim.host_paced);
  get(j, "sim", "host_memory_bytes", c.sim.host_memory_bytes, 0, kMax);
  get(j, "chip", "cores", c.chip.cores, 1, 64);
  get(j, "chip", "corelets_per_core", c.chip.corelets_per_core, 1, 8);
  get(j, "chip", "clock_mhz", c.chip.clock_mhz, 1, 10000);
  get(j, "chip", "lx_bytes", c.chip.lx_bytes, 64 * 1024, 2 * kGiB);
  get(j, "chip", "pt_rows", c.chip.pt_rows, 1, 256);
  get(j, "chip", "pt_cols", c.chip.pt_cols, 1, 256);
  get(j, "chip", "pt_simd", c.chip.pt_simd, 1, 64);
  get(j, "chip", "fp32_rate", c.chip.fp32_rate, 0.001, 1);
  get(j, "chip", "pt_fill_cycles", c.chip.pt_fill_cycles, 0, 1e6);
  get(j, "chip", "pt_drain_cycles", c.chip.pt_drain_cycles, 0, 1e6);
  get(j, "chip", "pt_tile_cycles", c.chip.pt_tile_cycles, 0, 1e6);
  get(j, "chip", "pt_queue_depth", c.chip.pt_queue_depth, 0, 64);
  get(j, "chip", "lx_read_bytes_per_cycle", c.chip.lx_read_bytes_per_cycle, 1, 65536);
  get(j, "chip", "sfp_lanes", c.chip.sfp_lanes, 1, 4096);
  get(j, "chip", "sfp_fill_cycles", c.chip.sfp_fill_cycles, 0, 1e6);
  get(j, "chip", "sfp_transcendental_cycles", c.chip.sfp_transcendental_cycles, 1, 1e6);
  get(j, "chip", "sfp_reduce_cycles", c.chip.sfp_reduce_cycles, 1, 1e6);
  get(j, "chip", "sfp_convert_cycles", c.chip.sfp_convert_cycles, 1, 1e6);
  get(j, "chip", "issue_cycles", c.chip.issue_cycles, 0, 1e6);
  get(j, "chip", "scalar_cycles", c.chip.scalar_cycles, 0, 1e6);
  get(j, "chip", "barrier_cycles", c.chip.barrier_cycles, 0, 1e6);
  get(j, "chip", "dma_channels", c.chip.dma_channels, 1, 64);
  get(j, "chip", "fp16_format", c.chip.fp16_format);
  get(j, "ring", "bytes_per_cycle", c.ring.bytes_per_cycle, 1, 65536);
  get(j, "ring", "hop_cycles", c.ring.hop_cycles, 0, 1e6);
  get(j, "memory", "size_bytes", c.memory.size_bytes, kMiB, kMiB * kGiB);
  get(j, "memory", "usable_bytes", c.memory.usable_bytes, kMiB, kMiB * kGiB);
  get(j, "memory", "channels", c.memory.channels, 1, 1024);
  get(j, "memory", "controllers", c.memory.controllers, 1, 1024);
  get(j, "memory", "interleave_bytes", c.memory.interleave_bytes, 64, kGiB);
  get(j, "memory", "channel_hash", c.memory.channel_hash);
  get(j, "memory", "bandwidth_gbps", c.memory.bandwidth_gbps, 0.001, 1e5);
  get(j, "memory", "latency_ns", c.memory.latency_ns, 0, 1e6);
  get(j, "pcie", "bandwidth_gbps", c.pcie.bandwidth_gbps, 0.001, 1e4);
  get(j, "pcie", "latency_ns", c.pcie.latency_ns, 0, 1e7);
  get(j, "pcie", "max_payload_bytes", c.pcie.max_payload_bytes, 64, 4096);
  get(j, "pcie", "packet_overhead_bytes", c.pcie.packet_overhead_bytes, 0, 4096);
  get(j, "server", "switch_gbps", c.server.switch_gbps, 0.001, 1e5);
  get(j, "server", "switch_latency_ns", c.server.switch_latency_ns, 0, 1e7);
  get(j, "server", "host_port_gbps", c.server.host_port_gbps, 0, 1e4);
  get(j, "energy", "pt_pj_per_flop", c.energy.pt_pj_per_flop, 0, 1e6);
  get(j, "energy", "sfp_pj_per_element", c.energy.sfp_pj_per_element, 0, 1e6);
  get(j, "energy", "memory_pj_per_byte", c.energy.memory_pj_per_byte, 0, 1e6);
  get(j, "energy", "ring_pj_per_byte_hop", c.energy.ring_pj_per_byte_hop, 0, 1e6);
  get(j, "energy", "pcie_pj_per_byte", c.energy.pcie_pj_per_byte, 0, 1e6);
  get(j, "energy", "static_watts", c.energy.static_watts, 0, 1e4);
  get(j, "faults", "card", c.faults.card, 0, 15);
  get(j, "faults", "dma_error_copy", c.faults.dma_error_copy, 0, kMax);
  get(j, "faults", "ecc_addr", c.faults.ecc_addr, 0, kMax);
  get(j, "faults", "ecc_bytes", c.faults.ecc_bytes, 0, kMax);
  get(j, "faults", "hang_core", c.faults.hang_core, -1, 63);
  get(j, "faults", "hang_launch", c.faults.hang_launch, 1, kMax);
  get(j, "faults", "link_down_cycle", c.faults.link_down_cycle, 0, kMax);
  get(j, "firmware", "queues", c.firmware.queues, 1, 16);
  get(j, "firmware", "command_cycles", c.firmware.command_cycles, 0, 1e9);
  get(j, "firmware", "watchdog_cycles", c.firmware.watchdog_cycles, 0, 1e15);
  get(j, "output", "trace_path", c.output.trace_path);
  get(j, "output", "stats_path", c.output.stats_path);
  get(j, "output", "capture_path", c.output.capture_path);
  get(j, "output", "trace_instructions", c.output.trace_instructions);
  get(j, "output", "max_trace_events", c.output.max_trace_events, 0, 1e9);
  return c;
}

void require(bool ok, const char* key, const std::string& why) {
  if (!ok) throw std::invalid_argument(fmt::format("config: '{}' {}", key, why));
}

// What the ranges of from_tree cannot say alone: values that must agree with each other.
void validate(const Config& c) {
  require(c.sim.host_memory_bytes == 0 || c.sim.host_memory_bytes >= (1u << 20), "sim.host_memory_bytes",
          "must be 0 (as much as the host has) or at least 1 MiB");
  require(c.sim.mode == "timed" || c.sim.mode == "functional" || c.sim.mode == "timing", "sim.mode",
          "must be \"timed\", \"functional\" or \"timing\"");
  require(c.chip.fp16_format == "dlfloat16" || c.chip.fp16_format == "ieee", "chip.fp16_format",
          "must be \"dlfloat16\" (the silicon's) or \"ieee\"");
  require(c.memory.usable_bytes <= c.memory.size_bytes, "memory.usable_bytes", "must be at most memory.size_bytes");
  require(c.memory.controllers <= c.memory.channels, "memory.controllers", "must be 1..memory.channels");
  require((c.memory.interleave_bytes & (c.memory.interleave_bytes - 1)) == 0, "memory.interleave_bytes",
          "must be a power of two of at least 64");
  require(c.memory.channel_hash == "modulo" ||
              (c.memory.channel_hash == "xor" && (c.memory.channels & (c.memory.channels - 1)) == 0),
          "memory.channel_hash", "must be \"modulo\", or \"xor\" with a power-of-two channel count");
  require(c.faults.card < c.sim.devices, "faults.card", "must name a card of sim.devices");
  require(c.faults.hang_core < static_cast<int64_t>(c.chip.cores), "faults.hang_core",
          "must be -1 (none) or a core of chip.cores");
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

namespace {

// Parses a config's JSON, refusing a key that an object names twice (nlohmann keeps the last).
json parse_strict(const std::string& text) {
  std::vector<std::set<std::string>> seen;  // the keys of each open object
  std::vector<std::string> path;            // the key being read at each level
  const json::parser_callback_t note = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      seen.emplace_back();
      path.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      seen.pop_back();
      path.pop_back();
    } else if (event == json::parse_event_t::key) {
      path.back() = parsed.get<std::string>();
      if (!seen.back().insert(path.back()).second) {
        std::string name;
        for (const std::string& part : path) name += (name.empty() ? "" : ".") + part;
        throw std::invalid_argument(fmt::format("config: key '{}' is given twice", name));
      }
    }
    return true;
  };
  try {
    return json::parse(text, note);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(fmt::format("config: not valid JSON ({})", e.what()));
  }
}

}  // namespace

void check_config_text(const std::string& json_text) {
  parse_strict(json_text);
}

Config parse_config(const std::string& json_text) {
  const json over = parse_strict(json_text);
  json tree = to_tree(Config{});
  check_keys(over, tree, "");
  tree.merge_patch(over);
  Config c = from_tree(tree);
  validate(c);
  return c;
}

Config load_config(const std::string& file_text, const std::string& faults, const std::string& origin) {
  std::string text = origin.empty() && file_text.empty() ? "{}" : file_text;
  // The faults: a JSON object of faults.* keys, laid over the file's.
  if (!faults.empty()) {
    json over, patch;
    try {
      over = parse_strict(text);
      patch = parse_strict(faults);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("{} (in SPYRE_CONFIG or SPYRE_FAULTS)", e.what()));
    }
    if (!patch.is_object()) throw std::invalid_argument("config: SPYRE_FAULTS must be a JSON object of faults.* keys");
    over["faults"].merge_patch(patch);
    text = over.dump();
  }
  try {
    return parse_config(text);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{} (in {})", e.what(), !origin.empty() ? origin : "SPYRE_FAULTS"));
  }
}

Config load_config_from_env() {
  std::string text;
  const char* path = std::getenv("SPYRE_CONFIG");
  if (path && *path) {
    std::ifstream in(path);
    if (!in) throw std::invalid_argument(fmt::format("config: cannot read SPYRE_CONFIG file '{}'", path));
    std::stringstream read;
    read << in.rdbuf();
    text = read.str();
  }
  const char* faults = std::getenv("SPYRE_FAULTS");
  Config c = load_config(text, faults ? faults : "", path ? path : "");
  if (const char* p = std::getenv("SPYRE_TRACE"); p && *p) c.output.trace_path = p;
  if (const char* p = std::getenv("SPYRE_STATS"); p && *p) c.output.stats_path = p;
  if (const char* p = std::getenv("SPYRE_CAPTURE"); p && *p) c.output.capture_path = p;
  return c;
}

}  // namespace spyre::sim
