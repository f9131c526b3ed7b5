// The summary of a spyre-sim run: device time, achieved rate against the configured peak, the
// roofline, the cores' time and stalls from the simulator's stats, the check, and host time. Built
// once as JSON (what --json prints) and formatted from it as one screen of text.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "golden.h"
#include "kernels.h"
#include "runner.h"
#include "spyre/hw/figures.h"
#include "spyre/sim/config.h"

namespace spyre::simtool {

struct RunFacts {
  const Kernel* kernel = nullptr;
  const RunResult* run = nullptr;
  const sim::Config* config = nullptr;
  const hw::CardFigures* card = nullptr;  // what the card reports (its ring capacity for the roofline)
  uint32_t repeat = 1;
  std::optional<CheckResult> check;       // nullopt: not checked
  std::string check_skipped_why;          // when not checked
  const nlohmann::json* stats = nullptr;  // the simulator's stats file, or nullptr when unreadable
  double wall_seconds = 0;                // host time of the whole run so far
  std::string stats_path, trace_path;     // files the user asked for (empty: none)
};

/// The summary as JSON: every number the text shows, with the per-launch cycle list.
/// Keys: title, kernel, op, shape, dtype, config_hash, config {cores, clock_mhz,
/// memory_bandwidth_gbps}, repeat, cycles (mean per launch), launch_cycles, span_cycles,
/// device_seconds, cores_used, flops, matmul_flops, tflops, peak_tflops, peak_dtype,
/// peak_fraction, roofline {compute_seconds, memory_seconds, ring_seconds, bound_seconds,
/// bound_cycles, limit, fraction}, bytes {compulsory, moved}, intensity, stall {scope, cycles} and energy_j (null when
/// the stats lack them), check {status, ...}, host {wall_seconds, launch_seconds}, stats_path,
/// trace_path.
nlohmann::json make_summary(const RunFacts& facts);

/// The summary as text for a terminal, one screen.
std::string format_summary(const nlohmann::json& summary);

/// The PT arrays' peak in flops per cycle for products in `type` (fp32 at chip.fp32_rate).
double peak_flops_per_cycle(const sim::Config& c, hw::DType type);

}  // namespace spyre::simtool
