// The device runtime (runtime.h), split by concept: this file holds the registry of devices, the
// one place driver statuses become exceptions, the runtime's construction, host waits, the current
// device and the fallback mode. runtime_memory.cpp: device memory, staging and pinned host memory;
// runtime_copies.cpp: copies; runtime_launch.cpp: programs and launches; runtime_streams.cpp:
// streams, graph capture and events. The parts with state of their own (staging buffers,
// timestamp slots, op labels, peer windows) are classes in runtime_parts.h, each with its lock;
// the program cache is program_cache.h.
#include "runtime.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>

#include <c10/util/Exception.h>
#include <cstdio>

#include "profiler.h"
#include "sanitizer.h"
#include "spyre/driver/driver.h"
#include "spyre/hw/commands.h"

namespace spyre::backend {

namespace {
std::mutex g_mu;
std::vector<DeviceRuntime*> g_runtimes;
thread_local int t_current = 0;

FallbackMode initial_mode() {
  const char* env = std::getenv("TORCH_SPYRE_CPU_FALLBACK");
  if (!env || !*env) return FallbackMode::kWarn;
  try {
    return parse_fallback_mode(env);
  } catch (const std::exception&) {
    std::fprintf(stderr, "torch_spyre: ignoring TORCH_SPYRE_CPU_FALLBACK='%s' (expected allow, warn or error)\n", env);
    return FallbackMode::kWarn;
  }
}
std::atomic<FallbackMode> g_mode{initial_mode()};
}  // namespace

namespace {
std::atomic<void (*)()> g_raise_interrupt{nullptr};
}  // namespace

void set_interrupt_raiser(void (*raise)()) {
  g_raise_interrupt.store(raise);
}

void check_status(const driver::Status& s, const char* where) {
  switch (s.code()) {
    case driver::StatusCode::kTimeout:
      TORCH_CHECK(false, s.message(), " (the wait timeout is torch_spyre.set_wait_timeout / TORCH_SPYRE_WAIT_TIMEOUT)");
    case driver::StatusCode::kInterrupted:
      if (auto raise = g_raise_interrupt.load()) raise();
      TORCH_CHECK(false, s.message());
    case driver::StatusCode::kOk:
      return;
    case driver::StatusCode::kOutOfMemory:
      TORCH_CHECK_WITH(OutOfMemoryError, false, s.message());
    case driver::StatusCode::kInvalidArgument:
      TORCH_CHECK_INDEX(false, s.message());
    case driver::StatusCode::kNotAvailable:
      TORCH_CHECK(false, "spyre: device not available: ", s.message());
    case driver::StatusCode::kDeviceError:
      TORCH_CHECK(false, s.message());
  }
  TORCH_CHECK(false, "spyre: unexpected driver status in ", where, ": ", s.message());
}

int DeviceRuntime::count() noexcept {
  try {
    return static_cast<int>(driver::Driver::instance().device_count());
  } catch (...) {
    return 0;
  }
}

bool DeviceRuntime::opened(int index) noexcept {
  std::lock_guard lock(g_mu);
  return index >= 0 && index < static_cast<int>(g_runtimes.size()) && g_runtimes[index] != nullptr;
}

void DeviceRuntime::check_index(int index) {
  const int n = count();
  TORCH_CHECK_INDEX(index >= 0 && index < n, "spyre: device index ", index, " is out of range (", n,
                    " spyre device(s) present; set sim.devices in $SPYRE_CONFIG for more)");
}

void DeviceRuntime::start() {
  TORCH_CHECK(!driver::Driver::forked_child(),
              "spyre: cannot use the device in a subprocess forked after it started; start subprocesses with "
              "multiprocessing's 'spawn' method");
  SPYRE_CHECK(driver::Driver::instance().transport_status());
}

DeviceRuntime& DeviceRuntime::get(int index) {
  start();
  driver::Driver& drv = driver::Driver::instance();
  check_index(index);
  const int n = static_cast<int>(drv.device_count());
  std::lock_guard lock(g_mu);
  if (g_runtimes.size() < static_cast<size_t>(n)) g_runtimes.resize(n, nullptr);
  if (!g_runtimes[index]) {
    driver::Device* dev = nullptr;
    SPYRE_CHECK(drv.device(static_cast<uint32_t>(index), &dev));
    g_runtimes[index] = new DeviceRuntime(index, dev);  // lives until process exit
  }
  return *g_runtimes[index];
}

// Programs kept per device: TORCH_SPYRE_PROGRAM_CACHE entries (default 4096), at most 512 MiB.
size_t program_cache_entries() {
  const char* env = std::getenv("TORCH_SPYRE_PROGRAM_CACHE");
  if (!env || !*env) return 4096;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(env, &end, 10);
  TORCH_CHECK_VALUE(end && *end == 0 && n >= 1,
                    "torch_spyre: TORCH_SPYRE_PROGRAM_CACHE must be a positive count, not '", env, "'");
  return static_cast<size_t>(n);
}

DeviceRuntime::DeviceRuntime(int index, driver::Device* device)
    : index_(index),
      device_(device),
      sanitize_checks_(sanitizer::checks()),
      num_streams_(static_cast<int>(device->info().num_queues)),
      // A third of the pool streams are high priority (at least one when there are pool streams).
      first_high_(num_streams_ - std::max(num_streams_ > 1 ? 1 : 0, (num_streams_ - 1) / 3)),
      streams_(num_streams_),
      programs_(program_cache_entries(), 512ull << 20) {
  TORCH_CHECK(num_streams_ >= 1, "spyre: device ", index, " has no hardware queues");
  queue(0);  // the default stream
  SPYRE_CHECK(timestamps_.map(*device_));
  const driver::DeviceInfo& info = device_->info();
  TORCH_CHECK(info.memory_base + info.memory_bytes <= uint64_t{1} << kDevicePointerShift, "spyre: device ", index,
              " has memory up to address ", info.memory_base + info.memory_bytes,
              "; data pointers address at most 1 TiB per device");
}

void DeviceRuntime::wait(driver::Queue& q, uint64_t seq) {
  const driver::Status s = q.wait(seq);
  if (s.ok()) {
    flush_prints(q);
    return;
  }
  // The host stopped waiting; the work goes on, and the queue keeps its state.
  if (s.code() == driver::StatusCode::kTimeout || s.code() == driver::StatusCode::kInterrupted) check_status(s, "wait");
  // Report the error once, with what failed and what it cost, and reset the queue so the device
  // stays usable.
  (void)q.synchronize();
  hw::Descriptor failed{};
  hw::Completion completion{};
  const bool known = q.failed_command(&failed, &completion);
  driver::SanitizerFinding finding;
  const std::string found = q.sanitizer_finding(&finding) ? sanitizer::describe(index_, finding) : std::string();
  const uint64_t skipped = q.not_executed();
  (void)q.reset();
  flush_prints(q);  // what the launches printed before the fault (the reset took the buffer off the card)
  forget_print_buffer(q);
  // The reset took the queue's sanitizer checks with it: its next launches get them again.
  if (const uint64_t checks = sanitize_checks_.load(); checks != 0) {
    uint64_t seq = 0;
    (void)q.sanitize(hw::SanitizeAction::kEnable, 0, 0, checks, &seq);
  }
  // A halted queue dropped its SIGNALs: raise its semaphore to every value handed out, so that
  // other streams waiting on its events are not held forever.
  {
    std::lock_guard lock(streams_mu_);
    for (Stream& st : streams_) {
      if (st.queue.get() != &q || st.signalled == 0) continue;
      uint64_t ignored = 0;
      (void)q.signal(st.semaphore, st.signalled, &ignored);
    }
  }
  const std::string culprit = (known ? failed_launch(failed, completion) : std::string()) + found;
  if (skipped == 0) check_status(driver::Status(s.code(), s.message() + culprit), "wait");
  check_status(driver::Status(s.code(), c10::str(s.message(), culprit, "; ", skipped,
                                                 " later command(s) on this device were not executed, so the "
                                                 "tensors they would have written hold undefined data")),
               "wait");
}

void DeviceRuntime::synchronize() {
  for (int64_t s = 0; s < num_streams_; ++s) {
    driver::Queue* q = nullptr;
    {
      std::lock_guard lock(streams_mu_);
      TORCH_CHECK(!streams_[s].capture, "spyre: cannot synchronize device ", index_, " while a graph captures stream ",
                  s);
      q = streams_[s].queue.get();
    }
    if (q) wait(*q, q->last_seq());
  }
}

void DeviceRuntime::drain() noexcept {
  std::vector<driver::Queue*> queues;
  {
    std::lock_guard lock(streams_mu_);
    for (Stream& s : streams_) {
      if (s.queue) queues.push_back(s.queue.get());
    }
  }
  for (driver::Queue* q : queues) (void)q->synchronize();
}

int current_device() {
  return t_current;
}
void set_current_device(int index) {
  t_current = index;
}

FallbackMode fallback_mode() {
  return g_mode.load();
}
void set_fallback_mode(FallbackMode m) {
  g_mode.store(m);
}

FallbackMode parse_fallback_mode(const std::string& s) {
  if (s == "allow") return FallbackMode::kAllow;
  if (s == "warn") return FallbackMode::kWarn;
  if (s == "error") return FallbackMode::kError;
  TORCH_CHECK_VALUE(false, "torch_spyre: CPU fallback mode must be 'allow', 'warn' or 'error', not '", s, "'");
}

}  // namespace spyre::backend
