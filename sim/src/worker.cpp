#include "worker.h"

#include <chrono>
#include <utility>

namespace spyre::sim {
namespace {
// How long the idle worker polls for a task before it sleeps: tasks are microseconds long and
// come in bursts, and a wake-up costs about as much as one.
constexpr auto kSpin = std::chrono::microseconds(100);
// A sleeping worker is woken once this many tasks wait: a launch of a task or two (a tiny op) is
// cheaper run by the SystemC thread when it needs the result than a wake-up.
constexpr uint32_t kWakeAt = 4;
// How long a waiter polls for the worker to finish the task it needs before it sleeps.
constexpr auto kWaitSpin = std::chrono::milliseconds(1);

// Polls `changed` (lock not held) until it is true or `spin` has passed.
template <typename Changed>
void poll(std::chrono::microseconds spin, Changed changed) {
  const auto until = std::chrono::steady_clock::now() + spin;
  while (!changed() && std::chrono::steady_clock::now() < until) {
  }
}
}  // namespace

Worker::Worker(bool threaded) : threaded_(threaded) {
  if (threaded_) thread_ = std::thread([this] { loop(); });
}

Worker::~Worker() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

uint32_t Worker::lane() {
  std::lock_guard lock(mu_);
  lanes_.emplace_back();
  return static_cast<uint32_t>(lanes_.size() - 1);
}

void Worker::run_front(Lane& l, std::unique_lock<std::mutex>& lock) {
  std::function<void()> fn = std::move(l.tasks.front().fn);
  l.tasks.pop_front();
  if (queued_ > 0) --queued_;
  l.running = true;
  lock.unlock();
  std::exception_ptr failed;
  try {
    fn();
  } catch (...) {
    failed = std::current_exception();
  }
  lock.lock();
  if (failed && !error_) error_ = failed;
  l.running = false;
  l.done.fetch_add(1, std::memory_order_release);
}

uint64_t Worker::post(uint32_t lane, std::function<void()> task, bool small) {
  std::unique_lock lock(mu_);
  Lane& l = lanes_[lane];
  const uint64_t ticket = ++l.posted;
  const bool inline_now = !threaded_ || (small && l.tasks.empty() && !l.running);
  l.tasks.push_back({order_++, std::move(task)});
  posted_.store(order_, std::memory_order_release);
  if (inline_now) {
    run_front(l, lock);
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  } else if (idle_ && ++queued_ >= kWakeAt) {
    idle_ = false;
    work_cv_.notify_one();
  }
  return ticket;
}

uint64_t Worker::done(uint32_t lane) {
  // Lanes are made before any task is posted, so the deque does not change under this read.
  return lanes_[lane].done.load(std::memory_order_acquire);
}

void Worker::note_device_read(uint32_t lane, uint64_t ticket, uint64_t lo, uint64_t hi) {
  if (ticket > done(lane)) device_reads_.push_back({lane, ticket, lo, hi});
}

void Worker::settle_device_write(uint64_t lo, uint64_t hi) {
  if (device_reads_.empty()) return;
  size_t kept = 0;
  for (const DeviceRead& r : device_reads_) {
    if (r.lo < hi && lo < r.hi) wait(r.lane, r.ticket);
    if (r.ticket > done(r.lane)) device_reads_[kept++] = r;
  }
  device_reads_.resize(kept);
}

void Worker::wait(uint32_t lane, uint64_t ticket) {
  std::unique_lock lock(mu_);
  Lane& l = lanes_[lane];
  while (l.done.load(std::memory_order_relaxed) < ticket) {
    if (!l.running) {
      run_front(l, lock);  // the worker is elsewhere: run the lane's next task here
      continue;
    }
    // The worker runs this lane's task: run another lane's meanwhile, or poll before sleeping.
    if (Lane* other = oldest()) {
      run_front(*other, lock);
      continue;
    }
    const uint64_t seen = l.done.load(std::memory_order_relaxed);
    lock.unlock();
    poll(kWaitSpin, [&] { return l.done.load(std::memory_order_acquire) != seen; });
    lock.lock();
    if (l.done.load(std::memory_order_relaxed) == seen) {
      ++sleepers_;
      done_cv_.wait(lock, [&] { return l.done.load(std::memory_order_relaxed) != seen; });
      --sleepers_;
    }
  }
  if (idle_ && queued_ >= kWakeAt) {  // the worker slept while this lane was being run here
    idle_ = false;
    work_cv_.notify_one();
  }
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

Worker::Lane* Worker::oldest() {
  Lane* next = nullptr;
  for (Lane& l : lanes_) {
    if (!l.running && !l.tasks.empty() && (!next || l.tasks.front().order < next->tasks.front().order)) next = &l;
  }
  return next;
}

void Worker::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (Lane* next = oldest()) {
      run_front(*next, lock);
      if (sleepers_ > 0) done_cv_.notify_all();
      continue;
    }
    if (quit_) return;
    // Nothing to run (or only lanes a waiter is running): poll briefly for a post, then sleep.
    const uint64_t seen = order_;
    lock.unlock();
    poll(kSpin, [&] { return posted_.load(std::memory_order_acquire) != seen; });
    lock.lock();
    if (order_ == seen && !quit_) {
      idle_ = true;
      queued_ = 0;  // counts the posts while it sleeps
      work_cv_.wait(lock, [&] { return !idle_ || quit_; });
    }
  }
}

}  // namespace spyre::sim
