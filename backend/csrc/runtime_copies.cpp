// The device runtime's copies: host to device (staged or from pinned memory), device to host,
// on the card and to a peer card, each in pieces of at most one descriptor's reach.
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

#include <c10/util/Exception.h>

#include "profiler.h"
#include "spyre/driver/driver.h"
#include "spyre/hw/commands.h"

namespace spyre::backend {

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

uint64_t DeviceRuntime::copy_in_pieces(driver::Queue& q, uint64_t src, uint64_t dst, uint64_t n, uint8_t flags,
                                       const char* name, uint64_t label) {
  const int64_t stream = current_stream();
  uint64_t seq = 0;
  for (uint64_t off = 0; off < n; off += hw::kMaxCopyBytes) {
    const uint64_t m = std::min(hw::kMaxCopyBytes, n - off);
    SPYRE_CHECK(q.copy(src + off, dst + off, m, flags, &seq, label));
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
    q.on_complete(seq, [this, raw] { staging_.give_back(std::unique_ptr<driver::HostBuffer>(raw)); });
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
    staging_.give_back(std::move(staging));
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
  driver::Queue& q = queue();
  wait(q, copy_in_pieces(q, src, peer_iova(peer, dst), n, hw::kCopyDstHost, "Memcpy PtoP"));
}

void DeviceRuntime::copy_to_peer_async(int peer, uint64_t dst, uint64_t src, uint64_t n, const std::string& label) {
  TORCH_CHECK(peer != index_, "spyre: copy_to_peer needs another card, not ", index_);
  check_not_capturing("a copy to another card");
  if (n > 0)
    (void)copy_in_pieces(queue(), src, peer_iova(peer, dst), n, hw::kCopyDstHost, "Memcpy PtoP", queued_label(label));
}

uint64_t DeviceRuntime::peer_iova(int peer, uint64_t addr) {
  // The IOVA window maps the peer's memory as this process sees it: [memory_base, + memory_bytes).
  const driver::DeviceInfo& peer_info = get(peer).device().info();
  const uint64_t window = peers_.get(peer, [&] {
    uint64_t mapped = 0;
    check_status(device_->map_peer(static_cast<uint32_t>(peer), peer_info.memory_base, peer_info.memory_bytes, &mapped),
                 "map_peer");
    return mapped;
  });
  return window + (addr - peer_info.memory_base);
}

uint64_t DeviceRuntime::queued_label(const std::string& text) {
  if (text.empty()) return 0;
  driver::Queue& q = queue();
  std::lock_guard lock(queued_labels_mu_);
  if (const auto it = queued_labels_.find(text); it != queued_labels_.end()) {
    const QueuedLabel& l = it->second;
    if (l.queue != &q && !l.queue->is_complete(l.seq)) wait(*l.queue, l.seq);
    return l.addr;
  }
  // A few dozen per card (a collective's phases and peers), kept for the process's life.
  const std::string s = text.substr(0, hw::kMaxLabelBytes - 1);
  const uint64_t addr = alloc_reclaiming(s.size() + 1);
  upload(addr, s.c_str(), s.size() + 1);  // staged: queued, no wait
  queued_labels_[text] = {addr, &q, q.last_seq()};
  return addr;
}

uint64_t DeviceRuntime::ipc_export() {
  std::lock_guard lock(ipc_mu_);
  if (exported_ == 0) {
    const driver::DeviceInfo& info = device_->info();
    check_status(device_->ipc_export(info.memory_base, info.memory_bytes, &exported_), "ipc_export");
  }
  return exported_;
}

driver::Transport::IpcWindow DeviceRuntime::ipc_open(uint64_t handle) {
  std::lock_guard lock(ipc_mu_);
  if (const auto it = ipc_windows_.find(handle); it != ipc_windows_.end()) return it->second;
  driver::Transport::IpcWindow w;
  check_status(device_->ipc_open(handle, &w), "ipc_open");
  ipc_windows_[handle] = w;
  return w;
}

void DeviceRuntime::check_ipc_range(uint64_t iova, uint64_t n, const char* what) {
  std::lock_guard lock(ipc_mu_);
  for (const auto& [handle, w] : ipc_windows_) {
    if (iova >= w.iova && n <= w.bytes && iova - w.iova <= w.bytes - n) return;
  }
  TORCH_CHECK_VALUE(false, "spyre: ", what, " at IOVA ", iova, " + ", n,
                    " is outside every window of another process's memory this card opened");
}

void DeviceRuntime::copy_to_iova_async(uint64_t iova, uint64_t src, uint64_t n, const std::string& label) {
  check_ipc_range(iova, n, "a copy to another process's memory");
  check_not_capturing("a copy to another process's memory");
  if (n > 0) (void)copy_in_pieces(queue(), src, iova, n, hw::kCopyDstHost, "Memcpy PtoP", queued_label(label));
}

void DeviceRuntime::wait_value(int64_t stream, uint64_t iova, uint64_t value) {
  check_ipc_range(iova, sizeof(uint64_t), "a semaphore of another process");
  TORCH_CHECK(!capturing(stream), "spyre: a wait on another process's semaphore cannot be captured in a graph");
  uint64_t seq = 0;
  SPYRE_CHECK(queue(stream).wait_semaphore(iova, value, &seq, true));
}

std::pair<uint64_t, uint64_t> DeviceRuntime::stream_signal_state(int64_t stream) {
  queue(stream);  // the semaphore exists
  std::lock_guard lock(streams_mu_);
  const Stream& st = streams_[stream];
  return {st.semaphore, st.signalled};
}

}  // namespace spyre::backend
