#include "spyre/sim/simulator.h"

#include "sfp.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "capture.h"
#include "card.h"
#include "spyre/common/log.h"

namespace spyre::sim {
namespace {

// How long each side spins before parking: a round trip costs ~1.4 us spinning, ~90 us parked.
constexpr auto kSpin = std::chrono::microseconds(50);
// Host pacing: how long work may wait for a host that does not wait for it (see hold()).
constexpr auto kHoldLimit = std::chrono::milliseconds(200);

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
    call([&] {
      if (capture_ && link) {  // the card's DMA and interrupts pass through a recorder
        recording_[card] = std::make_unique<RecordingLink>(card, link, *capture_);
        link = recording_[card].get();
      }
      cards_[card]->endpoint().attach(link);
    });
  }

  uint32_t cfg_read(uint32_t card, uint32_t offset, uint32_t size) override {
    check(card);
    uint32_t v = 0;
    call([&] { v = cards_[card]->endpoint().cfg_read(offset, size); });
    return v;
  }

  void cfg_write(uint32_t card, uint32_t offset, uint32_t size, uint32_t value) override {
    check(card);
    CaptureEvent e;
    e.kind = CaptureEvent::Kind::kCfgWrite;
    e.card = card;
    e.addr = offset;
    e.size = size;
    e.value = value;
    call([=, this] { host_write(e); });
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
    CaptureEvent e;
    e.kind = CaptureEvent::Kind::kMmioWrite;
    e.card = card;
    e.addr = offset;
    e.value = value;
    post([=, this] { host_write(e); }, Wake::kUnlessHeld);
  }

  uint64_t wait_begin(uint32_t card, uint32_t queue, uint64_t seq) override {
    if (!config_.sim.host_paced) return 0;
    check(card);
    const uint64_t token = next_token_.fetch_add(1) + 1;
    post([=, this] {
      Waiter w{token, card, queue, seq, false};
      waiters_.push_back(w);
      free_run_ = false;  // a wait puts the host back in charge of time
      met(waiters_.back());
    });
    return token;
  }

  void note_poll() override {
    if (!config_.sim.host_paced || polled_.load(std::memory_order_relaxed)) return;
    {
      std::lock_guard lock(mu_);  // so that hold() cannot miss it between its check and its sleep
      polled_.store(true, std::memory_order_relaxed);
    }
    cv_.notify_one();
  }

  void wait_end(uint64_t token, bool ended_by_card) override {
    if (token == 0) return;
    {
      // The interrupt that finished the wait holds the card still: wait for it, so that what the
      // host does next lands when it came. A second bounds it, should none come (a queue reset).
      // A host that gave up (a timeout, Ctrl-C) goes on at once, at whatever time the card has
      // reached: from there on the run's timing depends on the wall clock.
      std::unique_lock lock(mu_);
      if (ended_by_card) {
        reply_cv_.wait_for(lock, std::chrono::seconds(1), [&] { return met_.count(token) > 0 || stopped_; });
      }
      met_.erase(token);
    }
    post([=, this] {
      waiters_.erase(
          std::remove_if(waiters_.begin(), waiters_.end(), [&](const Waiter& w) { return w.token == token; }),
          waiters_.end());
    });
  }

  ReplayResult replay(const Capture& capture) override {
    ReplayResult result;
    bool finished = false;
    std::string error;
    post([&] {
      try {
        replay_ = std::make_unique<ReplayHost>(capture, static_cast<uint32_t>(cards_.size()),
                                               [this](const CaptureEvent& e) { host_write(e); });
        for (uint32_t i = 0; i < cards_.size(); ++i) {
          cards_[i]->endpoint().attach(replay_->link(i));
          cards_[i]->set_index_tape(replay_->tape(i));
        }
      } catch (const std::exception& ex) {
        error = ex.what();
        replay_.reset();
      }
      replay_done_ = [&] {
        result = replay_->result();
        const Clock clock(config_.chip.clock_mhz);
        result.cycles.assign(cards_.size(), clock.now_cycles());
        for (uint32_t i = 0; i < cards_.size(); ++i) {
          cards_[i]->endpoint().attach(nullptr);
          cards_[i]->set_index_tape(i < tapes_.size() ? tapes_[i].get() : nullptr);
        }
        replay_.reset();
        std::lock_guard lock(mu_);
        finished = true;
        reply_cv_.notify_all();
      };
      if (!replay_) replay_done_();
    });
    std::unique_lock lock(mu_);
    reply_cv_.wait(lock, [&] { return finished || stopped_; });
    if (!error.empty()) throw std::runtime_error(error);
    return result;
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

  // Whether a task wakes a simulator thread that host pacing holds still. A host write need not:
  // held, the model does nothing with it until a host thread waits or reads, and those tasks wake
  // it and run after every write queued before them. Not waking it saves a thread hand-over per
  // doorbell, which costs more than a small command's simulation.
  enum class Wake { kAlways, kUnlessHeld };

  // Queues `fn` for the simulator thread and returns at once; tasks run in order.
  // False (and `fn` dropped) once the simulator thread has stopped.
  bool post(std::function<void()> fn, Wake wake = Wake::kAlways) {
    bool notify = true;
    {
      std::lock_guard lock(mu_);
      if (stopped_) return false;
      tasks_.push_back(std::move(fn));
      has_tasks_.store(true, std::memory_order_release);
      if (wake == Wake::kAlways) {
        ++waking_tasks_;
      } else {
        notify = !parked_in_hold_;
      }
    }
    if (notify) cv_.notify_one();
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
      waking_tasks_ = 0;
    }
    for (auto& t : batch) t();
  }

  // Host pacing: the waits of host threads, each until a queue completes a descriptor.
  struct Waiter {
    uint64_t token;
    uint32_t card, queue;
    uint64_t seq;
    bool met;
  };
  // Marks `w` met if its queue has completed its descriptor or halted; tells its host thread.
  bool met(Waiter& w) {
    if (w.met) return true;
    const Endpoint& e = cards_[w.card]->endpoint();
    if (e.completed(w.queue) < w.seq && !e.halted(w.queue)) return false;
    w.met = true;
    {
      std::lock_guard lock(mu_);
      met_.insert(w.token);
    }
    reply_cv_.notify_all();
    return true;
  }
  bool waiting() const {
    return std::any_of(waiters_.begin(), waiters_.end(), [](const Waiter& w) { return !w.met; });
  }
  // After an interrupt of `card`: the waits it finished are met, and once none is left unmet the
  // model pauses right here, where the host will act next.
  void msix(uint32_t card) {
    if (waiters_.empty()) return;
    for (Waiter& w : waiters_) {
      if (w.card == card) met(w);
    }
    if (!waiting() && sc_core::sc_get_status() == sc_core::SC_RUNNING) sc_core::sc_pause();
  }

  // A write from the host (or a replay standing in for it), recorded when capturing.
  void host_write(const CaptureEvent& e) {
    if (capture_) {
      CaptureEvent at = e;
      at.time_ps = sc_core::sc_time_stamp().value();
      capture_->write(at);
    }
    if (e.kind == CaptureEvent::Kind::kCfgWrite) {
      cards_[e.card]->endpoint().cfg_write(static_cast<uint32_t>(e.addr), static_cast<uint32_t>(e.size),
                                           static_cast<uint32_t>(e.value));
    } else {
      uint32_t v = static_cast<uint32_t>(e.value);
      cards_[e.card]->mmio(true, static_cast<uint32_t>(e.addr), v);
    }
  }

  // Closes the capture with each card's cycle counter: a replay on this config must end there.
  void close_capture() {
    if (!capture_) return;
    const Clock clock(config_.chip.clock_mhz);
    for (uint32_t i = 0; i < cards_.size(); ++i) {
      CaptureEvent e;
      e.kind = CaptureEvent::Kind::kEnd;
      e.card = i;
      e.time_ps = sc_core::sc_time_stamp().value();
      e.value = clock.now_cycles();
      capture_->write(e);
    }
    for (auto& c : cards_) c->set_index_tape(nullptr);
    tapes_.clear();
    capture_.reset();
    log("sim").info("capture written to {}", config_.output.capture_path);
  }

  std::string stats_summary() override {
    std::string text, error;
    call([&] {
      try {
        nlohmann::json document = stats_now();
        document.erase("config");
        text = document.dump();
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
    if (!error.empty()) throw std::runtime_error(error);
    return text;
  }

  std::vector<const CardStats*> card_stats() const {
    std::vector<const CardStats*> stats;
    stats.reserve(cards_.size());
    for (const auto& c : cards_) stats.push_back(&c->stats());
    return stats;
  }

  nlohmann::json stats_now() const {
    const std::vector<uint64_t> cycles(cards_.size(), Clock(config_.chip.clock_mhz).now_cycles());
    return stats_document(config_, card_stats(), cycles, server_->stats(), trace_->dropped());
  }

  Reports write_reports() {
    Reports r;
    if (!config_.output.trace_path.empty()) {
      trace_->write(config_.output.trace_path);
      r.trace_path = config_.output.trace_path;
      log("sim").info("trace written to {}", r.trace_path);
    }
    if (!config_.output.stats_path.empty()) {
      write_stats(config_.output.stats_path, stats_now(), card_stats());
      r.stats_path = config_.output.stats_path;
      log("sim").info("stats written to {}", r.stats_path);
    }
    return r;
  }

  void main() {
    try {
      trace_ = std::make_unique<Trace>(config_);
      server_ = std::make_unique<Server>(config_);
      for (uint32_t i = 0; i < config_.sim.devices; ++i) {
        cards_.push_back(std::make_unique<Card>(fmt::format("card{}", i).c_str(), i, config_, *trace_, *server_));
      }
      if (!config_.output.capture_path.empty()) {
        capture_ = std::make_unique<CaptureWriter>(config_.output.capture_path, config_.without_paths().to_json());
        recording_.resize(config_.sim.devices);
        for (uint32_t i = 0; i < cards_.size(); ++i) {
          tapes_.push_back(std::make_unique<RecordingTape>(i, *capture_));
          cards_[i]->set_index_tape(tapes_.back().get());
        }
      }
      for (uint32_t i = 0; i < cards_.size(); ++i) cards_[i]->endpoint().on_msix([this, i] { msix(i); });
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
      // A replay's next host write, which the model must not run past.
      uint64_t next_write = UINT64_MAX;
      if (replay_) {
        try {
          next_write = replay_->step(sc_core::sc_time_stamp().value());
        } catch (const std::exception& e) {
          fail(e.what());
        }
        if (!fatal_.empty() || (next_write == UINT64_MAX && !sc_core::sc_pending_activity())) {
          replay_done_();  // every write applied and the cards idle, or waiting for what never comes
          continue;
        }
      }
      if (config_.sim.host_paced && !replay_ && !free_run_ && !waiting()) {
        hold();  // no host thread waits: simulated time stands still until one does
        continue;
      }
      holding_ = false;
      const bool active = sc_core::sc_pending_activity();
      if (fatal_.empty() && (active || next_write != UINT64_MAX)) {
        // Host requests are looked at between quanta; an idle device stops at its last event,
        // so simulated time never advances while waiting for the host.
        // Run at least to the next event, which may lie beyond one quantum.
        sc_core::sc_time run = quantum;
        if (active) run = std::max(run, sc_core::sc_time_to_pending_activity());
        // Stopping short of the next event needs kRunToTime: a run that ends on starvation stays at
        // the last event instead of reaching the host's write.
        bool to_time = !active;
        if (next_write != UINT64_MAX) {
          const auto until = sc_core::sc_time::from_value(next_write - sc_core::sc_time_stamp().value());
          if (until < run) {
            run = until;
            to_time = true;
          }
        }
        simulating_.store(true, std::memory_order_relaxed);
        try {
          sc_core::sc_start(run, to_time ? sc_core::SC_RUN_TO_TIME : sc_core::SC_EXIT_ON_STARVATION);
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
      close_capture();
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

  // Host pacing with no host thread waiting: the model stands still, not even finishing this
  // instant's delta cycles, so that everything the host does until it waits again reaches the
  // model at once, in the host's order, however its writes were batched. A host that polls without
  // ever waiting would stall the card for good: after kHoldLimit of polls, time runs free until the
  // host waits again.
  void hold() {
    const auto now = std::chrono::steady_clock::now();
    if (!holding_) {
      holding_ = true;
      held_since_ = now;
      polled_.store(false, std::memory_order_relaxed);
    }
    const bool polled = polled_.load(std::memory_order_relaxed);
    if (polled && now - held_since_ >= kHoldLimit && sc_core::sc_pending_activity()) {
      holding_ = false;
      free_run_ = true;
      log("sim").warn(
          "host-paced: the host polled for {} ms without waiting; simulated time runs free until it waits "
          "(this run's cycles may now depend on the host's speed)",
          std::chrono::duration_cast<std::chrono::milliseconds>(kHoldLimit).count());
      return;
    }
    std::unique_lock lock(mu_);
    parked_in_hold_ = true;
    if (polled) {
      cv_.wait_until(lock, held_since_ + kHoldLimit, [&] { return waking_tasks_ > 0; });
    } else {
      cv_.wait(lock, [&] { return waking_tasks_ > 0 || polled_.load(std::memory_order_relaxed); });
    }
    parked_in_hold_ = false;
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
  size_t waking_tasks_ = 0;      // under mu_: tasks_ posted with Wake::kAlways
  bool parked_in_hold_ = false;  // under mu_: the simulator thread sleeps in hold()
  bool ready_ = false;
  bool quit_ = false;
  bool stopped_ = false;
  std::string fatal_;  // set when the model failed; owned by the simulator thread
  std::string init_error_;
  // Owned by the simulator thread.
  std::unique_ptr<Trace> trace_;
  std::unique_ptr<Server> server_;  // outlives the cards, which share it

  std::vector<std::unique_ptr<Card>> cards_;
  std::unique_ptr<CaptureWriter> capture_;                 // when output.capture_path is set
  std::vector<std::unique_ptr<RecordingLink>> recording_;  // per card, while attached
  std::vector<std::unique_ptr<RecordingTape>> tapes_;      // per card, while capturing
  std::unique_ptr<ReplayHost> replay_;                     // while replay() runs
  std::vector<Waiter> waiters_;                            // host pacing: the host's unfinished waits
  bool free_run_ = false;                                  // host pacing suspended (see hold())
  bool holding_ = false;                                   // hold() since held_since_, no wait between
  std::chrono::steady_clock::time_point held_since_;
  std::atomic<uint64_t> next_token_{0};
  std::atomic<bool> polled_{false};  // a host thread polled since the hold began
  std::set<uint64_t> met_;           // under mu_: tokens whose wait is met
  std::function<void()> replay_done_;
};

SimulatorImpl* g_sim = nullptr;

// The config given to Simulator::configure(), and whether instance() has taken its config yet.
std::mutex g_config_mu;
std::unique_ptr<Config> g_config;
bool g_config_taken = false;

// The config of the process's simulator: configure()'s if it was called, else the environment's.
Config take_config() {
  {
    std::lock_guard lock(g_config_mu);
    g_config_taken = true;
    if (g_config) return *g_config;
  }
  return load_config_from_env();
}

}  // namespace

void Simulator::configure(const Config& config) {
  // The round trip through the parser validates every value, with the parser's messages.
  Config checked = parse_config(config.to_json());
  std::lock_guard lock(g_config_mu);
  if (g_config_taken) {
    throw std::logic_error(
        "simulator: configure() called after the simulator was started; call it before the first device is opened");
  }
  g_config = std::make_unique<Config>(std::move(checked));
}

Simulator& Simulator::instance() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    try {
      g_sim = new SimulatorImpl(take_config());  // lives until process exit
      std::atexit([] { g_sim->shutdown(); });
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!g_sim) throw std::invalid_argument(error);
  return *g_sim;
}

}  // namespace spyre::sim
