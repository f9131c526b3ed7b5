#include "trace.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace spyre::sim {

uint32_t Trace::intern(const std::string& s) {
  auto [it, inserted] = string_ids_.try_emplace(s, static_cast<uint32_t>(strings_.size()));
  if (inserted) strings_.emplace_back(s);
  return it->second;
}

uint32_t Trace::track(uint32_t card, const std::string& name) {
  auto [it, inserted] = track_ids_.try_emplace({card, name}, static_cast<uint32_t>(tracks_.size()));
  if (inserted) tracks_.push_back({card, name});
  return it->second;
}

void Trace::slice(uint32_t track, const std::string& name, uint64_t start, uint64_t end,
                  std::initializer_list<std::pair<const char*, uint64_t>> args, const std::string& op) {
  if (config_.output.trace_path.empty()) return;
  if (events_.size() >= config_.output.max_trace_events) {
    ++dropped_;
    return;
  }
  Event e{
      track, intern(name), start, end > start ? end - start : 0, Kind::kSlice, 0, {}, op.empty() ? 0 : intern(op) + 1};
  for (const auto& [k, v] : args) {
    if (e.nargs == kMaxArgs) break;
    e.args[e.nargs++] = {intern(k), v};
  }
  events_.push_back(e);
}

void Trace::flow(uint32_t track, uint64_t at, uint64_t id, bool start) {
  if (config_.output.trace_path.empty()) return;
  if (events_.size() >= config_.output.max_trace_events) {
    ++dropped_;
    return;
  }
  events_.push_back({track, intern("launch"), at, id, start ? Kind::kFlowStart : Kind::kFlowEnd, 0, {}, 0});
}

void Trace::write(const std::string& path) const {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) throw std::runtime_error(fmt::format("trace: cannot write '{}'", path));
  const double us_per_cycle = 1.0 / config_.chip.clock_mhz;
  const nlohmann::json meta = {{"config_hash", config_.hash()},
                               {"config", nlohmann::json::parse(config_.without_paths().to_json())},
                               {"clock_mhz", config_.chip.clock_mhz},
                               {"dropped_events", dropped_}};
  fmt::print(f.get(), "{{\"displayTimeUnit\":\"ns\",\"otherData\":{},\"traceEvents\":[\n", meta.dump());
  bool first = true;
  auto sep = [&] {
    if (!first) std::fputs(",\n", f.get());
    first = false;
  };
  std::map<uint32_t, bool> cards;
  for (const Track& t : tracks_) cards[t.card] = true;
  for (const auto& entry : cards) {
    const uint32_t card = entry.first;
    sep();
    fmt::print(f.get(), R"~({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"spyre:{} (config {})"}}}})~",
               card, card, config_.hash());
  }
  for (uint32_t i = 0; i < tracks_.size(); ++i) {
    sep();
    fmt::print(f.get(), R"~({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{}}}}})~",
               tracks_[i].card, i, nlohmann::json(tracks_[i].name).dump());
    sep();
    fmt::print(f.get(), R"~({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})~",
               tracks_[i].card, i, i);
  }
  for (const Event& e : events_) {
    sep();
    if (e.kind != Kind::kSlice) {
      fmt::print(f.get(), R"~({{"ph":"{}",{}"id":{},"name":"launch","cat":"launch","pid":{},"tid":{},"ts":{:.4f}}})~",
                 e.kind == Kind::kFlowStart ? "s" : "f", e.kind == Kind::kFlowEnd ? R"("bp":"e",)" : "", e.dur,
                 tracks_[e.track].card, e.track, static_cast<double>(e.start) * us_per_cycle);
      continue;
    }
    fmt::print(f.get(), R"~({{"ph":"X","name":{},"pid":{},"tid":{},"ts":{:.4f},"dur":{:.4f},"args":{{"cycles":{})~",
               nlohmann::json(strings_[e.name]).dump(), tracks_[e.track].card, e.track,
               static_cast<double>(e.start) * us_per_cycle, static_cast<double>(e.dur) * us_per_cycle, e.dur);
    for (uint32_t a = 0; a < e.nargs; ++a)
      fmt::print(f.get(), ",\"{}\":{}", strings_[e.args[a].first], e.args[a].second);
    if (e.op != 0) fmt::print(f.get(), ",\"op\":{}", nlohmann::json(strings_[e.op - 1]).dump());
    std::fputs("}}", f.get());
  }
  std::fputs("\n]}\n", f.get());
  if (std::ferror(f.get())) throw std::runtime_error(fmt::format("trace: error writing '{}'", path));
}

namespace {

nlohmann::json stall_json(const uint64_t (&stall)[static_cast<int>(Stall::kCount)]) {
  nlohmann::json j;
  for (int k = 0; k < static_cast<int>(Stall::kCount); ++k) j[kStallNames[k]] = stall[k];
  return j;
}

nlohmann::json server_json(const ServerStats& s, uint64_t cycles, const Config& config) {
  const double span_ps = static_cast<double>(cycles) * 1e6 / config.chip.clock_mhz;
  return {{"bytes", s.bytes},
          {"busy_cycles", static_cast<uint64_t>(static_cast<double>(s.busy_ps) * config.chip.clock_mhz / 1e6)},
          {"utilisation", span_ps > 0 ? static_cast<double>(s.busy_ps) / span_ps : 0.0}};
}

// One JSON object per launch, a line each.
void write_launches(FILE* f, const std::vector<LaunchStats>& launches) {
  for (size_t i = 0; i < launches.size(); ++i) {
    const LaunchStats& l = launches[i];
    const uint64_t span = uint64_t{l.cores} * (l.end - l.start);
    uint64_t busy = 0;
    fmt::print(
        f,
        "{}\n    {{\"name\": {}, \"op\": {}, \"queue\": {}, \"cores\": {}, \"start\": {}, \"end\": {}, \"stall\": {{",
        i == 0 ? "" : ",", nlohmann::json(l.name).dump(), nlohmann::json(l.op).dump(), l.queue, l.cores, l.start,
        l.end);
    for (int k = 0; k < static_cast<int>(Stall::kCount); ++k) {
      busy += l.stall[k];
      fmt::print(f, "\"{}\": {}, ", kStallNames[k], l.stall[k]);
    }
    fmt::print(f, "\"idle\": {}}}, \"flops\": {}, \"bytes_loaded\": {}, \"bytes_stored\": {}}}",
               span - std::min(span, busy), l.flops, l.bytes_loaded, l.bytes_stored);
  }
  if (!launches.empty()) std::fputs("\n  ", f);
}

}  // namespace

nlohmann::json stats_document(const Config& config, const std::vector<const CardStats*>& cards,
                              const std::vector<uint64_t>& card_cycles, const SwitchStats& server,
                              uint64_t trace_dropped) {
  nlohmann::json j;
  j["config_hash"] = config.hash();
  j["config"] = nlohmann::json::parse(config.without_paths().to_json());
  j["trace_dropped_events"] = trace_dropped;
  const uint64_t span = card_cycles.empty() ? 0 : *std::max_element(card_cycles.begin(), card_cycles.end());
  j["server"] = {{"switch", server_json(server.crossbar, span, config)},
                 {"host_port",
                  {{"to_host", server_json(server.host_up, span, config)},
                   {"from_host", server_json(server.host_down, span, config)}}}};
  const EnergyConfig& e = config.energy;
  for (size_t i = 0; i < cards.size(); ++i) {
    const CardStats& s = *cards[i];
    const uint64_t cycles = card_cycles[i];
    const double seconds = static_cast<double>(cycles) / (config.chip.clock_mhz * 1e6);
    nlohmann::json c;
    c["cycles"] = cycles;
    c["seconds"] = seconds;
    c["commands"] = s.commands;
    c["command_errors"] = s.command_errors;
    c["bytes"] = {{"h2d", s.h2d_bytes}, {"d2h", s.d2h_bytes}, {"d2d", s.d2d_bytes}};
    c["msix"] = s.msix;
    uint64_t flops = 0, sfp_elements = 0, idle = 0;
    uint64_t stall[static_cast<int>(Stall::kCount)] = {};
    c["cores"] = nlohmann::json::object();
    for (size_t k = 0; k < s.cores.size(); ++k) {
      const CoreStats& cs = s.cores[k];
      flops += cs.flops;
      sfp_elements += cs.sfp_elements;
      for (int x = 0; x < static_cast<int>(Stall::kCount); ++x) stall[x] += cs.stall[x];
      idle += cycles - std::min(cycles, cs.busy_cycles);
      if (cs.programs == 0) continue;
      nlohmann::json st = stall_json(cs.stall);
      st["idle"] = cycles - std::min(cycles, cs.busy_cycles);
      c["cores"][std::to_string(k)] = {{"programs", cs.programs},
                                       {"instructions", cs.instructions},
                                       {"busy_cycles", cs.busy_cycles},
                                       {"stall", st},
                                       {"flops", cs.flops},
                                       {"sfp_elements", cs.sfp_elements},
                                       {"bytes_loaded", cs.bytes_loaded},
                                       {"bytes_stored", cs.bytes_stored}};
    }
    c["flops"] = flops;
    c["stall"] = stall_json(stall);
    c["stall"]["idle"] = idle;
    c["launches_dropped"] = s.launches_dropped;
    uint64_t memory_bytes = 0;
    for (size_t k = 0; k < s.channels.size(); ++k) {
      memory_bytes += s.channels[k].bytes;
      nlohmann::json ch = server_json(s.channels[k], cycles, config);
      ch["channel"] = k;
      c["memory_channels"].push_back(ch);
    }
    for (const CardStats::LinkStats& l : s.links) {
      nlohmann::json link = server_json(l.s, cycles, config);
      link["from"] = l.from;
      link["to"] = l.to;
      link["direction"] = l.clockwise ? "cw" : "ccw";
      c["ring_links"].push_back(link);
    }
    c["pcie"] = {{"to_host", server_json(s.pcie_up, cycles, config)},
                 {"from_host", server_json(s.pcie_down, cycles, config)}};
    // Energy from counted work: every key is a config figure (docs/architect-guide.md).
    const double pj =
        static_cast<double>(flops) * e.pt_pj_per_flop + static_cast<double>(sfp_elements) * e.sfp_pj_per_element;
    const double mem = static_cast<double>(memory_bytes) * e.memory_pj_per_byte;
    const double ring = static_cast<double>(s.ring_byte_hops) * e.ring_pj_per_byte_hop;
    const double pcie = static_cast<double>(s.pcie_up.bytes + s.pcie_down.bytes) * e.pcie_pj_per_byte;
    const double fixed = e.static_watts * seconds;
    c["energy_j"] = {{"pt", static_cast<double>(flops) * e.pt_pj_per_flop * 1e-12},
                     {"sfp", static_cast<double>(sfp_elements) * e.sfp_pj_per_element * 1e-12},
                     {"memory", mem * 1e-12},
                     {"ring", ring * 1e-12},
                     {"pcie", pcie * 1e-12},
                     {"static", fixed},
                     {"total", (pj + mem + ring + pcie) * 1e-12 + fixed}};
    j["cards"].push_back(c);
  }
  return j;
}

void write_stats(const std::string& path, nlohmann::json j, const std::vector<const CardStats*>& cards) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) throw std::runtime_error(fmt::format("stats: cannot write '{}'", path));
  // Each card's launches, one line each, go in after its other keys: a long run has hundreds of
  // thousands, too many to build as JSON objects first.
  const auto open = [](const nlohmann::json& object) {  // its text without the closing "\n}"
    std::string text = object.dump(2);
    text.resize(text.size() - 2);
    return text;
  };
  const nlohmann::json card_list = std::move(j["cards"]);
  j.erase("cards");
  fmt::print(f.get(), "{},\n  \"cards\": [", open(j));
  for (size_t i = 0; i < cards.size(); ++i) {
    fmt::print(f.get(), "{}{},\n  \"launches\": [", i == 0 ? "\n" : ",\n", open(card_list[i]));
    write_launches(f.get(), cards[i]->launches);
    std::fputs("]\n}", f.get());
  }
  std::fputs("\n]\n}\n", f.get());
  if (std::ferror(f.get())) throw std::runtime_error(fmt::format("stats: error writing '{}'", path));
}

}  // namespace spyre::sim
