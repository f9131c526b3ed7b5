#include "trace.h"

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
  Event e{track, intern(name), start, end > start ? end - start : 0, 0, {}, op.empty() ? 0 : intern(op) + 1};
  for (const auto& [k, v] : args) {
    if (e.nargs == 3) break;
    e.args[e.nargs++] = {intern(k), v};
  }
  events_.push_back(e);
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

void write_stats(const std::string& path, const Config& config, const std::vector<const CardStats*>& cards,
                 const std::vector<uint64_t>& card_cycles, uint64_t trace_dropped) {
  nlohmann::json j;
  j["config_hash"] = config.hash();
  j["config"] = nlohmann::json::parse(config.without_paths().to_json());
  j["trace_dropped_events"] = trace_dropped;
  for (size_t i = 0; i < cards.size(); ++i) {
    const CardStats& s = *cards[i];
    nlohmann::json c;
    c["cycles"] = card_cycles[i];
    c["seconds"] = static_cast<double>(card_cycles[i]) / (config.chip.clock_mhz * 1e6);
    c["commands"] = s.commands;
    c["command_errors"] = s.command_errors;
    c["bytes"] = {{"h2d", s.h2d_bytes}, {"d2h", s.d2h_bytes}, {"d2d", s.d2d_bytes}};
    c["msix"] = s.msix;
    uint64_t flops = 0;
    for (size_t k = 0; k < s.cores.size(); ++k) {
      const CoreStats& cs = s.cores[k];
      flops += cs.flops;
      if (cs.programs == 0) continue;
      c["cores"][std::to_string(k)] = {{"programs", cs.programs},           {"instructions", cs.instructions},
                                       {"busy_cycles", cs.busy_cycles},     {"compute_cycles", cs.compute_cycles},
                                       {"memory_cycles", cs.memory_cycles}, {"flops", cs.flops},
                                       {"bytes_loaded", cs.bytes_loaded},   {"bytes_stored", cs.bytes_stored}};
    }
    c["flops"] = flops;
    j["cards"].push_back(c);
  }
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) throw std::runtime_error(fmt::format("stats: cannot write '{}'", path));
  fmt::print(f.get(), "{}\n", j.dump(2));
}

}  // namespace spyre::sim
