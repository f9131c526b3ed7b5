// The arithmetic of compute instructions, run beside the SystemC thread. A core's timing never
// depends on the values it computes, so the SystemC thread books an instruction's time at once and
// posts its arithmetic (a tile matmul, an SFP pass) to the core's lane here. A worker thread runs
// the lanes' tasks ahead, oldest first; each lane's tasks run one at a time in the order posted.
// When the SystemC thread is about to read or overwrite bytes a posted task touches (Core::settle),
// it waits for that task, running the lane's tasks itself rather than sleeping. A task touches only
// its own core's scratchpad (a deferred LOAD also reads device memory, which nothing writes before
// the load has run: settle_device_write), so the results are the same as with everything done
// inline: only the host thread it runs on changes. `sim.async_compute` false runs every task
// inline at post.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace spyre::sim {

class Worker {
 public:
  explicit Worker(bool threaded);
  ~Worker();  // runs what was posted, then stops
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  /// A new lane (one per core, before any task is posted); lanes live as long as the worker.
  uint32_t lane();
  /// Queues `task` on `lane`; its ticket (each lane's tickets count up from 1). A `small` task
  /// runs at once on the calling thread when its lane has nothing queued: handing it to the worker
  /// would cost more than running it.
  uint64_t post(uint32_t lane, std::function<void()> task, bool small = false);
  /// Returns once task `ticket` of `lane` and the lane's tasks before it have run, running them on
  /// the calling thread when the worker is not at them. Rethrows what a task threw.
  void wait(uint32_t lane, uint64_t ticket);
  /// Every task of `lane` up to this ticket has run.
  uint64_t done(uint32_t lane);

  /// Task `ticket` of `lane` reads device memory [lo, hi) when it runs (a deferred LOAD).
  void note_device_read(uint32_t lane, uint64_t ticket, uint64_t lo, uint64_t hi);
  /// Before device memory [lo, hi) is written: waits for the posted tasks that read it.
  void settle_device_write(uint64_t lo, uint64_t hi);

 private:
  struct Task {
    uint64_t order;  // across lanes: the worker runs the oldest first
    std::function<void()> fn;
  };
  struct Lane {
    std::deque<Task> tasks;
    uint64_t posted = 0;
    std::atomic<uint64_t> done{0};  // written under mu_, polled without it
    bool running = false;           // one of its tasks is running now
  };
  void loop();
  /// The lane whose front task is the oldest of those no one is running; nullptr if none.
  Lane* oldest();
  /// Takes the front task of `l` (lock held), runs it unlocked, counts it done.
  void run_front(Lane& l, std::unique_lock<std::mutex>& lock);

  const bool threaded_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // the worker sleeps here when no lane has a task
  std::condition_variable done_cv_;  // a waiter sleeps here while the worker runs its lane
  std::deque<Lane> lanes_;
  uint64_t order_ = 0;
  std::atomic<uint64_t> posted_{0};  // order_, for the idle worker to poll
  bool idle_ = false;                // the worker sleeps on work_cv_
  uint32_t queued_ = 0;              // tasks posted while it sleeps, not yet taken
  uint32_t sleepers_ = 0;            // waiters asleep on done_cv_
  std::exception_ptr error_;         // the first task that threw
  bool quit_ = false;
  std::thread thread_;
  struct DeviceRead {
    uint32_t lane;
    uint64_t ticket, lo, hi;
  };
  std::vector<DeviceRead> device_reads_;  // the posting (SystemC) thread's alone
};

}  // namespace spyre::sim
