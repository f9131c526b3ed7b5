// The PrivateUse1 tensor allocator: each device's memory through a CachingAllocator whose segments
// come from the driver (DeviceRuntime::alloc). Data pointers are device_pointer()s, so a pointer
// names its device; the DataPtr context is the cache block.
#include "device_allocator.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "caching_allocator.h"
#include "runtime.h"
#include "sanitizer.h"
#include "spyre/driver/driver.h"

namespace spyre::backend {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;

// The context of a storage_part's DataPtr: the block's storage, released with the part.
struct Part {
  c10::Storage block;
};

void delete_part(void* ctx) {
  delete static_cast<Part*>(ctx);  // the block's own deleter runs if this was its last reference
}

// c10::DeviceIndex is 8 bits: no more devices than this can exist.
constexpr int kMaxDevices = 128;

// The driver's message for the segment it last refused on this thread: the allocator's own
// out-of-memory message is then completed with the driver's view (largest free block).
thread_local std::string t_driver_refusal;

// This thread's memory pools in use (use_mem_pool), innermost last: (device, pool).
thread_local std::vector<std::pair<int, uint64_t>> t_pools;

// TORCH_SPYRE_NO_MEMORY_CACHING=1: every tensor gets its own driver allocation, freed with it, so
// the driver's bounds checks see each tensor (for hunting memory errors).
bool caching_enabled() {
  const char* env = std::getenv("TORCH_SPYRE_NO_MEMORY_CACHING");
  return !(env && *env && std::strcmp(env, "0") != 0);
}

AllocatorHooks driver_hooks(DeviceRuntime* rt) {
  AllocatorHooks h;
  h.segment_alloc = [rt](uint64_t bytes, uint64_t* addr) {
    try {
      *addr = rt->alloc(bytes);
      return true;
    } catch (const c10::OutOfMemoryError& e) {
      t_driver_refusal = e.msg();
      return false;
    }
  };
  h.segment_free = [rt](uint64_t addr, uint64_t bytes) noexcept {
    try {
      // The driver's memory map knows no streams: work still queued on any stream may use the
      // segment, so it goes back only once the card has caught up (as cudaFree waits).
      rt->drain();
      // Zeroed while still ours (once freed, another thread may allocate it): the simulated card
      // gives the host memory behind it back to the operating system.
      rt->device().scrub(addr, bytes);
      rt->free(addr);
    } catch (const std::exception& e) {
      TORCH_WARN("spyre: could not free ", bytes, " bytes of device memory at 0x", std::hex, addr, std::dec, ": ",
                 e.what());
    }
  };
  // A stream the runtime cannot report on (its queue was reset after a device error) has no work
  // left that could read the block: treat it as passed rather than keep the block forever.
  h.stream_mark = [rt](int64_t stream) noexcept -> uint64_t {
    try {
      return rt->stream_mark(stream);
    } catch (const std::exception&) {
      return 0;
    }
  };
  h.stream_passed = [rt](int64_t stream, uint64_t mark) noexcept {
    try {
      return rt->stream_passed(stream, mark);
    } catch (const std::exception&) {
      return true;
    }
  };
  return h;
}

// Runs `f`, turning the caching allocator's errors into the c10 errors Python maps to
// torch.OutOfMemoryError and ValueError. The one place they are translated.
template <typename F>
auto translated(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const OutOfMemory& e) {
    std::string msg = e.what();
    if (!t_driver_refusal.empty()) msg += " (driver: " + std::exchange(t_driver_refusal, {}) + ")";
    C10_THROW_ERROR(OutOfMemoryError, msg);
  } catch (const std::invalid_argument& e) {
    C10_THROW_ERROR(ValueError, e.what());
  }
}

void copy_stats(const MemoryStatArray& from, c10::CachingAllocator::StatArray& to) {
  for (size_t i = 0; i < from.size(); ++i) {
    to[i].current = from[i].current;
    to[i].peak = from[i].peak;
    to[i].allocated = from[i].allocated;
    to[i].freed = from[i].freed;
  }
}

// The device whose caching allocator `c` is (defined below the allocator).
int device_of_cache(const CachingAllocator* c);

class Allocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const int dev = current_device();
    const c10::Device device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(dev));
    if (nbytes == 0) return c10::DataPtr(nullptr, nullptr, &deleter, device);
    CachingAllocator& c = cache(dev);
    const int64_t stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getStream(device).id();
    uint64_t pool = 0;
    for (auto it = t_pools.rbegin(); it != t_pools.rend(); ++it) {
      if (it->first == dev) {
        pool = it->second;
        break;
      }
    }
    CacheBlock* b = translated([&] { return c.malloc(nbytes, stream, pool); });
    if (sanitizer::checks() != 0) {  // outside the allocator's lock: it queues a command
      try {
        sanitizer::allocated(dev, stream, CachingAllocator::address(b), nbytes);
      } catch (...) {
        c.free(b);
        throw;
      }
    }
    return c10::DataPtr(device_pointer(dev, CachingAllocator::address(b)), b, &deleter, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    DeviceRuntime::get(current_device()).d2d(device_address(dest), device_address(src), count);
  }

  bool initialized() override { return true; }

  void emptyCache(c10::MempoolId_t id) override {
    if (driver::Driver::forked_child()) return;  // the cache is the parent's
    const uint64_t pool = id.first != 0 ? id.first : id.second;
    for (int dev = 0; dev < kMaxDevices; ++dev) {
      CachingAllocator* c = caches_[dev].load(std::memory_order_acquire);
      if (!c || (pool != 0 && pool_device(pool) != dev)) continue;
      translated([&] { c->empty_cache(pool); });
    }
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get_deleter() == &delete_part)
      return recordStream(static_cast<Part*>(ptr.get_context())->block.data_ptr(), stream);
    if (ptr.get_deleter() != &deleter || !ptr.get_context()) return;  // not ours, or empty
    auto* b = static_cast<CacheBlock*>(ptr.get_context());
    CachingAllocator& owner = CachingAllocator::owner(b);
    TORCH_CHECK_VALUE(stream.device_index() >= 0 && stream.device_index() < kMaxDevices &&
                          caches_[stream.device_index()].load() == &owner,
                      "spyre: record_stream: the stream is on ", stream.device(),
                      ", not on the device of the tensor's memory");
    owner.record_stream(b, stream.id());
  }

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    DeviceStats out;
    CachingAllocator* c = existing(device);
    if (!c) return out;
    const AllocatorStats s = c->stats();
    copy_stats(s.allocation, out.allocation);
    copy_stats(s.segment, out.segment);
    copy_stats(s.active, out.active);
    copy_stats(s.inactive_split, out.inactive_split);
    copy_stats(s.allocated_bytes, out.allocated_bytes);
    copy_stats(s.reserved_bytes, out.reserved_bytes);
    copy_stats(s.active_bytes, out.active_bytes);
    copy_stats(s.inactive_split_bytes, out.inactive_split_bytes);
    copy_stats(s.requested_bytes, out.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    if (CachingAllocator* c = existing(device)) c->reset_accumulated_stats();
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    if (CachingAllocator* c = existing(device)) c->reset_peak_stats();
  }
  // What the driver has left (the cache's segments count as used, as cudaMemGetInfo counts them).
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    const driver::MemoryStats m = DeviceRuntime::get(device).device().memory_stats();
    return {m.total - m.allocated, m.total};
  }

  /// The caching allocator of `dev`, created (and the device opened) on first use.
  CachingAllocator& cache(int dev) {
    TORCH_CHECK(!driver::Driver::forked_child(),
                "spyre: cannot use the device in a subprocess forked after it started; start subprocesses with "
                "multiprocessing's 'spawn' method");
    if (dev >= 0 && dev < kMaxDevices) {
      if (CachingAllocator* c = caches_[dev].load(std::memory_order_acquire)) return *c;
    }
    DeviceRuntime& rt = DeviceRuntime::get(dev);  // checks the index
    std::lock_guard lock(create_mu_);
    if (CachingAllocator* c = caches_[dev].load()) return *c;
    // Never deleted: tensors may die during process exit, after any static destructor.
    auto* c = new CachingAllocator("spyre:" + std::to_string(dev), rt.device().memory_stats().total, driver_hooks(&rt),
                                   caching_enabled());
    caches_[dev].store(c, std::memory_order_release);
    return *c;
  }
  /// The caching allocator of `dev` if it was created; nullptr otherwise.
  CachingAllocator* existing(int dev) {
    return dev >= 0 && dev < kMaxDevices ? caches_[dev].load(std::memory_order_acquire) : nullptr;
  }

  uint64_t new_pool(int dev) {
    CachingAllocator& c = cache(dev);
    const uint64_t id = next_pool_.fetch_add(1);
    translated([&] { c.create_pool(id); });
    std::lock_guard lock(create_mu_);
    pool_devices_[id] = dev;
    return id;
  }
  /// The device of memory pool `id`; -1 when there is none.
  int pool_device(uint64_t id) {
    std::lock_guard lock(create_mu_);
    const auto it = pool_devices_.find(id);
    return it == pool_devices_.end() ? -1 : it->second;
  }
  void forget_pool(uint64_t id) {
    std::lock_guard lock(create_mu_);
    pool_devices_.erase(id);
  }

  static void deleter(void* ctx) {
    auto* b = static_cast<CacheBlock*>(ctx);
    // A child forked after the device started drops the tensors it inherited without touching the
    // cache: its lock may have been held by another thread of the parent at the fork.
    if (!b || driver::Driver::forked_child()) return;
    // A deleter runs in destructors and must not throw; free() does not, bar std::bad_alloc.
    try {
      CachingAllocator& owner = CachingAllocator::owner(b);
      // A block other streams were recorded on is freed for the sanitizer only when the next
      // allocation names its memory: its own stream's order does not cover theirs.
      if (sanitizer::checks() != 0 && !owner.used_elsewhere(b)) {
        try {
          sanitizer::freed(device_of_cache(&owner), CachingAllocator::stream(b), CachingAllocator::address(b));
        } catch (const std::exception& e) {
          TORCH_WARN("spyre: the device sanitizer could not be told of a free: ", e.what());
        }
      }
      owner.free(b);
    } catch (const std::exception& e) {
      TORCH_WARN("spyre: could not free a block of device memory: ", e.what());
    }
  }

 private:
  std::array<std::atomic<CachingAllocator*>, kMaxDevices> caches_{};
  std::mutex create_mu_;
  std::unordered_map<uint64_t, int> pool_devices_;
  std::atomic<uint64_t> next_pool_{1};
};

Allocator g_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

int device_of_cache(const CachingAllocator* c) {
  for (int dev = 0; dev < kMaxDevices; ++dev) {
    if (g_allocator.existing(dev) == c) return dev;
  }
  return -1;
}

// The runtime's own allocations (programs, launch arguments) may find the device full of cached
// tensor memory: give it back to them.
const bool g_release_registered = [] {
  set_release_cached_memory([](int dev) {
    if (CachingAllocator* c = g_allocator.existing(dev)) {
      try {
        c->empty_cache();
      } catch (const std::exception& e) {
        TORCH_WARN("spyre: emptying the memory cache of device ", dev, ": ", e.what());
      }
    }
  });
  return true;
}();

// The caching allocator that holds memory pool `pool`; ValueError if there is none.
CachingAllocator& pool_cache(uint64_t pool) {
  const int dev = g_allocator.pool_device(pool);
  TORCH_CHECK_VALUE(dev >= 0, "spyre: memory pool ", pool, " does not exist or was released");
  return g_allocator.cache(dev);
}

}  // namespace

c10::DeviceAllocator& device_allocator() {
  return g_allocator;
}

c10::Storage storage_part(const c10::Storage& block, uint64_t offset, uint64_t nbytes) {
  TORCH_CHECK_VALUE(offset <= block.nbytes() && nbytes <= block.nbytes() - offset, "spyre: bytes [", offset, ", ",
                    offset + nbytes, ") are not in a block of ", block.nbytes(), " bytes");
  // An empty part points nowhere, as an empty tensor's storage does (torch.save tells storages
  // apart by pointer: an empty part would otherwise share its neighbour's).
  if (nbytes == 0)
    return {c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, block.device()), &g_allocator, true};
  void* at = device_pointer(block.device().index(), device_address(block.data()) + offset);
  auto ctx = std::make_unique<Part>(Part{block});
  c10::DataPtr ptr(at, ctx.get(), &delete_part, block.device());
  static_cast<void>(ctx.release());  // the DataPtr owns it now
  return {c10::Storage::use_byte_size_t(), static_cast<size_t>(nbytes), std::move(ptr), &g_allocator, true};
}

int device_of_pointer(const void* p) {
  const int dev = static_cast<int>(reinterpret_cast<uint64_t>(p) >> kDevicePointerShift) - 1;
  return g_allocator.existing(dev) ? dev : -1;
}

void set_memory_fraction(int device, double fraction) {
  CachingAllocator& c = g_allocator.cache(device);
  translated([&] { c.set_memory_fraction(fraction); });
}

double memory_fraction(int device) {
  return g_allocator.cache(device).memory_fraction();
}

uint64_t create_mem_pool(int device) {
  return g_allocator.new_pool(device);
}

void reserve_mem_pool(uint64_t pool, uint64_t bytes) {
  CachingAllocator& c = pool_cache(pool);
  const int dev = g_allocator.pool_device(pool);
  const c10::Device device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(dev));
  const int64_t stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getStream(device).id();
  translated([&] { c.reserve(pool, bytes, stream); });
}

void release_mem_pool(uint64_t pool) noexcept {
  if (driver::Driver::forked_child()) return;
  const int dev = g_allocator.pool_device(pool);
  CachingAllocator* c = g_allocator.existing(dev);
  if (!c) return;
  g_allocator.forget_pool(pool);
  try {
    c->release_pool(pool);
  } catch (const std::exception& e) {
    TORCH_WARN("spyre: could not release memory pool ", pool, ": ", e.what());
  }
}

void begin_mem_pool(uint64_t pool) {
  const int dev = g_allocator.pool_device(pool);
  TORCH_CHECK_VALUE(dev >= 0, "spyre: memory pool ", pool, " does not exist or was released");
  t_pools.emplace_back(dev, pool);
}

void end_mem_pool(uint64_t pool) {
  TORCH_CHECK_VALUE(!t_pools.empty() && t_pools.back().second == pool, "spyre: memory pool ", pool,
                    " is not the innermost pool in use on this thread");
  t_pools.pop_back();
}

std::vector<double> time_alloc_free(int device, uint64_t bytes, int batches, int per_batch, bool driver_path,
                                    int background) {
  TORCH_CHECK_VALUE(batches > 0 && per_batch > 0 && background >= 0, "spyre: batches and per_batch must be positive ",
                    "and background not negative (got ", batches, ", ", per_batch, " and ", background, ")");
  DeviceRuntime& rt = DeviceRuntime::get(device);
  const int saved = current_device();
  set_current_device(device);
  std::vector<uint64_t> driver_blocks;
  std::vector<c10::DataPtr> cache_blocks;
  for (int i = 0; i < background; ++i) {
    const uint64_t n = uint64_t{4096} * (1 + i % 64);
    if (driver_path) {
      driver_blocks.push_back(rt.alloc(n));
    } else {
      cache_blocks.push_back(g_allocator.allocate(n));
    }
  }
  for (size_t i = 1; i < driver_blocks.size(); i += 2) rt.free(std::exchange(driver_blocks[i], 0));
  for (size_t i = 1; i < cache_blocks.size(); i += 2) cache_blocks[i].clear();
  std::vector<double> us;
  us.reserve(batches);
  for (int i = 0; i < batches; ++i) {
    const auto start = std::chrono::steady_clock::now();
    for (int j = 0; j < per_batch; ++j) {
      if (driver_path) {
        rt.free(rt.alloc(bytes));
      } else {
        c10::DataPtr p = g_allocator.allocate(bytes);
      }
    }
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    us.push_back(took.count() / per_batch);
  }
  for (uint64_t addr : driver_blocks) {
    if (addr) rt.free(addr);
  }
  set_current_device(saved);
  return us;
}

}  // namespace spyre::backend
