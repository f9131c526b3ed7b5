#include "runtime.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

#include <c10/util/Exception.h>
#include <cstdio>

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

void check_status(const driver::Status& s, const char* where) {
  switch (s.code()) {
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

DeviceRuntime::DeviceRuntime(int index, driver::Device* device)
    : index_(index), device_(device), programs_(program_cache_entries(), 512ull << 20) {
  SPYRE_CHECK(device_->create_queue(kQueueEntries, &queue_));
  TORCH_CHECK(device_->info().memory_bytes <= uint64_t{1} << kDevicePointerShift, "spyre: device ", index, " has ",
              device_->info().memory_bytes, " bytes of memory; data pointers address at most 1 TiB per device");
}

uint64_t DeviceRuntime::alloc(uint64_t bytes) {
  uint64_t addr = 0;
  SPYRE_CHECK(device_->alloc(bytes, &addr));
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

void DeviceRuntime::wait(uint64_t seq) {
  const driver::Status s = queue_->wait(seq);
  if (s.ok()) return;
  // Report the error once, with what it cost, and reset the queue so the device stays usable.
  (void)queue_->synchronize();
  const uint64_t skipped = queue_->not_executed();
  (void)queue_->reset();
  if (skipped == 0) check_status(s, "wait");
  TORCH_CHECK(false, s.message(), "; ", skipped,
              " later command(s) on this device were not executed, so the tensors they would have written "
              "hold undefined data");
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
  std::unique_ptr<driver::HostBuffer> buffer;
};
std::mutex g_pinned_mu;
std::map<uintptr_t, Pinned*> g_pinned;  // by start address
}  // namespace

void* PinnedHost::pin(uint64_t bytes, void** ctx) {
  const int dev = current_device();
  auto* entry = new Pinned{dev, nullptr};
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
      if (DeviceRuntime::opened(entry->device)) DeviceRuntime::get(entry->device).synchronize();
    } catch (const std::exception& e) {
      TORCH_WARN("spyre: freeing pinned memory: ", e.what());
    }
  }
  delete entry;
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

void DeviceRuntime::h2d(uint64_t dst, const void* src, uint64_t n, bool non_blocking) {
  if (n == 0) return;
  if (const uint64_t iova = PinnedHost::iova(src, n, index_)) {  // the card reads it in place
    uint64_t seq = 0;
    for (uint64_t off = 0; off < n; off += hw::kMaxCopyBytes) {
      SPYRE_CHECK(queue_->copy(iova + off, dst + off, std::min(hw::kMaxCopyBytes, n - off), hw::kCopySrcHost, &seq));
    }
    if (!non_blocking) wait(seq);
    return;
  }
  const uint64_t chunk = copy_chunk();
  std::deque<uint64_t> in_flight;
  for (uint64_t off = 0; off < n; off += chunk) {
    if (in_flight.size() >= kChunksInFlight) {  // bound the staging memory of a large copy
      wait(in_flight.front());
      in_flight.pop_front();
    }
    const uint64_t m = std::min(chunk, n - off);
    auto staging = take_staging(m);
    std::memcpy(staging->data(), static_cast<const uint8_t*>(src) + off, m);
    uint64_t seq = 0;
    SPYRE_CHECK(queue_->copy(staging->iova(), dst + off, m, hw::kCopySrcHost, &seq));
    // The staging buffer goes back to the pool once the card has read it.
    auto* raw = staging.release();
    queue_->on_complete(seq, [this, raw] { give_back(std::unique_ptr<driver::HostBuffer>(raw)); });
    in_flight.push_back(seq);
  }
}

void DeviceRuntime::d2h(void* dst, uint64_t src, uint64_t n) {
  if (n == 0) return;
  if (const uint64_t iova = PinnedHost::iova(dst, n, index_)) {  // the card writes it in place
    uint64_t seq = 0;
    for (uint64_t off = 0; off < n; off += hw::kMaxCopyBytes) {
      SPYRE_CHECK(queue_->copy(src + off, iova + off, std::min(hw::kMaxCopyBytes, n - off), hw::kCopyDstHost, &seq));
    }
    wait(seq);
    return;
  }
  const uint64_t chunk = copy_chunk();
  for (uint64_t off = 0; off < n; off += chunk) {
    const uint64_t m = std::min(chunk, n - off);
    auto staging = take_staging(m);
    uint64_t seq = 0;
    SPYRE_CHECK(queue_->copy(src + off, staging->iova(), m, hw::kCopyDstHost, &seq));
    wait(seq);
    std::memcpy(static_cast<uint8_t*>(dst) + off, staging->data(), m);
    give_back(std::move(staging));
  }
}

void DeviceRuntime::d2d(uint64_t dst, uint64_t src, uint64_t n) {
  if (dst == src) return;
  for (uint64_t off = 0; off < n; off += hw::kMaxCopyBytes) {  // on the card: no staging, whole descriptors
    uint64_t seq = 0;
    SPYRE_CHECK(queue_->copy(src + off, dst + off, std::min(hw::kMaxCopyBytes, n - off), 0, &seq));
  }
}

// The device copy of an op name, written once per name and kept: there are a few hundred at most.
uint64_t DeviceRuntime::label(const std::string& op) {
  if (op.empty()) return 0;
  {
    std::lock_guard lock(mu_);
    if (const auto it = labels_.find(op); it != labels_.end()) return it->second;
  }
  const std::string text = op.substr(0, hw::kMaxLabelBytes - 1);
  const uint64_t addr = alloc(text.size() + 1);
  h2d(addr, text.c_str(), text.size() + 1);
  std::lock_guard lock(mu_);
  const auto [it, inserted] = labels_.emplace(op, addr);
  if (!inserted) free(addr);  // another thread wrote it meanwhile
  return it->second;
}

void DeviceRuntime::launch(const std::string& key, const std::function<compiler::Program()>& build,
                           const std::vector<uint64_t>& args, const std::string& op) {
  std::optional<LoadedProgram> found;
  {
    std::lock_guard lock(mu_);
    found = programs_.find(key);
  }
  LoadedProgram prog{};
  if (found) {
    prog = *found;
  } else {
    const compiler::Program p = build();
    TORCH_INTERNAL_ASSERT(p.num_args <= args.size(), "spyre: program ", p.name, " needs ", p.num_args, " arguments");
    const LoadedProgram mine{alloc(p.image.size()), p.image.size(), p.core_mask};
    h2d(mine.addr, p.image.data(), p.image.size());
    std::vector<LoadedProgram> evicted;
    {
      std::lock_guard lock(mu_);
      evicted = programs_.insert(key, mine, &prog);
    }
    // Safe to free at once: the queue is in order, so work already queued with these programs (or
    // our upload) runs before anything queued later reuses the memory.
    if (prog.addr != mine.addr) free(mine.addr);  // another thread loaded the same program meanwhile
    for (const LoadedProgram& e : evicted) free(e.addr);
  }
  TORCH_CHECK(args.size() <= hw::kMaxLaunchArgs, "spyre: too many launch arguments (", args.size(), ")");
  const uint64_t args_bytes = args.size() * sizeof(uint64_t);
  const uint64_t args_addr = alloc(hw::kMaxLaunchArgs * sizeof(uint64_t));
  h2d(args_addr, args.data(), args_bytes);
  uint64_t seq = 0;
  SPYRE_CHECK(queue_->launch(prog.addr, prog.size, args_addr, args_bytes, prog.core_mask, label(op), &seq));
  queue_->on_complete(seq, [this, args_addr] { (void)device_->free(args_addr); });
}

ProgramCacheStats DeviceRuntime::program_cache_stats() {
  std::lock_guard lock(mu_);
  return programs_.stats();
}

void DeviceRuntime::synchronize() {
  wait(queue_->last_seq());
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
