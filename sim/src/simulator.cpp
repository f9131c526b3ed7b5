#include "spyre/sim/simulator.h"

#include "sfp.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "card.h"
#include "spyre/common/log.h"

namespace spyre::sim {
namespace {

// How long each side spins before parking: a round trip costs ~1.4 us spinning, ~90 us parked.
constexpr auto kSpin = std::chrono::microseconds(50);

class SimulatorImpl final : public Simulator {
 public:
  explicit SimulatorImpl(Config config) : config_(std::move(config)) {
    set_fp16_dlfloat(config_.chip.fp16_format == "dlfloat16");
    thread_ = std::thread([this] { main(); });
    std::unique_lock lock(mu_);
    reply_cv_.wait(lock, [&] { return ready_; });
    if (!init_error_.empty()) {
      lock.unlock();
      thread_.join();
      throw std::runtime_error(init_error_);
    }
  }

  const Config& config() const override { return config_; }
  uint32_t num_cards() const override { return config_.sim.devices; }

  void attach(uint32_t card, HostLink* link) override {
    check(card);
    call([&] { cards_[card]->endpoint().attach(link); });
  }

  uint32_t cfg_read(uint32_t card, uint32_t offset, uint32_t size) override {
    check(card);
    uint32_t v = 0;
    call([&] { v = cards_[card]->endpoint().cfg_read(offset, size); });
    return v;
  }

  void cfg_write(uint32_t card, uint32_t offset, uint32_t size, uint32_t value) override {
    check(card);
    call([=] { cards_[card]->endpoint().cfg_write(offset, size, value); });
  }

  uint32_t mmio_read(uint32_t card, uint32_t offset) override {
    check(card);
    uint32_t v = 0xffffffffu;
    call([&] {
      if (!cards_[card]->mmio(false, offset, v)) v = 0xffffffffu;
    });
    return v;
  }

  void mmio_write(uint32_t card, uint32_t offset, uint32_t value) override {
    check(card);
    post([=, this] {
      uint32_t v = value;
      cards_[card]->mmio(true, offset, v);
    });
  }

  bool peer_read(uint32_t card, uint64_t offset, void* dst, uint64_t n) override {
    DeviceMemory* m = peer_window(card, offset, n);
    if (m) m->read(offset, dst, n);
    return m != nullptr;
  }

  bool peer_write(uint32_t card, uint64_t offset, const void* src, uint64_t n) override {
    DeviceMemory* m = peer_window(card, offset, n);
    if (m) m->write(offset, src, n);
    return m != nullptr;
  }

  Reports flush_reports() override {
    Reports r;
    std::string error;
    call([&] {
      try {
        r = write_reports();
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    if (!error.empty()) throw std::runtime_error(error);
    return r;
  }

  void shutdown() override {
    if (!thread_.joinable()) return;
    post([this] { quit_ = true; });
    thread_.join();
  }

 private:
  void check(uint32_t card) const {
    if (card >= config_.sim.devices) {
      throw std::out_of_range(fmt::format("simulator: no card {} ({} configured)", card, config_.sim.devices));
    }
  }

  // Queues `fn` for the simulator thread and returns at once; tasks run in order.
  // False (and `fn` dropped) once the simulator thread has stopped.
  bool post(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return false;
      tasks_.push_back(std::move(fn));
      has_tasks_.store(true, std::memory_order_release);
    }
    cv_.notify_one();
    return true;
  }

  // Runs `fn` on the simulator thread and waits for it: spin briefly, then park.
  void call(const std::function<void()>& fn) {
    std::atomic<bool> done{false};
    const bool posted = post([&] {
      fn();
      {
        std::lock_guard lock(mu_);
        done.store(true, std::memory_order_release);
      }
      reply_cv_.notify_all();
    });
    if (!posted) return;  // after shutdown: reads see the defaults, like a card that went away
    // An idle simulator thread answers within microseconds: poll. A simulating one answers after
    // its quantum, and polling would take a host core from it (or from its worker): sleep.
    const auto until = std::chrono::steady_clock::now() + kSpin;
    while (!simulating_.load(std::memory_order_relaxed) && !done.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < until) {
    }
    std::unique_lock lock(mu_);
    reply_cv_.wait(lock, [&] { return done.load(std::memory_order_acquire); });
  }

  void run_tasks() {
    std::deque<std::function<void()>> batch;
    {
      std::lock_guard lock(mu_);
      batch.swap(tasks_);
      has_tasks_.store(false, std::memory_order_relaxed);
    }
    for (auto& t : batch) t();
  }

  Reports write_reports() {
    Reports r;
    if (!config_.output.trace_path.empty()) {
      trace_->write(config_.output.trace_path);
      r.trace_path = config_.output.trace_path;
      log("sim").info("trace written to {}", r.trace_path);
    }
    if (!config_.output.stats_path.empty()) {
      std::vector<const CardStats*> stats;
      std::vector<uint64_t> cycles;
      const Clock clock(config_.chip.clock_mhz);
      for (const auto& c : cards_) {
        stats.push_back(&c->stats());
        cycles.push_back(clock.now_cycles());
      }
      write_stats(config_.output.stats_path, config_, stats, cycles, trace_->dropped());
      r.stats_path = config_.output.stats_path;
      log("sim").info("stats written to {}", r.stats_path);
    }
    return r;
  }

  void main() {
    try {
      trace_ = std::make_unique<Trace>(config_);
      for (uint32_t i = 0; i < config_.sim.devices; ++i) {
        cards_.push_back(std::make_unique<Card>(fmt::format("card{}", i).c_str(), i, config_, *trace_));
      }
      sc_core::sc_start(sc_core::SC_ZERO_TIME);  // elaborate and start the firmware
      log("sim").info("{} card(s) of {} cores at {} MHz, config {}", config_.sim.devices, config_.chip.cores,
                      config_.chip.clock_mhz, config_.hash());
    } catch (const std::exception& e) {
      init_error_ = fmt::format("simulator: elaboration failed: {}", e.what());
    }
    {
      std::lock_guard lock(mu_);
      ready_ = true;
    }
    reply_cv_.notify_all();
    if (!init_error_.empty()) return;

    const sc_core::sc_time quantum(static_cast<double>(config_.sim.host_quantum_ns), sc_core::SC_NS);
    while (!quit_) {
      run_tasks();
      if (quit_) break;
      if (fatal_.empty() && sc_core::sc_pending_activity()) {
        // Host requests are looked at between quanta; an idle device stops at its last event,
        // so simulated time never advances while waiting for the host.
        // Run at least to the next event, which may lie beyond one quantum.
        const sc_core::sc_time next = sc_core::sc_time_to_pending_activity();
        simulating_.store(true, std::memory_order_relaxed);
        try {
          sc_core::sc_start(next > quantum ? next : quantum, sc_core::SC_EXIT_ON_STARVATION);
        } catch (const std::exception& e) {
          fail(e.what());
        }
        simulating_.store(false, std::memory_order_relaxed);
        continue;
      }
      const auto until = std::chrono::steady_clock::now() + kSpin;
      while (!has_tasks_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
      }
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !tasks_.empty(); });
    }
    try {
      write_reports();
    } catch (const std::exception& e) {
      log("sim").error("{}", e.what());
    }
    std::deque<std::function<void()>> late;
    {
      std::lock_guard lock(mu_);
      stopped_ = true;
      late.swap(tasks_);
    }
    for (auto& t : late) t();  // release callers that raced with the shutdown
  }

  // The model threw (a bug, or host memory exhausted): stop simulating, but keep answering the
  // host, and halt every queue so no waiter sleeps forever.
  void fail(const std::string& what) {
    fatal_ = what;
    log("sim").critical("fatal error, every card stopped and its queues are halted: {}", what);
    for (auto& c : cards_) c->endpoint().halt_all_queues(hw::ErrorCode::kCoreFault);
  }

  Config config_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;           // wakes the simulator thread
  std::condition_variable reply_cv_;     // wakes host threads waiting in call()
  std::atomic<bool> simulating_{false};  // the simulator thread is inside sc_start
  std::deque<std::function<void()>> tasks_;
  std::atomic<bool> has_tasks_{false};
  bool ready_ = false;
  bool quit_ = false;
  bool stopped_ = false;
  std::string fatal_;  // set when the model failed; owned by the simulator thread
  std::string init_error_;
  // Owned by the simulator thread.
  std::unique_ptr<Trace> trace_;
  // Card `card`'s memory if [offset, offset + n) lies inside it; nullptr otherwise.
  DeviceMemory* peer_window(uint32_t card, uint64_t offset, uint64_t n) {
    if (card >= cards_.size()) return nullptr;
    DeviceMemory& m = cards_[card]->memory();
    return offset <= m.size() && n <= m.size() - offset ? &m : nullptr;
  }

  std::vector<std::unique_ptr<Card>> cards_;
};

SimulatorImpl* g_sim = nullptr;

}  // namespace

Simulator& Simulator::instance() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    try {
      g_sim = new SimulatorImpl(load_config_from_env());  // lives until process exit
      std::atexit([] { g_sim->shutdown(); });
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!g_sim) throw std::invalid_argument(error);
  return *g_sim;
}

}  // namespace spyre::sim
