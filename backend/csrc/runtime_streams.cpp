// The device runtime's streams (a hardware queue each, from two priority pools), graph capture,
// events (timeline semaphores and timestamps) and the marks the caching allocator waits on.
#include "runtime.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include <c10/util/Exception.h>

#include "profiler.h"
#include "spyre/driver/driver.h"
#include "spyre/hw/commands.h"

namespace spyre::backend {

namespace {
constexpr uint32_t kQueueEntries = 1024;
}  // namespace

namespace {
// Each thread's current stream per device (absent: the default stream, 0).
thread_local std::map<int, int64_t> t_streams;
}  // namespace

int64_t DeviceRuntime::current_stream() const {
  const auto it = t_streams.find(index_);
  return it == t_streams.end() ? 0 : it->second;
}

void DeviceRuntime::set_current_stream(int64_t stream) {
  check_stream(stream);
  t_streams[index_] = stream;
}

void DeviceRuntime::check_stream(int64_t stream) const {
  TORCH_CHECK_INDEX(stream >= 0 && stream < num_streams_, "spyre: device ", index_, " has no stream ", stream, " (",
                    num_streams_, " hardware queues)");
}

bool DeviceRuntime::is_high_priority(int64_t stream) const {
  return stream >= first_high_;
}

int64_t DeviceRuntime::pool_stream(bool high_priority) {
  std::lock_guard lock(streams_mu_);
  if (high_priority && first_high_ < num_streams_) {
    return first_high_ + next_high_++ % (num_streams_ - first_high_);
  }
  if (first_high_ <= 1) return 0;  // a card with one queue: every stream is the default one
  return 1 + next_normal_++ % (first_high_ - 1);
}

driver::Queue& DeviceRuntime::queue(int64_t stream) {
  check_stream(stream);
  std::lock_guard lock(streams_mu_);
  Stream& st = streams_[stream];
  if (!st.queue) {
    const uint32_t priority = is_high_priority(stream) ? hw::kQPriorityHigh : hw::kQPriorityNormal;
    std::unique_ptr<driver::Queue> q;
    SPYRE_CHECK(device_->create_queue(kQueueEntries, &q, priority));
    // The stream's timeline semaphore starts at 0 (device memory may hold anything).
    uint64_t sem = 0;
    SPYRE_CHECK(device_->alloc(sizeof(uint64_t), &sem));
    std::unique_ptr<driver::HostBuffer> zero;
    SPYRE_CHECK(device_->map_host(sizeof(uint64_t), &zero));
    std::memset(zero->data(), 0, sizeof(uint64_t));
    uint64_t seq = 0;
    // The sanitizer's checks for this queue's launches (a queue starts with none: creating it
    // reset it, which the card's sanitizer takes as a new owner).
    if (const uint64_t checks = sanitize_checks_.load(); checks != 0) {
      SPYRE_CHECK(q->sanitize(hw::SanitizeAction::kEnable, 0, 0, checks, &seq));
    }
    SPYRE_CHECK(q->copy(zero->iova(), sem, sizeof(uint64_t), hw::kCopySrcHost, &seq));
    SPYRE_CHECK(q->wait(seq));
    st.semaphore = sem;
    profiling::watch(*q);
    st.queue = std::move(q);
  }
  return *st.queue;
}

void DeviceRuntime::begin_capture(int64_t stream, CaptureSink* sink) {
  queue(stream);
  std::lock_guard lock(streams_mu_);
  TORCH_CHECK(!streams_[stream].capture, "spyre: stream ", stream, " of device ", index_, " is already capturing");
  streams_[stream].capture = sink;
}

void DeviceRuntime::end_capture(int64_t stream) {
  check_stream(stream);
  {
    std::lock_guard lock(streams_mu_);
    streams_[stream].capture = nullptr;
  }
  // The captured launches' argument blocks and programs were uploaded on the stream: let them
  // land before any replay, on whatever stream, can read them.
  stream_synchronize(stream);
}

bool DeviceRuntime::capturing(int64_t stream) {
  check_stream(stream);
  std::lock_guard lock(streams_mu_);
  return streams_[stream].capture != nullptr;
}

void DeviceRuntime::submit(const std::vector<hw::Descriptor>& commands, const std::vector<std::string>& names) {
  check_not_capturing("a graph replay");
  driver::Queue& q = queue();
  for (size_t i = 0; i < commands.size(); ++i) {
    uint64_t seq = 0;
    SPYRE_CHECK(q.submit_raw(commands[i], &seq));
    profiling::note(index_, current_stream(), q, seq,
                    commands[i].opcode == hw::Opcode::kLaunch ? profiling::Kind::kKernel : profiling::Kind::kMemcpy,
                    names[i], commands[i].opcode == hw::Opcode::kCopy ? commands[i].copy.size : 0);
  }
}

void DeviceRuntime::set_sanitize_checks(uint64_t bits) {
  synchronize();
  std::vector<driver::Queue*> queues;
  {
    std::lock_guard lock(streams_mu_);
    sanitize_checks_ = bits;
    for (Stream& s : streams_) {
      if (s.queue) queues.push_back(s.queue.get());
    }
  }
  for (driver::Queue* q : queues) {
    uint64_t seq = 0;
    SPYRE_CHECK(q->sanitize(hw::SanitizeAction::kEnable, 0, 0, bits, &seq));
    wait(*q, seq);
  }
}

void DeviceRuntime::sanitize(int64_t stream, hw::SanitizeAction action, uint64_t base, uint64_t size, uint64_t tag) {
  uint64_t seq = 0;
  if (!capturing(stream)) {
    SPYRE_CHECK(queue(stream).sanitize(action, base, size, tag, &seq));
    return;
  }
  // A captured graph's memory is used when the graph replays, in an order the capture cannot
  // give: its allocations are named now, on an idle card, and its frees not at all (a graph's
  // temporaries live as long as the graph; the next allocation of the memory renames it).
  if (action == hw::SanitizeAction::kFree) return;
  drain();
  SPYRE_CHECK(queue(0).sanitize(action, base, size, tag, &seq));
  wait(queue(0), seq);
}

uint64_t DeviceRuntime::copy_program(const LoadedProgram& program) {
  const uint64_t mine = alloc_reclaiming(program.size);
  driver::Queue& q = queue();
  uint64_t seq = 0;
  SPYRE_CHECK(q.copy(program.addr, mine, program.size, 0, &seq));
  wait(q, seq);
  return mine;
}

CaptureSink* DeviceRuntime::capture_sink() {
  const int64_t stream = current_stream();
  std::lock_guard lock(streams_mu_);
  return streams_[stream].capture;
}

void DeviceRuntime::check_not_capturing(const char* what) {
  TORCH_CHECK(!capture_sink(), "spyre: ", what, " cannot be captured in a graph (stream ", current_stream(),
              " of device ", index_, " is capturing); do it before capture_begin or after capture_end");
}

bool DeviceRuntime::stream_query(int64_t stream) {
  driver::Queue& q = queue(stream);
  return q.is_complete(q.last_seq());
}

void DeviceRuntime::stream_synchronize(int64_t stream) {
  TORCH_CHECK(!capturing(stream), "spyre: cannot synchronize stream ", stream, " while a graph captures it");
  driver::Queue& q = queue(stream);
  wait(q, q.last_seq());
}

void DeviceRuntime::record_event(StreamEvent& ev, int64_t stream, bool timing) {
  driver::Queue& q = queue(stream);
  TORCH_CHECK(!capturing(stream), "spyre: events cannot be recorded on a stream while a graph captures it");
  if (ev.slot >= 0) release_event(ev);  // re-recorded: the old timestamp is of no more use
  ev.slot = -1;
  if (timing) {
    ev.slot = timestamps_.take();
    TORCH_CHECK(ev.slot >= 0, "spyre: more than ", TimestampSlots::kCount, " timed events are alive on device ", index_,
                "; destroy some, or create events without timing");
  }
  // One lock for the value and the submission, so that a stream's values reach the card in order.
  std::lock_guard lock(streams_mu_);
  Stream& st = streams_[stream];
  if (ev.slot >= 0) {
    uint64_t ts = 0;
    SPYRE_CHECK(q.timestamp(timestamps_.iova(ev.slot), &ts));
  }
  ev.device = index_;
  ev.stream = stream;
  ev.value = st.signalled + 1;
  SPYRE_CHECK(q.signal(st.semaphore, ev.value, &ev.seq));
  st.signalled = ev.value;  // only once queued: a value never signalled would hold its waiters
}

uint64_t DeviceRuntime::stream_semaphore(int64_t stream) {
  queue(stream);  // the semaphore exists
  std::lock_guard lock(streams_mu_);
  return streams_[stream].semaphore;
}

void DeviceRuntime::wait_event(const StreamEvent& ev, int64_t stream) {
  if (ev.device == index_ && ev.stream == stream) return;  // a stream is in order with itself
  DeviceRuntime& recorder = get(ev.device);
  TORCH_CHECK(!capturing(stream) && !recorder.capturing(ev.stream),
              "spyre: a wait between streams cannot be captured in a graph (a stream it joins is capturing)");
  const uint64_t sem = recorder.stream_semaphore(ev.stream);
  // Another card's event: this card's firmware reads that card's semaphore across PCIe, through its
  // memory window, whenever any card of the server raises one; the host does not wait.
  const bool across = ev.device != index_;
  uint64_t seq = 0;
  SPYRE_CHECK(queue(stream).wait_semaphore(across ? peer_iova(ev.device, sem) : sem, ev.value, &seq, across));
}

bool DeviceRuntime::event_query(const StreamEvent& ev) {
  return queue(ev.stream).is_complete(ev.seq);
}

void DeviceRuntime::event_synchronize(const StreamEvent& ev) {
  wait(queue(ev.stream), ev.seq);
}

double DeviceRuntime::elapsed_ms(const StreamEvent& a, const StreamEvent& b) {
  TORCH_CHECK_VALUE(a.slot >= 0 && b.slot >= 0,
                    "spyre: elapsed_time needs two events created with enable_timing=True and recorded");
  event_synchronize(a);
  event_synchronize(b);
  const double cycles = static_cast<double>(timestamps_.read(b.slot)) - static_cast<double>(timestamps_.read(a.slot));
  return cycles / device_->info().card.clock_mhz / 1e3;
}

void DeviceRuntime::release_event(const StreamEvent& ev) noexcept {
  if (ev.slot < 0 || ev.device != index_) return;
  const int slot = ev.slot;
  try {
    driver::Queue& q = queue(ev.stream);
    // The card may still write the slot: give it back once it has.
    q.on_complete(ev.seq, [this, slot] { timestamps_.give_back(slot); });
  } catch (...) {
    // deliberately empty: a failed queue never completes, and its slot is given up with the card
  }
}

uint64_t DeviceRuntime::stream_mark(int64_t stream) {
  return queue(stream).last_seq();
}

bool DeviceRuntime::stream_passed(int64_t stream, uint64_t mark) {
  return queue(stream).is_complete(mark);
}

}  // namespace spyre::backend
