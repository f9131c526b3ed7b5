// The device runtime's memory: device allocations (reclaiming the tensor cache when full), host
// staging buffers kept for reuse, and pinned host memory mapped for the card's DMA.
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
  std::unique_ptr<driver::HostBuffer> b = staging_.take(n);
  if (!b) SPYRE_CHECK(device_->map_host(n, &b));
  return b;
}

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

}  // namespace spyre::backend
