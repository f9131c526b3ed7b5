// The caching device allocator of one card: a cache of device memory blocks between the tensors and
// the driver's physical allocator. Torch-free (only the standard library), so that it is unit-tested
// without a device: the driver, the streams and the error types reach it through callbacks.
//
// Memory comes from the driver in segments; a segment is split into blocks, and freed blocks stay
// cached for the next request of the same stream instead of going back to the driver. See
// docs/user-guide.md, "Device memory", for the policies a user sees.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace spyre::backend {

/// Requests are rounded up to a multiple of this, so neighbouring blocks keep the driver's alignment.
inline constexpr uint64_t kBlockRound = 512;
/// Requests up to this size are served by the small pool...
inline constexpr uint64_t kSmallRequest = uint64_t{1} << 20;
/// ...from segments of this size, which hold many small tensors.
inline constexpr uint64_t kSmallSegment = uint64_t{2} << 20;
/// Larger requests below this size share segments of kMidSegment; larger ones get a segment of
/// their own, rounded up to kSegmentRound.
inline constexpr uint64_t kMidRequest = uint64_t{10} << 20;
inline constexpr uint64_t kMidSegment = uint64_t{20} << 20;
inline constexpr uint64_t kSegmentRound = uint64_t{2} << 20;

/// One figure with its history, as c10's Stat: what it is now, its highest value since the last
/// peak reset, and the totals added and removed since the last accumulated reset.
struct MemoryStat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;

  void increase(int64_t n) {
    current += n;
    allocated += n;
    if (current > peak) peak = current;
  }
  void decrease(int64_t n) {
    current -= n;
    freed += n;
  }
};

/// Index of a figure by pool size class, in the order of c10's StatType.
enum PoolClass : size_t { kAllPools = 0, kSmallPool = 1, kLargePool = 2 };
using MemoryStatArray = std::array<MemoryStat, 3>;

/// The allocator's figures, with the meanings of torch.cuda.memory_stats():
/// allocation/allocated_bytes: blocks handed out and not yet freed by their tensor;
/// active/active_bytes: those plus freed blocks still waiting for a recorded stream;
/// segment/reserved_bytes: memory held from the driver; inactive_split(_bytes): free blocks in
/// partly used segments (they cannot go back to the driver); requested_bytes: the sizes asked for
/// (before rounding) of the active blocks.
struct AllocatorStats {
  MemoryStatArray allocation, segment, active, inactive_split;
  MemoryStatArray allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes;
  int64_t num_alloc_retries = 0;  // segment requests that failed and were retried after emptying the cache
  int64_t num_ooms = 0;           // out-of-memory errors thrown
  int64_t num_device_alloc = 0;   // segments taken from the driver
  int64_t num_device_free = 0;    // segments given back
};

/// What the allocator needs from the outside world. Called with the allocator's lock held, so they
/// must not call back into it.
struct AllocatorHooks {
  /// Takes `bytes` of device memory from the driver into `*addr`; false when it has none left.
  /// Other failures may throw; the allocator is left unchanged.
  std::function<bool(uint64_t bytes, uint64_t* addr)> segment_alloc;
  /// Gives a segment back to the driver. Must not throw.
  std::function<void(uint64_t addr, uint64_t bytes)> segment_free;
  /// Where `stream` has got to now (a mark for stream_passed). Must not throw.
  std::function<uint64_t(int64_t stream)> stream_mark;
  /// True once the device has finished the work `stream` had queued when `mark` was taken. Must
  /// neither throw nor block.
  std::function<bool(int64_t stream, uint64_t mark)> stream_passed;
};

/// Thrown when a request cannot be served even after emptying the cache; the message says why.
class OutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A block handed out by CachingAllocator::malloc; opaque outside the allocator.
struct CacheBlock;

class CachingAllocator {
 public:
  /// `name` prefixes messages ("spyre:0"); `device_bytes` is what the memory fraction applies to.
  /// With `caching` false every request gets a segment of its own, given back when it is freed
  /// (to find memory errors with the driver's checks).
  CachingAllocator(std::string name, uint64_t device_bytes, AllocatorHooks hooks, bool caching = true);
  /// Forgets the blocks without giving segments back: it runs at process exit, when the device
  /// may already be gone.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `bytes` (0 is served as 1) for work on `stream`, from memory pool `pool`
  /// (0: the default pool). Throws OutOfMemory when the driver has no segment for it even after
  /// the cache was emptied, or the memory fraction forbids one; std::invalid_argument for an
  /// unknown or released pool.
  CacheBlock* malloc(uint64_t bytes, int64_t stream, uint64_t pool = 0);
  /// Returns a block from malloc. It is reused at once on its own stream, or, if other streams were
  /// recorded on it, once each of them has finished the work queued before this call. Never throws
  /// (except std::bad_alloc).
  void free(CacheBlock* block);
  /// Notes that work on `stream` uses `block`, so that free() waits for that stream too.
  void record_stream(CacheBlock* block, int64_t stream);

  /// Device address, usable size and owner of a block.
  static uint64_t address(const CacheBlock* block);
  static uint64_t size(const CacheBlock* block);
  /// The stream a block serves (the one it was allocated for).
  static int64_t stream(const CacheBlock* block);
  /// Whether other streams were recorded on a block (record_stream) since it was handed out.
  bool used_elsewhere(const CacheBlock* block) const;
  static CachingAllocator& owner(const CacheBlock* block);

  /// Gives every fully free segment of `pool` back to the driver; pool 0 means the default pool
  /// and the released pools. Frees whose streams have finished are completed first.
  void empty_cache(uint64_t pool = 0);

  /// Limits reserved memory to `fraction` of the device's; std::invalid_argument outside [0, 1].
  /// Memory already reserved stays; only new segments are refused.
  void set_memory_fraction(double fraction);
  double memory_fraction() const;

  /// Creates memory pool `id` (nonzero): blocks allocated into it come from its own segments.
  /// std::invalid_argument if `id` is 0 or in use.
  void create_pool(uint64_t id);
  /// Takes at least `bytes` (rounded up to kSegmentRound) from the driver into pool `id`'s large
  /// pool for `stream`, cached until used. Throws as malloc.
  void reserve(uint64_t id, uint64_t bytes, int64_t stream);
  /// Releases pool `id`: its cached segments go back to the driver now, the others as soon as
  /// their blocks are freed. std::invalid_argument for an unknown pool.
  void release_pool(uint64_t id);

  AllocatorStats stats() const;
  /// Sets every peak to its current value.
  void reset_peak_stats();
  /// Zeroes the allocated and freed totals and the event counters.
  void reset_accumulated_stats();

 private:
  friend struct CacheBlock;
  struct Pool;
  struct PoolPair;
  struct Pending;

  PoolPair& pool_pair(uint64_t id);
  CacheBlock* best_fit(Pool& pool, int64_t stream, uint64_t size);
  CacheBlock* new_segment(Pool& pool, int64_t stream, uint64_t size, bool* fraction_refused);
  CacheBlock* grow(Pool& pool, int64_t stream, uint64_t request, uint64_t size);
  void take(CacheBlock* b, uint64_t size, uint64_t requested);
  void free_block(CacheBlock* b);
  void insert_free(CacheBlock* b);
  void erase_free(CacheBlock* b);
  void release_segment(CacheBlock* b);
  void release_free_segments(PoolPair& pp);
  void release_cached(PoolPair* also);
  void complete_pending();
  [[noreturn]] void throw_oom(uint64_t request, uint64_t segment, bool fraction_refused);
  static PoolClass class_of(const Pool& pool);

  const std::string name_;
  const uint64_t device_bytes_;
  const AllocatorHooks hooks_;
  const bool caching_;
  mutable std::mutex mu_;
  double fraction_ = 1.0;
  std::unique_ptr<PoolPair> default_;
  std::unordered_map<uint64_t, std::unique_ptr<PoolPair>> pools_;
  std::vector<Pending> pending_;
  AllocatorStats stats_;
};

}  // namespace spyre::backend
