#include "summary.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace spyre::simtool {
namespace {

using nlohmann::json;

// The order stall categories are printed in; others the stats may add follow.
constexpr const char* kStallOrder[] = {"compute", "memory", "ring", "sync", "issue", "idle"};

// SFP results per cycle over every core for steps in `type` (docs/architect-guide.md, timing).
double sfp_per_cycle(const sim::Config& c, hw::DType type) {
  return static_cast<double>(c.chip.cores) * c.chip.sfp_lanes * 2.0 / std::max<uint32_t>(hw::dtype_size(type), 2);
}

// 1234567 -> "1.23 M", 0.0015 -> "1.50 m" (with `unit` appended).
std::string si(double v, const char* unit) {
  static constexpr const char* kUp[] = {"", "k", "M", "G", "T", "P"};
  static constexpr const char* kDown[] = {"", "m", "u", "n", "p"};
  const char* prefix = "";
  for (int p = 1; p < 6 && std::fabs(v) >= 1000; ++p) {
    v /= 1000;
    prefix = kUp[p];
  }
  for (int p = 1; p < 5 && v != 0 && std::fabs(v) < 1; ++p) {
    v *= 1000;
    prefix = kDown[p];
  }
  return fmt::format("{:.{}f} {}{}", v, std::fabs(v) >= 100 || (*prefix == 0 && v == std::floor(v)) ? 0 : 2, prefix,
                     unit);
}

std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  if (s >= 1e-6) return fmt::format("{:.3f} us", s * 1e6);
  return fmt::format("{:.1f} ns", s * 1e9);
}

std::string pct(double fraction) {
  return fmt::format("{:.1f} %", 100 * fraction);
}

const json* card0(const json* stats) {
  if (!stats || !stats->contains("cards") || !(*stats)["cards"].is_array() || (*stats)["cards"].empty()) return nullptr;
  return &(*stats)["cards"][0];
}

// Adds every number of object `from` into `into`.
void add_numbers(json& into, const json& from) {
  if (!from.is_object()) return;
  for (const auto& [k, v] : from.items()) {
    if (v.is_number()) into[k] = into.value(k, 0.0) + v.get<double>();
  }
}

// The card's launches of this kernel (labelled with its title), when the stats list launches.
std::vector<const json*> my_launches(const json* card, const std::string& label) {
  std::vector<const json*> out;
  if (!card || !card->contains("launches") || !(*card)["launches"].is_array()) return out;
  for (const json& l : (*card)["launches"]) {
    if (l.is_object() && l.value("op", std::string()) == label) out.push_back(&l);
  }
  return out;
}

// Stall cycles by category (summed over the cores), from this kernel's launches if the stats list
// them, else the card's whole run; null when the stats have neither.
json stalls(const json* card, const std::vector<const json*>& launches) {
  json s = json::object();
  for (const json* l : launches) add_numbers(s, l->value("stall", json::object()));
  if (!s.empty()) return {{"scope", "launches"}, {"cycles", s}};
  if (card && card->contains("stall")) add_numbers(s, (*card)["stall"]);
  if (!s.empty()) return {{"scope", "run"}, {"cycles", s}};
  return nullptr;
}

// Bytes the cores loaded and stored per launch: from the launches, or the cores' totals.
json bytes_moved(const json* card, const std::vector<const json*>& launches, uint32_t repeat) {
  double total = 0;
  for (const json* l : launches) total += l->value("bytes_loaded", 0.0) + l->value("bytes_stored", 0.0);
  if (!launches.empty()) return total / static_cast<double>(launches.size());
  if (!card || !card->contains("cores") || !(*card)["cores"].is_object()) return nullptr;
  for (const auto& [k, core] : (*card)["cores"].items()) {
    total += core.value("bytes_loaded", 0.0) + core.value("bytes_stored", 0.0);
  }
  return total / repeat;
}

}  // namespace

double peak_flops_per_cycle(const sim::Config& c, hw::DType type) {
  const double fp16 = static_cast<double>(c.chip.cores) * c.chip.corelets_per_core * c.chip.pt_rows * c.chip.pt_cols *
                      c.chip.pt_simd * 2.0;
  return type == hw::DType::kF32 ? fp16 * c.chip.fp32_rate : fp16;
}

json make_summary(const RunFacts& f) {
  const Kernel& k = *f.kernel;
  const RunResult& run = *f.run;
  const sim::Config& c = *f.config;
  const double hz = c.chip.clock_mhz * 1e6;
  json s;
  s["title"] = k.title();
  s["kernel"] = k.name;
  s["op"] = k.op.empty() ? json(nullptr) : json(k.op);
  s["shape"] = json::object();
  for (const auto& [key, value] : k.dims) s["shape"][key] = value;
  s["dtype"] = hw::dtype_name(k.dtype);
  s["config_hash"] = c.hash();
  s["config"] = {
      {"cores", c.chip.cores}, {"clock_mhz", c.chip.clock_mhz}, {"memory_bandwidth_gbps", c.memory.bandwidth_gbps}};
  s["repeat"] = f.repeat;

  const std::vector<uint64_t>& lc = run.launch_cycles;
  const double mean = lc.empty() ? 0.0 : std::accumulate(lc.begin(), lc.end(), 0.0) / static_cast<double>(lc.size());
  s["cycles"] = mean;
  s["launch_cycles"] = lc;
  s["span_cycles"] = run.span_cycles;
  const double t = mean / hz;
  s["device_seconds"] = t;
  s["cores_used"] = __builtin_popcountll(k.program.core_mask);

  const Work& w = k.work;
  const double peak = peak_flops_per_cycle(c, w.matmul_dtype);
  s["flops"] = w.flops();
  s["matmul_flops"] = w.matmul_flops;
  s["tflops"] = t > 0 ? w.flops() / t / 1e12 : 0.0;
  s["peak_tflops"] = peak * hz / 1e12;
  s["peak_dtype"] = hw::dtype_name(w.matmul_dtype);
  s["peak_fraction"] = t > 0 ? w.flops() / t / (peak * hz) : 0.0;

  // Roofline: the PT arrays and the SFPs take turns on a core, so their times add; the compulsory
  // traffic moves at the LPDDR5 bandwidth.
  double compute_cycles = w.matmul_flops / peak;
  for (const VectorWork& v : w.vector) {
    compute_cycles +=
        v.elements / sfp_per_cycle(c, v.dtype) * (v.transcendental ? c.chip.sfp_transcendental_cycles : 1);
  }
  const double compute_s = compute_cycles / hz;
  const double memory_s = static_cast<double>(w.min_bytes) / (c.memory.bandwidth_gbps * 1e9);
  // The ring: the same bytes between the controllers and the cores, at what the busiest link carries
  // when every controller serves every core alike (hw::CardFigures::ring_load_bytes_per_cycle).
  // The loads alone need at least that long, and so do the stores (mirrored, on the links' other
  // direction): the larger of them is the bound.
  const uint64_t ring_bytes = std::max(w.min_bytes - w.min_store_bytes, w.min_store_bytes);
  const double ring_s = static_cast<double>(ring_bytes) / (f.card->ring_load_bytes_per_cycle() * hz);
  const double bound = std::max({compute_s, memory_s, ring_s});
  s["roofline"] = {{"compute_seconds", compute_s},
                   {"memory_seconds", memory_s},
                   {"ring_seconds", ring_s},
                   {"bound_seconds", bound},
                   {"bound_cycles", bound * hz},
                   {"limit", bound == compute_s  ? "compute"
                             : bound == memory_s ? "memory"
                                                 : "ring"},
                   {"fraction", t > 0 ? bound / t : 0.0}};

  const json* card = card0(f.stats);
  const std::vector<const json*> launches = my_launches(card, k.title().substr(0, hw::kMaxLabelBytes - 1));
  s["bytes"] = {{"compulsory", w.min_bytes}, {"moved", bytes_moved(card, launches, f.repeat)}};
  s["intensity"] = w.min_bytes ? w.flops() / static_cast<double>(w.min_bytes) : 0.0;
  s["stall"] = stalls(card, launches);
  s["energy_j"] = card && card->contains("energy_j") ? (*card)["energy_j"] : json(nullptr);

  if (f.check) {
    const CheckResult& r = *f.check;
    s["check"] = {{"status", r.passed ? "passed" : "failed"},
                  {"elements", r.elements},
                  {"mismatches", r.mismatches},
                  {"max_abs_error", r.max_abs_error},
                  {"worst_ratio", r.worst_ratio},
                  {"worst_index", r.worst_index},
                  {"worst_got", r.worst_got},
                  {"worst_want", r.worst_want}};
  } else {
    s["check"] = {{"status", "skipped"}, {"why", f.check_skipped_why}};
  }
  s["host"] = {{"wall_seconds", f.wall_seconds}, {"launch_seconds", run.launch_wall_seconds}};
  s["stats_path"] = f.stats_path.empty() ? json(nullptr) : json(f.stats_path);
  s["trace_path"] = f.trace_path.empty() ? json(nullptr) : json(f.trace_path);
  return s;
}

std::string format_summary(const json& s) {
  std::string o = fmt::format("spyre-sim: {}\n", s["title"].get<std::string>());
  const auto line = [&](const char* field, const std::string& text) { o += fmt::format("  {:<11} {}\n", field, text); };
  const double t = s["device_seconds"].get<double>();
  const json& cfg = s["config"];
  line("config", fmt::format("{}: {} cores at {} MHz, PT peak {:.1f} TFLOP/s in {}, LPDDR5 {} GB/s",
                             s["config_hash"].get<std::string>(), cfg["cores"].get<int>(), cfg["clock_mhz"].get<int>(),
                             s["peak_tflops"].get<double>(), s["peak_dtype"].get<std::string>(),
                             cfg["memory_bandwidth_gbps"].get<double>()));
  const int cores = s["cores_used"].get<int>();
  std::string device = fmt::format("{:.0f} cycles = {} per launch on {} core{}", s["cycles"].get<double>(), seconds(t),
                                   cores, cores == 1 ? "" : "s");
  const auto& lc = s["launch_cycles"];
  if (lc.size() > 1) {
    device += fmt::format(" (mean of {}, {} to {})", lc.size(), lc.front().get<uint64_t>(), lc.back().get<uint64_t>());
  }
  line("device", device);
  line("", fmt::format("{} cycles from the TIMESTAMP before to the one after", s["span_cycles"].get<uint64_t>()));
  line("rate", fmt::format("{} per launch: {:.2f} TFLOP/s, {} of peak", si(s["flops"].get<double>(), "FLOP"),
                           s["tflops"].get<double>(), pct(s["peak_fraction"].get<double>())));
  const json& b = s["bytes"];
  std::string bytes = fmt::format("{} compulsory", si(b["compulsory"].get<double>(), "B"));
  if (b["moved"].is_number())
    bytes += fmt::format(", {} loaded and stored by the cores", si(b["moved"].get<double>(), "B"));
  line("memory", bytes + fmt::format("; intensity {:.1f} FLOP/B", s["intensity"].get<double>()));
  const json& r = s["roofline"];
  line("roofline", fmt::format("{} ({:.0f} cycles, {}-bound: compute {}, memory {}, ring {}); this run: {} of it",
                               seconds(r["bound_seconds"].get<double>()), r["bound_cycles"].get<double>(),
                               r["limit"].get<std::string>(), seconds(r["compute_seconds"].get<double>()),
                               seconds(r["memory_seconds"].get<double>()), seconds(r["ring_seconds"].get<double>()),
                               pct(r["fraction"].get<double>())));
  if (s["stall"].is_object()) {
    const json& cy = s["stall"]["cycles"];
    double total = 0;
    for (const auto& [k, v] : cy.items()) total += v.get<double>();
    std::vector<std::string> keys(std::begin(kStallOrder), std::end(kStallOrder));
    for (const auto& [k, v] : cy.items()) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
    std::string text;
    for (const std::string& k : keys) {
      if (!cy.contains(k)) continue;
      text += fmt::format("{}{} {}", text.empty() ? "" : ", ", k, pct(total > 0 ? cy[k].get<double>() / total : 0));
    }
    line("stalls", text + (s["stall"]["scope"] == "run" ? " (core cycles of the whole run)" : " (core cycles)"));
  }
  const json& e = s["energy_j"];
  if (e.is_number()) line("energy", fmt::format("{} for the whole run, copies included", si(e.get<double>(), "J")));
  if (e.is_object() && e.contains("total") && e["total"].is_number()) {
    const double total = e["total"].get<double>();
    std::vector<std::pair<double, std::string>> parts;
    for (const auto& [k, v] : e.items()) {
      if (k != "total" && v.is_number()) parts.emplace_back(v.get<double>(), k);
    }
    std::sort(parts.rbegin(), parts.rend());
    std::string text;
    for (const auto& [v, k] : parts) text += fmt::format(", {} {}", k, pct(total > 0 ? v / total : 0));
    line("energy", fmt::format("{} for the whole run, copies included{}", si(total, "J"), text));
  }
  const json& c = s["check"];
  if (c["status"] == "skipped") {
    line("check", "skipped: " + c["why"].get<std::string>());
  } else {
    line("check",
         fmt::format("{}: {} of {} elements outside tolerance; max |error| {:.3g}, worst {:.2f} of its "
                     "tolerance (element {}: {:.6g}, expected {:.6g})",
                     c["status"].get<std::string>(), c["mismatches"].get<uint64_t>(), c["elements"].get<uint64_t>(),
                     c["max_abs_error"].get<double>(), c["worst_ratio"].get<double>(), c["worst_index"].get<uint64_t>(),
                     c["worst_got"].get<double>(), c["worst_want"].get<double>()));
  }
  line("host", fmt::format("{} wall, {} of it from the first launch to the last completion",
                           seconds(s["host"]["wall_seconds"].get<double>()),
                           seconds(s["host"]["launch_seconds"].get<double>())));
  if (s["stats_path"].is_string()) line("stats", s["stats_path"].get<std::string>());
  if (s["trace_path"].is_string()) line("trace", s["trace_path"].get<std::string>());
  return o;
}

}  // namespace spyre::simtool
