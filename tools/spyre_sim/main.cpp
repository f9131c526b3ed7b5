// spyre-sim: runs a built-in kernel on the simulated Spyre card, through the real driver and the
// inproc transport exactly as the PyTorch device would, and prints its device time against the
// configured peak and roofline, the simulator's stall breakdown, and a check against a host golden
// model. For hardware architects: no PyTorch, any config (docs/architect-guide.md, "spyre-sim").
//
// Exit status: 0 when the run succeeded (and its check passed), 1 when the check failed or the
// config, compiler, driver or card failed, 2 when the command line is wrong.
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kernels.h"
#include "launch_replay.h"
#include "runner.h"
#include "sim_config.h"
#include "spyre/driver/driver.h"
#include "spyre/hw/regs.h"
#include "spyre/sim/inproc.h"
#include "spyre/sim/simulator.h"
#include "summary.h"

namespace spyre::simtool {
namespace {

constexpr double kCheckByDefaultUpTo = 134217728;  // 2^27: the golden model takes well under a second

struct Options {
  std::string config_file;
  std::vector<std::string> sets;
  std::string stats_path, trace_path;
  uint32_t repeat = 1;
  bool json = false;
  bool listing = false;
  uint64_t seed = 1;
  bool check = false;  // meaningful when --check or --no-check was given
  std::string dtype = "f16";
  uint32_t m = 512, k = 512, n = 512;
  std::string op = "add";
  uint64_t numel = 1 << 20;
  uint32_t rows = 1024, cols = 1024;
  double eps = 1e-5;
  uint32_t batch = 1, heads = 8, seq = 256, dim = 64;
  std::string capture;
  uint64_t count = 1000000;
  uint32_t cores = 1;
  std::string ktir_file, ktir_function;
  std::string dump_dir;  // launch: where each core's final scratchpad goes
  int64_t dump_at = -1;  // launch: the instruction to stop each core at (default: its END)
};

// The stats file of a run that did not ask for one: removed at exit, after the simulator, which
// writes its reports once more when it shuts down (its exit handler runs before this one).
std::string g_temp_stats;

std::string temp_stats_path() {
  const char* dir = std::getenv("TMPDIR");
  std::string path = fmt::format("{}/spyre-sim-stats-XXXXXX", dir && *dir ? dir : "/tmp");
  const int fd = mkstemp(path.data());
  if (fd < 0) throw std::runtime_error(fmt::format("cannot create a temporary stats file in {}", path));
  close(fd);
  g_temp_stats = path;
  std::atexit([] { std::remove(g_temp_stats.c_str()); });
  return path;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

hw::DType dtype_of(const std::string& name) {
  static const std::map<std::string, hw::DType> types = {
      {"f32", hw::DType::kF32}, {"f16", hw::DType::kF16}, {"bf16", hw::DType::kBF16}};
  return types.at(name);
}

// A size option: at least 1; at most 2^20 (a dimension) or 2^36 (an element count).
template <typename T>
void add_size(CLI::App* sub, const char* name, T& value, const char* what) {
  const T most = sizeof(T) > 4 ? T{1} << 36 : T{1} << 20;
  sub->add_option(name, value, what)->check(CLI::Range(T{1}, most))->type_name("N")->capture_default_str();
}

void add_dtype(CLI::App* sub, Options& o) {
  sub->add_option("--dtype", o.dtype, "element type of the inputs and the output")
      ->check(CLI::IsMember({"f16", "bf16", "f32"}))
      ->capture_default_str();
}

// The card's device 0, opened through the driver on the inproc transport: a run measures the
// config it was given, alone on the card, so it simulates in its own process whatever
// $SPYRE_TRANSPORT says (a shared daemon would mix other clients' work into its figures).
driver::Device& open_device() {
  setenv("SPYRE_TRANSPORT", "inproc", 1);
  sim::register_inproc_transport();
  driver::Driver& drv = driver::Driver::instance();
  if (!drv.transport_status().ok()) throw std::runtime_error(drv.transport_status().message());
  driver::Device* dev = nullptr;
  if (const driver::Status s = drv.device(0, &dev); !s.ok()) throw std::runtime_error(s.message());
  return *dev;
}

// The stats file a run wrote.
nlohmann::json read_stats(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("cannot read the simulator's stats file '{}'", path));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(fmt::format("the simulator's stats file '{}' is not JSON ({})", path, e.what()));
  }
}

// The config of a run: the defaults (or a capture's config), then $SPYRE_CONFIG, --config and --set;
// the report paths from the command line or the environment. `temp_stats`: a run that asked for no
// stats file writes one to a temporary file all the same (its summary reads it back).
sim::Config run_config(const Options& o, const std::string& base = "", bool temp_stats = true) {
  sim::Config config = build_config({env("SPYRE_CONFIG"), o.config_file}, o.sets, base);
  const std::string stats_path = o.stats_path.empty() ? env("SPYRE_STATS") : o.stats_path;
  config.output.trace_path = o.trace_path.empty() ? env("SPYRE_TRACE") : o.trace_path;
  config.output.stats_path = stats_path.empty() && temp_stats ? temp_stats_path() : stats_path;
  config.output.capture_path.clear();
  return config;
}

// `replay FILE`: the captured run on its own config, or on the one the options make of it. On an
// unchanged config the cycles must be the capture's to the cycle (exit 1 otherwise); so they must
// in timing mode on the capture's config otherwise unchanged, which computes no values (its DMA
// writes differ) but indexes with the captured indices.
int replay(const Options& o, std::chrono::steady_clock::time_point start) {
  const sim::Capture capture = sim::Capture::load(o.capture);
  const sim::Config config = run_config(o, capture.config_json, /*temp_stats=*/false);
  const sim::Config captured_config = sim::parse_config(capture.config_json);
  const bool timing = config.sim.mode == "timing";
  sim::Config as_timed = config;  // a timed capture replayed in timing mode keeps its cycles
  if (timing && captured_config.sim.mode == "timed") as_timed.sim.mode = "timed";
  const bool same_config = as_timed.hash() == captured_config.hash();
  sim::Simulator::configure(config);
  sim::Simulator& simulator = sim::Simulator::instance();
  const sim::ReplayResult r = simulator.replay(capture);
  const sim::Reports reports = simulator.flush_reports();
  const nlohmann::json stats = nlohmann::json::parse(simulator.stats_summary());
  const std::vector<uint64_t> captured = capture.end_cycles();
  const nlohmann::json& card = stats.at("cards").at(0);
  nlohmann::json summary = {
      {"kernel", "replay"},
      {"capture", o.capture},
      {"config_hash", config.hash()},
      {"same_config", same_config},
      {"host_writes", r.host_actions},
      {"captured_cycles", captured},
      {"cycles", r.cycles},
      {"missing_reads", r.missing_reads},
      {"diverged_writes", r.diverged_writes},
      {"mode", config.sim.mode},
      {"played_indices", r.played_indices},
      {"missing_indices", r.missing_indices},
      {"launches", card.value("commands", nlohmann::json::object()).value("launch", 0)},
      {"flops", card.value("flops", 0)},
      {"stall", card.value("stall", nlohmann::json::object())},
      {"energy_j", card.value("energy_j", nlohmann::json::object())},
      {"stats", o.stats_path.empty() ? env("SPYRE_STATS") : o.stats_path},
      {"trace", reports.trace_path},
      {"wall_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}};
  if (o.json) {
    fmt::print("{}\n", summary.dump(2));
  } else {
    fmt::print("spyre-sim: replay of {} ({} host writes)\n", o.capture, r.host_actions);
    fmt::print("  config      {}{}{}\n", config.hash(),
               same_config ? ", the capture's" : ", changed from the capture's", timing ? " in timing mode" : "");
    for (size_t i = 0; i < r.cycles.size(); ++i) {
      fmt::print("  card {}      {} cycles, captured {}\n", i, r.cycles[i], i < captured.size() ? captured[i] : 0);
    }
    fmt::print("  launches    {}, {:.3g} flop\n", summary["launches"].get<uint64_t>(), summary["flops"].get<double>());
    if (r.missing_reads) fmt::print("  missing     {} DMA reads the capture had no bytes for\n", r.missing_reads);
    if (r.missing_indices) {
      fmt::print("  indices     {} gathers or scatters the capture had no indices for (they used the scratchpad's)\n",
                 r.missing_indices);
    }
    if (r.diverged_writes) {
      fmt::print("  differ      {} DMA writes differ from the capture's{}\n", r.diverged_writes,
                 timing        ? " (timing mode computes no values: expected)"
                 : same_config ? ""
                               : " (completion records carry cycles: expected on another config)");
    }
    fmt::print("  host        {:.3f} s wall\n", summary["wall_seconds"].get<double>());
  }
  std::fflush(stdout);
  if (same_config && (r.cycles != captured || r.missing_reads || r.missing_indices || (!timing && r.diverged_writes))) {
    fmt::print(stderr, "spyre-sim: the replay on the capture's own config did not reproduce it\n");
    return 1;
  }
  return 0;
}

// `launch FILE --dump-scratchpad DIR`: the launch replayed once per core, each stopped before
// its END (or --at's instruction) to write its 16 registers and its scratchpad: DIR/core<r>.lx
// (the raw bytes) and DIR/dump.json (registers and files by rank).
int dump_scratchpads(const Options& o, const launchfile::LaunchFile& f, driver::Device& dev) {
  std::filesystem::create_directories(o.dump_dir);
  nlohmann::json ranks = nlohmann::json::array();
  const uint32_t cores = static_cast<uint32_t>(__builtin_popcountll(f.core_mask));
  for (uint32_t rank = 0; rank < cores; ++rank) {
    const uint32_t at = o.dump_at >= 0 ? static_cast<uint32_t>(o.dump_at) : end_of(f, rank);
    const LaunchReplay r = replay_launch(dev, f, Stop{rank, at});
    if (r.scratchpad.empty()) {
      throw std::runtime_error(
          fmt::format("core {} did not reach instruction {}{}", rank, at, r.error.empty() ? "" : ": " + r.error));
    }
    const std::string file = fmt::format("core{}.lx", rank);
    std::ofstream(std::filesystem::path(o.dump_dir) / file, std::ios::binary)
        .write(reinterpret_cast<const char*>(r.scratchpad.data()), static_cast<std::streamsize>(r.scratchpad.size()));
    ranks.push_back({{"rank", rank}, {"instruction", at}, {"registers", r.registers}, {"scratchpad", file}});
  }
  const nlohmann::json out = {{"kernel", f.kernel}, {"op", f.op}, {"cores", ranks}};
  std::ofstream(std::filesystem::path(o.dump_dir) / "dump.json") << out.dump(2) << "\n";
  fmt::print("spyre-sim: the scratchpads of {} core(s) of kernel '{}' in {}\n", cores, f.kernel, o.dump_dir);
  return 0;
}

// `launch FILE`: one captured launch (torch_spyre.debug.capture_launch) alone on the config the
// options make, with its trace (every instruction, unless output.trace_instructions is set false);
// exit 1 unless it leaves the captured output bit for bit.
int launch(const Options& o, std::chrono::steady_clock::time_point start) {
  const launchfile::LaunchFile f = launchfile::LaunchFile::load(o.capture);
  const sim::Config config = run_config(o, "", /*temp_stats=*/false);
  if (config.sim.mode == "timing") {
    throw std::runtime_error("launch compares the output's bytes, and sim.mode \"timing\" computes none");
  }
  sim::Simulator::configure(config);
  driver::Device& dev = open_device();
  if (!o.dump_dir.empty()) return dump_scratchpads(o, f, dev);
  const LaunchReplay r = replay_launch(dev, f);
  const sim::Reports written = sim::Simulator::instance().flush_reports();
  const bool same = r.error.empty() && r.differing_bytes == 0;
  const nlohmann::json summary = {
      {"kernel", f.kernel},
      {"op", f.op},
      {"file", o.capture},
      {"config_hash", config.hash()},
      {"error", r.error},
      {"cycles", r.cycles},
      {"bytes", r.bytes},
      {"differing_bytes", r.differing_bytes},
      {"identical", same},
      {"trace", written.trace_path},
      {"wall_seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}};
  if (o.json) {
    fmt::print("{}\n", summary.dump(2));
  } else {
    fmt::print("spyre-sim: launch of kernel '{}'{} from {}\n", f.kernel, f.op.empty() ? "" : " (" + f.op + ")",
               o.capture);
    fmt::print("  config      {}\n", config.hash());
    if (!r.error.empty()) {
      fmt::print("  failed      {}\n", r.error);
    } else {
      fmt::print("  cycles      {}\n", r.cycles);
      fmt::print("  output      {} of {} bytes in {} block(s) differ from the capture's{}\n", r.differing_bytes,
                 r.bytes, f.blocks.size(),
                 same ? ": identical" : fmt::format(" (first: block {} at byte {})", r.first_block, r.first_offset));
    }
    if (!written.trace_path.empty()) fmt::print("  trace       {}\n", written.trace_path);
  }
  std::fflush(stdout);
  return same ? 0 : 1;
}

// `spyre-sim model`: the model, its HuggingFace config and its compile need Python, so this
// replaces the process with spyre_arch.model_cli on the Python the backend was built with
// ($SPYRE_PYTHON overrides it), passing the common options this command line already took.
[[noreturn]] int run_model(const Options& o, const std::vector<std::string>& rest) {
  const char* chosen = std::getenv("SPYRE_PYTHON");
  const std::string python = chosen != nullptr && *chosen != '\0' ? chosen : SPYRE_PYTHON_EXECUTABLE;
  std::vector<std::string> args = {python, "-m", "spyre_arch.model_cli"};
  if (!o.config_file.empty()) args.insert(args.end(), {"--config", o.config_file});
  for (const std::string& s : o.sets) args.insert(args.end(), {"--set", s});
  if (!o.stats_path.empty()) args.insert(args.end(), {"--stats", o.stats_path});
  if (!o.trace_path.empty()) args.insert(args.end(), {"--trace", o.trace_path});
  if (o.json) args.emplace_back("--json");
  args.insert(args.end(), rest.begin(), rest.end());
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execv(python.c_str(), argv.data());
  fmt::print(stderr, "spyre-sim: model runs Python ({}), which cannot start: {} (set $SPYRE_PYTHON)\n", python,
             std::strerror(errno));
  std::exit(1);
}

int run(const CLI::App& app, const Options& o, const CLI::Option& check_flag,
        std::chrono::steady_clock::time_point start) {
  if (app.got_subcommand("replay")) return replay(o, start);
  if (app.got_subcommand("launch")) return launch(o, start);
  // As every program of the stack reads the environment (so that spyre-sweep can run this one),
  // with the command line on top.
  const sim::Config config = run_config(o);
  const bool timing = config.sim.mode == "timing";
  if (timing && check_flag.count() > 0 && o.check) {
    throw std::runtime_error("--check compares the result's values, and sim.mode \"timing\" computes none");
  }
  const std::string stats_path = o.stats_path.empty() ? env("SPYRE_STATS") : o.stats_path;
  sim::Simulator::configure(config);

  driver::Device& dev = open_device();
  BuildEnv build;
  build.target = compiler::Target(dev.info().card);  // as the PyTorch device's
  build.formats.fp16_dlfloat = dev.info().fp16_dlfloat;
  build.seed = o.seed;
  build.values = !timing;
  const hw::DType type = dtype_of(o.dtype);
  Kernel kernel;
  if (app.got_subcommand("gemm")) {
    kernel = make_gemm(build, o.m, o.k, o.n, type);
  } else if (app.got_subcommand("elementwise")) {
    kernel = make_elementwise(build, o.op, o.numel, type);
  } else if (app.got_subcommand("layernorm")) {
    kernel = make_layernorm(build, o.rows, o.cols, o.eps, type);
  } else if (app.got_subcommand("attention")) {
    kernel = make_attention(build, o.batch, o.heads, o.seq, o.dim, type);
  } else if (app.got_subcommand("instructions")) {
    kernel = make_instructions(build, o.count, o.cores);
  }
  std::string ktir_listing;
  if (app.got_subcommand("ktir")) kernel = make_ktir(build, o.ktir_file, o.ktir_function, &ktir_listing);
  if (o.listing) {  // the program the card would run, decoded; nothing runs
    if (!ktir_listing.empty()) {
      fmt::print("{}", ktir_listing);
    } else {
      fmt::print("; {}\n{}", kernel.program.name, compiler::listing(kernel.program.image, kernel.program.notes));
    }
    return 0;
  }

  std::unique_ptr<driver::Queue> queue;
  if (const driver::Status s = dev.create_queue(1024, &queue); !s.ok()) throw std::runtime_error(s.message());
  const RunResult result = run_kernel(dev, *queue, kernel, o.repeat, build.formats, !timing);
  queue.reset();

  const sim::Reports written = sim::Simulator::instance().flush_reports();
  const nlohmann::json stats = read_stats(written.stats_path);

  RunFacts facts;
  facts.kernel = &kernel;
  facts.run = &result;
  facts.config = &config;
  facts.card = &dev.info().card;
  facts.repeat = o.repeat;
  facts.stats = &stats;
  facts.stats_path = stats_path;
  facts.trace_path = written.trace_path;
  if (!kernel.golden && check_flag.count() > 0 && o.check) {
    throw std::runtime_error("--check: a KTIR kernel has no host golden model (torch_spyre.ktir checks against CPU)");
  }
  const bool check =
      kernel.golden && !timing && (check_flag.count() > 0 ? o.check : kernel.check_size <= kCheckByDefaultUpTo);
  if (check) {
    const Expected want = kernel.golden(kernel);
    facts.check = compare(kernel.buffers[want.buffer].values, want);
  } else {
    facts.check_skipped_why = timing                   ? "sim.mode \"timing\" computes no values"
                              : check_flag.count() > 0 ? "--no-check"
                              : !kernel.golden
                                  ? "a KTIR kernel has no host golden model"
                                  : fmt::format("{:.3g} above 2^27 (--check forces it)", kernel.check_size);
  }
  facts.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const nlohmann::json summary = make_summary(facts);
  fmt::print("{}", o.json ? summary.dump(2) + "\n" : format_summary(summary));
  std::fflush(stdout);
  if (facts.check && !facts.check->passed) {
    fmt::print(stderr, "spyre-sim: check failed: {} of {} elements of {} outside tolerance\n", facts.check->mismatches,
               facts.check->elements, kernel.title());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace spyre::simtool

namespace {

int run(int argc, char** argv) {
  using spyre::simtool::Options;
  const auto start = std::chrono::steady_clock::now();
  Options o;
  CLI::App app{
      "Runs a built-in kernel on the simulated Spyre card through the driver and prints its device time, rate, "
      "roofline, stalls and check. See docs/architect-guide.md.",
      "spyre-sim"};
  app.set_version_flag(
      "--version", fmt::format("spyre-sim {} (hardware interface v{})", SPYRE_VERSION, spyre::hw::kInterfaceVersion));
  app.require_subcommand(1, 1);
  app.fallthrough();  // the common options may also follow the subcommand
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return fmt::format("spyre-sim: {}\nRun 'spyre-sim --help' for the usage.\n", e.what());
  });
  app.add_option("--config", o.config_file,
                 "JSON hardware config: any subset of the keys of docs/architect-guide.md, over $SPYRE_CONFIG's")
      ->type_name("FILE");
  app.add_option("--set", o.sets, "override one config key, e.g. --set memory.bandwidth_gbps=102.4 (repeatable)")
      ->type_name("KEY=VALUE")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--stats", o.stats_path, "write the simulator's stats JSON to FILE (default: $SPYRE_STATS)")
      ->type_name("FILE");
  app.add_option("--trace", o.trace_path, "write a Perfetto / chrome://tracing trace to FILE (default: $SPYRE_TRACE)")
      ->type_name("FILE");
  app.add_option("--repeat", o.repeat, "launch the kernel N times")
      ->check(CLI::Range(1u, 1000000u))
      ->type_name("N")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed of the random inputs")->type_name("N")->capture_default_str();
  app.add_flag("--json", o.json, "print the summary as JSON");
  app.add_flag("--listing", o.listing,
               "print the kernel's program, one decoded instruction per line, instead of running it");
  CLI::Option* check_flag =
      app.add_flag("--check,!--no-check", o.check,
                   "compare the result with a host golden model (default: on when the problem size is at most 2^27)");

  CLI::App* gemm = app.add_subcommand("gemm", "C = A @ B, A: M x K, B: K x N (compiler::compile_matmul)");
  spyre::simtool::add_size(gemm, "--m", o.m, "rows of A and C");
  spyre::simtool::add_size(gemm, "--k", o.k, "columns of A, rows of B");
  spyre::simtool::add_size(gemm, "--n", o.n, "columns of B and C");
  spyre::simtool::add_dtype(gemm, o);

  CLI::App* ew = app.add_subcommand("elementwise", "out = op(a) or op(a, b): one pointwise op (compiler::compile)");
  ew->add_option("--op", o.op, "the function")
      ->check(CLI::IsMember(spyre::simtool::elementwise_ops()))
      ->capture_default_str();
  spyre::simtool::add_size(ew, "--numel", o.numel, "elements");
  spyre::simtool::add_dtype(ew, o);

  CLI::App* ln = app.add_subcommand("layernorm", "(x - mean) / sqrt(var + eps) over each row: reductions + pointwise");
  spyre::simtool::add_size(ln, "--rows", o.rows, "rows");
  spyre::simtool::add_size(ln, "--cols", o.cols, "elements normalised together");
  ln->add_option("--eps", o.eps, "added to the variance")->check(CLI::NonNegativeNumber)->capture_default_str();
  spyre::simtool::add_dtype(ln, o);

  CLI::App* at = app.add_subcommand("attention", "softmax(Q K^T / sqrt(D)) V over [batch, heads, seq, dim]");
  spyre::simtool::add_size(at, "--batch", o.batch, "batch");
  spyre::simtool::add_size(at, "--heads", o.heads, "heads");
  spyre::simtool::add_size(at, "--seq", o.seq, "sequence length (queries and keys)");
  spyre::simtool::add_size(at, "--dim", o.dim, "head dimension D");
  spyre::simtool::add_dtype(at, o);

  CLI::App* in = app.add_subcommand("instructions",
                                    "the simulator's cost per instruction: loops of tiny SFP adds on 16 fp32 elements");
  spyre::simtool::add_size(in, "--count", o.count, "instructions to run, over all cores");
  in->add_option("--cores", o.cores, "cores that run the loop")->check(CLI::Range(1u, 64u))->capture_default_str();

  CLI::App* kt =
      app.add_subcommand("ktir", "a KTIR kernel (MLIR text, docs/ktir.md) on seeded inputs sized by its views");
  kt->add_option("file", o.ktir_file, "the .mlir file")->required()->check(CLI::ExistingFile);
  kt->add_option("--function", o.ktir_function, "the function to run (default: the one with a grid)");

  CLI::App* rp = app.add_subcommand(
      "replay", "plays a capture ($SPYRE_CAPTURE of any run) on its config or, with --config/--set, another");
  rp->add_option("file", o.capture, "the capture file")->required()->check(CLI::ExistingFile);

  CLI::App* ln1 = app.add_subcommand(
      "launch", "replays one launch captured by torch_spyre.debug.capture_launch, alone, and checks its output");
  ln1->add_option("file", o.capture, "the launch capture file")->required()->check(CLI::ExistingFile);
  ln1->add_option("--dump-scratchpad", o.dump_dir,
                  "replay once per core, stopping each before its END (or --at), and write its registers and "
                  "scratchpad to DIR")
      ->type_name("DIR");
  ln1->add_option("--at", o.dump_at, "with --dump-scratchpad: the instruction (a listing line) to stop each core at")
      ->check(CLI::NonNegativeNumber);

  CLI::App* md = app.add_subcommand("model",
                                    "a HuggingFace LLM's prefill and decode on the card without its weights "
                                    "(spyre-sim model --help; runs Python: spyre_arch.model_cli)");
  md->prefix_command();  // everything after it is the Python command's, --help included
  md->set_help_flag();
  md->allow_extras();
  md->fallthrough(false);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (app.got_subcommand(md)) return spyre::simtool::run_model(o, md->remaining());

  try {
    return spyre::simtool::run(app, o, *check_flag, start);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "spyre-sim: {}\n", e.what());
    return 1;
  }
}

}  // namespace

// Whatever escapes (the command line's own setup included) ends the program with its message, not
// with std::terminate.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spyre-sim: %s\n", e.what());
    return 1;
  }
}
