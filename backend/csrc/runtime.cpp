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
#include "spyre/driver/driver.h"
#include "spyre/hw/commands.h"

namespace spyre::backend {

namespace {
constexpr uint64_t kStagingCacheBytes = 256ull << 20;  // host staging kept for reuse
constexpr uint32_t kQueueEntries = 1024;

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

DeviceRuntime& DeviceRuntime::get(int index) {
  TORCH_CHECK(!driver::Driver::forked_child(),
              "spyre: cannot use the device in a subprocess forked after it started; start subprocesses with "
              "multiprocessing's 'spawn' method");
  driver::Driver& drv = driver::Driver::instance();
  SPYRE_CHECK(drv.transport_status());
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

// Timed events in flight at once per device (each holds an 8-byte slot of mapped host memory).
constexpr int kTimestampSlots = 4096;

DeviceRuntime::DeviceRuntime(int index, driver::Device* device)
    : index_(index),
      device_(device),
      num_streams_(static_cast<int>(device->info().num_queues)),
      // A third of the pool streams are high priority (at least one when there are pool streams).
      first_high_(num_streams_ - std::max(num_streams_ > 1 ? 1 : 0, (num_streams_ - 1) / 3)),
      streams_(num_streams_),
      programs_(program_cache_entries(), 512ull << 20) {
  TORCH_CHECK(num_streams_ >= 1, "spyre: device ", index, " has no hardware queues");
  queue(0);  // the default stream
  SPYRE_CHECK(device_->map_host(kTimestampSlots * sizeof(uint64_t), &timestamps_));
  for (int i = kTimestampSlots - 1; i >= 0; --i) free_slots_.push_back(i);
  const driver::DeviceInfo& info = device_->info();
  TORCH_CHECK(info.memory_base + info.memory_bytes <= uint64_t{1} << kDevicePointerShift, "spyre: device ", index,
              " has memory up to address ", info.memory_base + info.memory_bytes,
              "; data pointers address at most 1 TiB per device");
}

uint64_t DeviceRuntime::alloc(uint64_t bytes) {
  uint64_t addr = 0;
  SPYRE_CHECK(device_->alloc(bytes, &addr));
  return addr;
}

namespace {
std::atomic<void (*)(int)> g_release_cached{nullptr};
}  // namespace

void set_release_cached_memory(void (*fn)(int device)) {
  g_release_cached.store(fn);
}

uint64_t DeviceRuntime::alloc_reclaiming(uint64_t bytes) {
  uint64_t addr = 0;
  driver::Status s = device_->alloc(bytes, &addr);
  if (s.code() == driver::StatusCode::kOutOfMemory) {
    if (auto* release = g_release_cached.load()) {
      release(index_);  // tensor memory the cache holds but no tensor uses
      s = device_->alloc(bytes, &addr);
    }
  }
  SPYRE_CHECK(s);
  return addr;
}

void DeviceRuntime::free(uint64_t addr) {
  SPYRE_CHECK(device_->free(addr));
}

std::unique_ptr<driver::HostBuffer> DeviceRuntime::take_staging(uint64_t n) {
  {
    std::lock_guard lock(mu_);
    auto it = staging_.lower_bound(n);
    if (it != staging_.end() && it->first <= 2 * n + (64 << 10)) {  // reuse unless far too big
      auto b = std::move(it->second);
      staging_bytes_ -= it->first;
      staging_.erase(it);
      return b;
    }
  }
  std::unique_ptr<driver::HostBuffer> b;
  SPYRE_CHECK(device_->map_host(n, &b));
  return b;
}

void DeviceRuntime::give_back(std::unique_ptr<driver::HostBuffer> b) {
  std::lock_guard lock(mu_);
  if (staging_bytes_ + b->size() > kStagingCacheBytes) return;  // freed here
  staging_bytes_ += b->size();
  staging_.emplace(b->size(), std::move(b));
}

void DeviceRuntime::wait(driver::Queue& q, uint64_t seq) {
  const driver::Status s = q.wait(seq);
  if (s.ok()) return;
  // The host stopped waiting; the work goes on, and the queue keeps its state.
  if (s.code() == driver::StatusCode::kTimeout || s.code() == driver::StatusCode::kInterrupted) check_status(s, "wait");
  // Report the error once, with what it cost, and reset the queue so the device stays usable.
  (void)q.synchronize();
  const uint64_t skipped = q.not_executed();
  (void)q.reset();
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
  if (skipped == 0) check_status(s, "wait");
  check_status(driver::Status(s.code(), c10::str(s.message(), "; ", skipped,
                                                 " later command(s) on this device were not executed, so the "
                                                 "tensors they would have written hold undefined data")),
               "wait");
}

// Host copies move in pieces of at most this many bytes, each through its own staging buffer: a
// descriptor moves at most hw::kMaxCopyBytes (4 GiB), and staging a large copy whole would double
// its host memory. TORCH_SPYRE_COPY_CHUNK (bytes) sets it, for tests; default 64 MiB.
uint64_t copy_chunk() {
  static const uint64_t chunk = [] {
    const char* env = std::getenv("TORCH_SPYRE_COPY_CHUNK");
    if (!env || !*env) return uint64_t{64} << 20;
    char* end = nullptr;
    const unsigned long long n = std::strtoull(env, &end, 10);
    TORCH_CHECK_VALUE(end && *end == 0 && n >= 1 && n <= hw::kMaxCopyBytes,
                      "torch_spyre: TORCH_SPYRE_COPY_CHUNK must be a byte count from 1 to 4 GiB, not '", env, "'");
    return static_cast<uint64_t>(n);
  }();
  return chunk;
}

// Pieces of a host-to-device copy in flight at once: enough to keep the link busy.
constexpr size_t kChunksInFlight = 4;

namespace {
struct Pinned {
  int device;
  uint64_t bytes;  // as asked for (the mapping is rounded up to pages)
  std::unique_ptr<driver::HostBuffer> buffer;
};
std::mutex g_pinned_mu;
std::map<uintptr_t, Pinned*> g_pinned;  // by start address
}  // namespace

void* PinnedHost::pin(uint64_t bytes, void** ctx) {
  const int dev = current_device();
  auto* entry = new Pinned{dev, bytes, nullptr};
  try {
    SPYRE_CHECK(DeviceRuntime::get(dev).device().map_host(bytes, &entry->buffer));
  } catch (...) {
    delete entry;
    throw;
  }
  void* data = entry->buffer->data();
  {
    std::lock_guard lock(g_pinned_mu);
    g_pinned[reinterpret_cast<uintptr_t>(data)] = entry;
  }
  *ctx = entry;
  return data;
}

void PinnedHost::unpin(void* ctx) noexcept {
  auto* entry = static_cast<Pinned*>(ctx);
  if (!entry) return;
  {
    std::lock_guard lock(g_pinned_mu);
    g_pinned.erase(reinterpret_cast<uintptr_t>(entry->buffer->data()));
  }
  if (driver::Driver::forked_child()) {
    (void)entry->buffer.release();  // the mapping is the parent's: leave it
  } else {
    try {
      if (DeviceRuntime::opened(entry->device)) DeviceRuntime::get(entry->device).drain();
    } catch (const std::exception& e) {
      TORCH_WARN("spyre: freeing pinned memory: ", e.what());
    }
  }
  delete entry;
}

uint64_t PinnedHost::bytes(const void* ctx) {
  return static_cast<const Pinned*>(ctx)->bytes;
}

uint64_t PinnedHost::iova(const void* p, uint64_t n, int device) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(g_pinned_mu);
  auto it = g_pinned.upper_bound(at);
  if (it == g_pinned.begin()) return 0;
  --it;
  const Pinned& e = *it->second;
  const uintptr_t start = it->first;
  if (e.device != device || at + n > start + e.buffer->size()) return 0;
  return e.buffer->iova() + (at - start);
}

bool PinnedHost::contains(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(g_pinned_mu);
  auto it = g_pinned.upper_bound(at);
  if (it == g_pinned.begin()) return false;
  --it;
  return at < it->first + it->second->buffer->size();
}

uint64_t DeviceRuntime::copy_in_pieces(driver::Queue& q, uint64_t src, uint64_t dst, uint64_t n, uint8_t flags,
                                       const char* name) {
  const int64_t stream = current_stream();
  uint64_t seq = 0;
  for (uint64_t off = 0; off < n; off += hw::kMaxCopyBytes) {
    const uint64_t m = std::min(hw::kMaxCopyBytes, n - off);
    SPYRE_CHECK(q.copy(src + off, dst + off, m, flags, &seq));
    profiling::note(index_, stream, q, seq, profiling::Kind::kMemcpy, name, m);
  }
  return seq;
}

namespace {

// Host tensors copied to and from the card come and go in large blocks; glibc keeps the freed
// ones in its heaps (above its adaptive mmap threshold they are no longer unmapped), and a long
// run of copies of changing sizes grew the process by gigabytes of free heap. After every GiB of
// copies the heaps' free pages go back to the operating system (malloc_trim: milliseconds).
void note_host_copy(uint64_t n) {
  static std::atomic<uint64_t> since_trim{0};
  constexpr uint64_t kTrimEvery = uint64_t{1} << 30;
  if (since_trim.fetch_add(n) + n >= kTrimEvery) {
    since_trim.store(0);
    malloc_trim(0);
  }
}

}  // namespace

void DeviceRuntime::h2d(uint64_t dst, const void* src, uint64_t n, bool non_blocking) {
  check_not_capturing("a copy from the host");
  upload(dst, src, n, non_blocking);
  note_host_copy(n);
}

void DeviceRuntime::upload(uint64_t dst, const void* src, uint64_t n, bool non_blocking) {
  if (n == 0) return;
  driver::Queue& q = queue();
  if (const uint64_t iova = PinnedHost::iova(src, n, index_)) {  // the card reads it in place
    const uint64_t seq = copy_in_pieces(q, iova, dst, n, hw::kCopySrcHost, "Memcpy HtoD (pinned)");
    if (!non_blocking) wait(q, seq);
    return;
  }
  const uint64_t chunk = copy_chunk();
  std::deque<uint64_t> in_flight;
  for (uint64_t off = 0; off < n; off += chunk) {
    if (in_flight.size() >= kChunksInFlight) {  // bound the staging memory of a large copy
      wait(q, in_flight.front());
      in_flight.pop_front();
    }
    const uint64_t m = std::min(chunk, n - off);
    auto staging = take_staging(m);
    std::memcpy(staging->data(), static_cast<const uint8_t*>(src) + off, m);
    uint64_t seq = 0;
    SPYRE_CHECK(q.copy(staging->iova(), dst + off, m, hw::kCopySrcHost, &seq));
    profiling::note(index_, current_stream(), q, seq, profiling::Kind::kMemcpy, "Memcpy HtoD", m);
    // The staging buffer goes back to the pool once the card has read it.
    auto* raw = staging.release();
    q.on_complete(seq, [this, raw] { give_back(std::unique_ptr<driver::HostBuffer>(raw)); });
    in_flight.push_back(seq);
  }
}

void DeviceRuntime::d2h(void* dst, uint64_t src, uint64_t n) {
  check_not_capturing("a copy to the host (it waits for the card)");
  if (n == 0) return;
  driver::Queue& q = queue();
  if (const uint64_t iova = PinnedHost::iova(dst, n, index_)) {  // the card writes it in place
    wait(q, copy_in_pieces(q, src, iova, n, hw::kCopyDstHost, "Memcpy DtoH (pinned)"));
    return;
  }
  const uint64_t chunk = copy_chunk();
  for (uint64_t off = 0; off < n; off += chunk) {
    const uint64_t m = std::min(chunk, n - off);
    auto staging = take_staging(m);
    uint64_t seq = 0;
    SPYRE_CHECK(q.copy(src + off, staging->iova(), m, hw::kCopyDstHost, &seq));
    profiling::note(index_, current_stream(), q, seq, profiling::Kind::kMemcpy, "Memcpy DtoH", m);
    wait(q, seq);
    std::memcpy(static_cast<uint8_t*>(dst) + off, staging->data(), m);
    give_back(std::move(staging));
  }
  note_host_copy(n);
}

void DeviceRuntime::d2d(uint64_t dst, uint64_t src, uint64_t n) {
  if (dst == src) return;
  if (CaptureSink* sink = capture_sink()) {
    sink->copy(dst, src, n);
    return;
  }
  (void)copy_in_pieces(queue(), src, dst, n, 0, "Memcpy DtoD");  // on the card: no staging
}

void DeviceRuntime::copy_to_peer(int peer, uint64_t dst, uint64_t src, uint64_t n) {
  TORCH_CHECK(peer != index_, "spyre: copy_to_peer needs another card, not ", index_);
  check_not_capturing("a copy to another card");
  DeviceRuntime& other = get(peer);
  other.stream_synchronize(other.current_stream());
  // The IOVA window maps the peer's memory as this process sees it: [memory_base, + memory_bytes).
  const driver::DeviceInfo& peer_info = other.device().info();
  uint64_t window = 0;
  {
    std::lock_guard lock(mu_);
    auto it = peer_windows_.find(peer);
    if (it == peer_windows_.end()) {
      SPYRE_CHECK(
          device_->map_peer(static_cast<uint32_t>(peer), peer_info.memory_base, peer_info.memory_bytes, &window));
      it = peer_windows_.emplace(peer, window).first;
    }
    window = it->second;
  }
  driver::Queue& q = queue();
  wait(q, copy_in_pieces(q, src, window + (dst - peer_info.memory_base), n, hw::kCopyDstHost, "Memcpy PtoP"));
}

// The device copy of an op name, written once per name and kept: there are a few hundred at most.
uint64_t DeviceRuntime::label(const std::string& op) {
  if (op.empty()) return 0;
  {
    std::lock_guard lock(mu_);
    if (const auto it = labels_.find(op); it != labels_.end()) return it->second;
  }
  const std::string text = op.substr(0, hw::kMaxLabelBytes - 1);
  const uint64_t addr = alloc_reclaiming(text.size() + 1);
  upload(addr, text.c_str(), text.size() + 1);
  wait(queue(), queue().last_seq());  // any stream may use it next
  std::lock_guard lock(mu_);
  const auto [it, inserted] = labels_.emplace(op, addr);
  if (!inserted) free(addr);  // another thread wrote it meanwhile
  return it->second;
}

void DeviceRuntime::launch(const std::string& key, const std::function<compiler::Program()>& build,
                           const std::vector<uint64_t>& args, const std::string& op) {
  std::vector<LoadedProgram> evicted;
  {
    // Held until the launch is queued: an evicted program's memory is freed only under the
    // exclusive lock, so no launch between finding a program and queueing it sees it freed.
    std::shared_lock using_programs(programs_rw_);
    submit_launch(key, build, args, op, &evicted);
  }
  if (evicted.empty()) return;
  // Work queued on any stream may still run an evicted program: let it finish first (evictions
  // are rare: the cache holds thousands of programs).
  std::unique_lock freeing(programs_rw_);
  drain();
  for (const LoadedProgram& e : evicted) free(e.addr);
}

LoadedProgram DeviceRuntime::loaded(const std::string& key, const std::function<compiler::Program()>& build,
                                    size_t num_args, std::vector<LoadedProgram>* evicted) {
  {
    std::lock_guard lock(mu_);
    if (std::optional<LoadedProgram> found = programs_.find(key)) return *found;
  }
  const compiler::Program p = build();
  TORCH_INTERNAL_ASSERT(p.num_args <= num_args, "spyre: program ", p.name, " needs ", p.num_args, " arguments");
  const LoadedProgram mine{alloc_reclaiming(p.image.size()), p.image.size(), p.core_mask, p.name};
  upload(mine.addr, p.image.data(), p.image.size());
  wait(queue(), queue().last_seq());  // any stream may launch it next
  LoadedProgram prog{};
  {
    std::lock_guard lock(mu_);
    std::vector<LoadedProgram> out = programs_.insert(key, mine, &prog);
    evicted->insert(evicted->end(), out.begin(), out.end());
  }
  if (prog.addr != mine.addr) free(mine.addr);  // another thread loaded the same program meanwhile
  return prog;
}

void DeviceRuntime::submit_launch(const std::string& key, const std::function<compiler::Program()>& build,
                                  const std::vector<uint64_t>& args, const std::string& op,
                                  std::vector<LoadedProgram>* evicted) {
  const LoadedProgram prog = loaded(key, build, args.size(), evicted);
  TORCH_CHECK(args.size() <= hw::kMaxLaunchArgs, "spyre: too many launch arguments (", args.size(), ")");
  const uint64_t args_bytes = args.size() * sizeof(uint64_t);
  const uint64_t args_addr = alloc_reclaiming(hw::kMaxLaunchArgs * sizeof(uint64_t));
  upload(args_addr, args.data(), args_bytes);
  const uint64_t op_label = label(op);
  if (CaptureSink* sink = capture_sink()) {
    sink->launch(prog, args_addr, args_bytes, op_label, prog.name);
    return;
  }
  driver::Queue& q = queue();
  const uint64_t seq = queue_launch(q, prog, args_addr, args_bytes, op_label);
  q.on_complete(seq, [this, args_addr] { (void)device_->free(args_addr); });
}

uint64_t DeviceRuntime::queue_launch(driver::Queue& q, const LoadedProgram& prog, uint64_t args, uint64_t args_bytes,
                                     uint64_t op_label) {
  uint64_t seq = 0;
  SPYRE_CHECK(q.launch(prog.addr, prog.size, args, args_bytes, prog.core_mask, op_label, &seq));
  profiling::note(index_, current_stream(), q, seq, profiling::Kind::kKernel, prog.name, 0);
  return seq;
}

void DeviceRuntime::launch_sequence(const std::vector<LaunchRequest>& launches) {
  if (launches.empty()) return;
  if (launches.size() == 1 || capture_sink() != nullptr) {  // a capture owns each argument block
    for (const LaunchRequest& r : launches) launch(r.key, r.build, r.args, r.op);
    return;
  }
  std::vector<LoadedProgram> evicted;
  {
    std::shared_lock using_programs(programs_rw_);
    std::vector<LoadedProgram> progs;
    constexpr uint64_t kSlot = hw::kMaxLaunchArgs;
    std::vector<uint64_t> block(launches.size() * kSlot, 0);
    for (size_t i = 0; i < launches.size(); ++i) {
      const LaunchRequest& r = launches[i];
      TORCH_CHECK(r.args.size() <= kSlot, "spyre: too many launch arguments (", r.args.size(), ")");
      progs.push_back(loaded(r.key, r.build, r.args.size(), &evicted));
      std::copy(r.args.begin(), r.args.end(), block.begin() + static_cast<std::ptrdiff_t>(i * kSlot));
    }
    // Every argument block in one upload: one transfer for the sequence instead of one per launch.
    const uint64_t bytes = block.size() * sizeof(uint64_t);
    const uint64_t base = alloc_reclaiming(bytes);
    upload(base, block.data(), bytes);
    driver::Queue& q = queue();
    uint64_t seq = 0;
    try {
      for (size_t i = 0; i < launches.size(); ++i) {
        seq = queue_launch(q, progs[i], base + i * kSlot * sizeof(uint64_t), launches[i].args.size() * sizeof(uint64_t),
                           label(launches[i].op));
      }
    } catch (...) {  // the launches queued before the failure still read the block
      q.on_complete(q.last_seq(), [this, base] { (void)device_->free(base); });
      throw;
    }
    q.on_complete(seq, [this, base] { (void)device_->free(base); });
  }
  if (evicted.empty()) return;
  std::unique_lock freeing(programs_rw_);
  drain();
  for (const LoadedProgram& e : evicted) free(e.addr);
}

ProgramCacheStats DeviceRuntime::program_cache_stats() {
  std::lock_guard lock(mu_);
  return programs_.stats();
}

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
    std::lock_guard lock(slots_mu_);
    TORCH_CHECK(!free_slots_.empty(), "spyre: more than ", kTimestampSlots, " timed events are alive on device ",
                index_, "; destroy some, or create events without timing");
    ev.slot = free_slots_.back();
    free_slots_.pop_back();
  }
  // One lock for the value and the submission, so that a stream's values reach the card in order.
  std::lock_guard lock(streams_mu_);
  Stream& st = streams_[stream];
  if (ev.slot >= 0) {
    uint64_t ts = 0;
    SPYRE_CHECK(q.timestamp(timestamps_->iova() + ev.slot * sizeof(uint64_t), &ts));
  }
  ev.device = index_;
  ev.stream = stream;
  ev.value = st.signalled + 1;
  SPYRE_CHECK(q.signal(st.semaphore, ev.value, &ev.seq));
  st.signalled = ev.value;  // only once queued: a value never signalled would hold its waiters
}

void DeviceRuntime::wait_event(const StreamEvent& ev, int64_t stream) {
  TORCH_CHECK(ev.device == index_, "spyre: an event recorded on device ", ev.device, " cannot be waited on by device ",
              index_);
  if (ev.stream == stream) return;  // a stream is in order with itself
  TORCH_CHECK(!capturing(stream) && !capturing(ev.stream),
              "spyre: a wait between streams cannot be captured in a graph (a stream it joins is capturing)");
  queue(ev.stream);  // the semaphore exists
  uint64_t sem = 0;
  {
    std::lock_guard lock(streams_mu_);
    sem = streams_[ev.stream].semaphore;
  }
  uint64_t seq = 0;
  SPYRE_CHECK(queue(stream).wait_semaphore(sem, ev.value, &seq));
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
  const auto* slots = static_cast<const volatile uint64_t*>(timestamps_->data());
  const double cycles = static_cast<double>(slots[b.slot]) - static_cast<double>(slots[a.slot]);
  return cycles / device_->info().card.clock_mhz / 1e3;
}

void DeviceRuntime::release_event(const StreamEvent& ev) noexcept {
  if (ev.slot < 0 || ev.device != index_) return;
  const int slot = ev.slot;
  try {
    driver::Queue& q = queue(ev.stream);
    // The card may still write the slot: give it back once it has.
    q.on_complete(ev.seq, [this, slot] {
      std::lock_guard lock(slots_mu_);
      free_slots_.push_back(slot);
    });
  } catch (...) {
  }
}

uint64_t DeviceRuntime::stream_mark(int64_t stream) {
  return queue(stream).last_seq();
}

bool DeviceRuntime::stream_passed(int64_t stream, uint64_t mark) {
  return queue(stream).is_complete(mark);
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
