// The caching allocator's bookkeeping: free blocks in size-ordered sets per pool, blocks of a
// segment linked in address order so a freed block merges with its free neighbours.
#include "caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace spyre::backend {

struct CacheBlock {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t requested = 0;  // bytes asked for; 0 while free
  int64_t stream = 0;      // the stream it serves: every block of a segment has the segment's stream
  CachingAllocator::Pool* pool = nullptr;
  CachingAllocator* owner = nullptr;
  CacheBlock* prev = nullptr;  // neighbours in the same segment, by address
  CacheBlock* next = nullptr;
  bool allocated = false;     // handed out, or freed but waiting for recorded streams
  std::vector<int64_t> uses;  // streams other than `stream` recorded while handed out

  bool split() const { return prev != nullptr || next != nullptr; }
};

namespace {

// Free blocks by stream, then size (best fit is the first not smaller), then address (lowest first,
// which packs live blocks towards the start of segments).
struct BlockLess {
  bool operator()(const CacheBlock* a, const CacheBlock* b) const {
    return std::tie(a->stream, a->size, a->addr) < std::tie(b->stream, b->size, b->addr);
  }
};

uint64_t round_up(uint64_t v, uint64_t m) {
  return (v + m - 1) / m * m;
}

// The segment that a request of (rounded) `size` asks the driver for.
uint64_t segment_size(uint64_t size) {
  if (size <= kSmallRequest) return kSmallSegment;
  if (size < kMidRequest) return kMidSegment;
  return round_up(size, kSegmentRound);
}

// "3.00 MiB", "200.00 GiB": as the driver prints sizes, in the larger unit that keeps them above 1.
std::string human(uint64_t bytes) {
  char buf[32];
  const bool gib = bytes >= (uint64_t{1} << 30);
  std::snprintf(buf, sizeof buf, "%.2f %s", static_cast<double>(bytes) / static_cast<double>(gib ? 1 << 30 : 1 << 20),
                gib ? "GiB" : "MiB");
  return buf;
}

}  // namespace

struct CachingAllocator::Pool {
  std::set<CacheBlock*, BlockLess> free;
  bool small = false;
  PoolPair* pair = nullptr;
};

// A memory pool: the default one, or one a user created. Its small and large blocks never mix.
struct CachingAllocator::PoolPair {
  explicit PoolPair(uint64_t pool_id) : id(pool_id) {
    small.small = true;
    small.pair = large.pair = this;
  }
  uint64_t id;
  Pool small, large;
  int64_t segments = 0;
  bool released = false;  // by release_pool: segments go back to the driver once free
};

// A freed block that recorded streams may still be using: where each of them was at free().
struct CachingAllocator::Pending {
  CacheBlock* block;
  std::vector<std::pair<int64_t, uint64_t>> marks;
};

CachingAllocator::CachingAllocator(std::string name, uint64_t device_bytes, AllocatorHooks hooks, bool caching)
    : name_(std::move(name)),
      device_bytes_(device_bytes),
      hooks_(std::move(hooks)),
      caching_(caching),
      default_(std::make_unique<PoolPair>(0)) {}

CachingAllocator::~CachingAllocator() {
  auto drop = [](PoolPair& pp) {
    for (Pool* p : {&pp.small, &pp.large}) {
      for (CacheBlock* b : p->free) delete b;
    }
  };
  drop(*default_);
  for (auto& [id, pp] : pools_) drop(*pp);
  // Blocks still handed out are owned by their tensors' deleters, which must not run after this.
}

PoolClass CachingAllocator::class_of(const Pool& pool) {
  return pool.small ? kSmallPool : kLargePool;
}

CachingAllocator::PoolPair& CachingAllocator::pool_pair(uint64_t id) {
  if (id == 0) return *default_;
  const auto it = pools_.find(id);
  if (it == pools_.end() || it->second->released) {
    throw std::invalid_argument(name_ + ": memory pool " + std::to_string(id) + " does not exist or was released");
  }
  return *it->second;
}

CacheBlock* CachingAllocator::malloc(uint64_t bytes, int64_t stream, uint64_t pool_id) {
  std::lock_guard lock(mu_);
  if (!pending_.empty()) complete_pending();
  const uint64_t size = round_up(std::max<uint64_t>(bytes, 1), kBlockRound);
  PoolPair& pp = pool_pair(pool_id);
  Pool& pool = size <= kSmallRequest ? pp.small : pp.large;
  CacheBlock* b = caching_ ? best_fit(pool, stream, size) : nullptr;
  if (b) {
    erase_free(b);
  } else {
    b = grow(pool, stream, size, caching_ ? segment_size(size) : size);
  }
  take(b, size, bytes);
  return b;
}

CacheBlock* CachingAllocator::best_fit(Pool& pool, int64_t stream, uint64_t size) {
  CacheBlock key;
  key.stream = stream;
  key.size = size;
  const auto it = pool.free.lower_bound(&key);
  if (it == pool.free.end() || (*it)->stream != stream) return nullptr;
  return *it;
}

// A fresh segment of `size` for a request of `request` rounded bytes. When the driver (or the
// memory fraction) refuses it, the cache is emptied and the segment asked for again; a request
// that would share a 20 MiB segment then settles for one of its own size, so that near the limit
// it is not refused for the sake of later neighbours.
CacheBlock* CachingAllocator::grow(Pool& pool, int64_t stream, uint64_t request, uint64_t size) {
  bool fraction_refused = false;
  if (CacheBlock* b = new_segment(pool, stream, size, &fraction_refused)) return b;
  ++stats_.num_alloc_retries;
  release_cached(pool.pair);
  if (CacheBlock* b = new_segment(pool, stream, size, &fraction_refused)) return b;
  const uint64_t tight = round_up(request, kSegmentRound);
  if (!pool.small && tight < size) {
    if (CacheBlock* b = new_segment(pool, stream, tight, &fraction_refused)) return b;
  }
  ++stats_.num_ooms;
  throw_oom(request, size, fraction_refused);
}

CacheBlock* CachingAllocator::new_segment(Pool& pool, int64_t stream, uint64_t size, bool* fraction_refused) {
  const uint64_t reserved = static_cast<uint64_t>(stats_.reserved_bytes[kAllPools].current);
  if (fraction_ < 1.0 && static_cast<double>(reserved + size) > fraction_ * static_cast<double>(device_bytes_)) {
    *fraction_refused = true;
    return nullptr;
  }
  uint64_t addr = 0;
  if (!hooks_.segment_alloc(size, &addr)) return nullptr;
  *fraction_refused = false;
  auto* b = new CacheBlock;
  b->addr = addr;
  b->size = size;
  b->stream = stream;
  b->pool = &pool;
  b->owner = this;
  ++pool.pair->segments;
  ++stats_.num_device_alloc;
  for (size_t c : {size_t{kAllPools}, size_t{class_of(pool)}}) {
    stats_.segment[c].increase(1);
    stats_.reserved_bytes[c].increase(static_cast<int64_t>(size));
  }
  return b;
}

[[noreturn]] void CachingAllocator::throw_oom(uint64_t request, uint64_t segment, bool fraction_refused) {
  const auto& s = stats_;
  std::string msg = name_ + ": out of device memory: tried to allocate " + human(request) + " (" +
                    std::to_string(request) + " bytes, in a segment of " + std::to_string(segment) + " bytes); " +
                    human(static_cast<uint64_t>(s.reserved_bytes[kAllPools].current)) + " reserved by the allocator, " +
                    human(static_cast<uint64_t>(s.allocated_bytes[kAllPools].current)) + " allocated, " +
                    human(device_bytes_) + " on the device";
  if (fraction_refused) {
    char f[32];
    std::snprintf(f, sizeof f, "%g", fraction_);
    msg += "; the per-process memory fraction " + std::string(f) + " allows " +
           human(static_cast<uint64_t>(fraction_ * static_cast<double>(device_bytes_))) +
           " (raise it with set_per_process_memory_fraction)";
  }
  throw OutOfMemory(msg);
}

// Hands out `b` (out of the free set: a cached block or a fresh segment) for a request of `size`
// rounded bytes, splitting off the rest when it is worth keeping as a block of its own.
void CachingAllocator::take(CacheBlock* b, uint64_t size, uint64_t requested) {
  Pool& pool = *b->pool;
  const uint64_t rest = b->size - size;
  // A small block's remainder always serves another small request; a large one's is kept only if
  // it is itself large, so that large segments do not fill with slivers no large request fits.
  const bool split = caching_ && (pool.small ? rest >= kBlockRound : rest > kSmallRequest);
  if (split) {
    auto* r = new CacheBlock;
    r->addr = b->addr + size;
    r->size = rest;
    r->stream = b->stream;
    r->pool = &pool;
    r->owner = this;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = size;
    insert_free(r);
  }
  b->allocated = true;
  b->requested = requested;
  for (size_t c : {size_t{kAllPools}, size_t{class_of(pool)}}) {
    stats_.allocation[c].increase(1);
    stats_.allocated_bytes[c].increase(static_cast<int64_t>(b->size));
    stats_.active[c].increase(1);
    stats_.active_bytes[c].increase(static_cast<int64_t>(b->size));
    stats_.requested_bytes[c].increase(static_cast<int64_t>(requested));
  }
}

void CachingAllocator::free(CacheBlock* b) {
  std::lock_guard lock(mu_);
  for (size_t c : {size_t{kAllPools}, size_t{class_of(*b->pool)}}) {
    stats_.allocation[c].decrease(1);
    stats_.allocated_bytes[c].decrease(static_cast<int64_t>(b->size));
  }
  if (b->uses.empty()) {
    free_block(b);
    return;
  }
  Pending p{b, {}};
  p.marks.reserve(b->uses.size());
  for (int64_t s : b->uses) p.marks.emplace_back(s, hooks_.stream_mark(s));
  b->uses.clear();
  pending_.push_back(std::move(p));
}

void CachingAllocator::record_stream(CacheBlock* b, int64_t stream) {
  std::lock_guard lock(mu_);
  if (stream == b->stream) return;  // its own stream's work is ordered before any reuse
  if (std::find(b->uses.begin(), b->uses.end(), stream) == b->uses.end()) b->uses.push_back(stream);
}

// Frees whose recorded streams have all passed their marks become free blocks. Never waits.
void CachingAllocator::complete_pending() {
  auto done = [this](const Pending& p) {
    return std::all_of(p.marks.begin(), p.marks.end(),
                       [this](const auto& m) { return hooks_.stream_passed(m.first, m.second); });
  };
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (done(pending_[i])) {
      free_block(pending_[i].block);
    } else {
      pending_[kept++] = std::move(pending_[i]);
    }
  }
  pending_.resize(kept);
}

// `b` is no longer used by anyone: merge it with free neighbours and cache it (or give its segment
// back when the pool does not cache).
void CachingAllocator::free_block(CacheBlock* b) {
  Pool& pool = *b->pool;
  for (size_t c : {size_t{kAllPools}, size_t{class_of(pool)}}) {
    stats_.active[c].decrease(1);
    stats_.active_bytes[c].decrease(static_cast<int64_t>(b->size));
    stats_.requested_bytes[c].decrease(static_cast<int64_t>(b->requested));
  }
  b->allocated = false;
  b->requested = 0;
  if (CacheBlock* p = b->prev; p && !p->allocated) {
    erase_free(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (CacheBlock* n = b->next; n && !n->allocated) {
    erase_free(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  insert_free(b);
  if ((!caching_ || pool.pair->released) && !b->split()) release_segment(b);
}

void CachingAllocator::insert_free(CacheBlock* b) {
  b->pool->free.insert(b);
  if (b->split()) {
    for (size_t c : {size_t{kAllPools}, size_t{class_of(*b->pool)}}) {
      stats_.inactive_split[c].increase(1);
      stats_.inactive_split_bytes[c].increase(static_cast<int64_t>(b->size));
    }
  }
}

void CachingAllocator::erase_free(CacheBlock* b) {
  b->pool->free.erase(b);
  if (b->split()) {
    for (size_t c : {size_t{kAllPools}, size_t{class_of(*b->pool)}}) {
      stats_.inactive_split[c].decrease(1);
      stats_.inactive_split_bytes[c].decrease(static_cast<int64_t>(b->size));
    }
  }
}

// `b` is a free block spanning its whole segment: give the segment back to the driver.
void CachingAllocator::release_segment(CacheBlock* b) {
  Pool& pool = *b->pool;
  PoolPair* pp = pool.pair;
  erase_free(b);
  hooks_.segment_free(b->addr, b->size);
  ++stats_.num_device_free;
  for (size_t c : {size_t{kAllPools}, size_t{class_of(pool)}}) {
    stats_.segment[c].decrease(1);
    stats_.reserved_bytes[c].decrease(static_cast<int64_t>(b->size));
  }
  delete b;
  if (--pp->segments == 0 && pp->released) pools_.erase(pp->id);  // destroys `pool` too
}

void CachingAllocator::release_free_segments(PoolPair& pp) {
  std::vector<CacheBlock*> whole;
  for (Pool* p : {&pp.small, &pp.large}) {
    for (CacheBlock* b : p->free) {
      if (!b->split()) whole.push_back(b);
    }
  }
  if (pp.released && pp.segments == 0) {
    pools_.erase(pp.id);
    return;
  }
  for (CacheBlock* b : whole) release_segment(b);  // may erase `pp` with its last segment
}

// Empties the cache of the default pool, the released pools and `also` (the pool a failed request
// was for). Other live user pools keep what they reserved: that is what they are for.
void CachingAllocator::release_cached(PoolPair* also) {
  if (!pending_.empty()) complete_pending();
  release_free_segments(*default_);
  std::vector<PoolPair*> targets;
  for (auto& [id, pp] : pools_) {
    if (pp->released || pp.get() == also) targets.push_back(pp.get());
  }
  for (PoolPair* pp : targets) release_free_segments(*pp);
}

void CachingAllocator::empty_cache(uint64_t pool_id) {
  std::lock_guard lock(mu_);
  if (pool_id == 0) {
    release_cached(nullptr);
    return;
  }
  if (!pending_.empty()) complete_pending();
  release_free_segments(pool_pair(pool_id));
}

void CachingAllocator::set_memory_fraction(double fraction) {
  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    throw std::invalid_argument(name_ + ": the memory fraction must be in [0, 1] (got " + std::to_string(fraction) +
                                ")");
  }
  std::lock_guard lock(mu_);
  fraction_ = fraction;
}

double CachingAllocator::memory_fraction() const {
  std::lock_guard lock(mu_);
  return fraction_;
}

void CachingAllocator::create_pool(uint64_t id) {
  std::lock_guard lock(mu_);
  if (id == 0 || pools_.count(id)) {
    throw std::invalid_argument(name_ + ": memory pool id " + std::to_string(id) + " is reserved or in use");
  }
  pools_.emplace(id, std::make_unique<PoolPair>(id));
}

void CachingAllocator::reserve(uint64_t id, uint64_t bytes, int64_t stream) {
  std::lock_guard lock(mu_);
  PoolPair& pp = pool_pair(id);
  const uint64_t size = round_up(std::max<uint64_t>(bytes, 1), kSegmentRound);
  insert_free(grow(pp.large, stream, size, size));
}

void CachingAllocator::release_pool(uint64_t id) {
  std::lock_guard lock(mu_);
  PoolPair& pp = pool_pair(id);
  pp.released = true;
  release_free_segments(pp);
}

uint64_t CachingAllocator::address(const CacheBlock* b) {
  return b->addr;
}
uint64_t CachingAllocator::size(const CacheBlock* b) {
  return b->size;
}
int64_t CachingAllocator::stream(const CacheBlock* b) {
  return b->stream;
}
bool CachingAllocator::used_elsewhere(const CacheBlock* b) const {
  std::lock_guard lock(mu_);
  return !b->uses.empty();
}
CachingAllocator& CachingAllocator::owner(const CacheBlock* b) {
  return *b->owner;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

namespace {
template <typename F>
void for_each_stat(AllocatorStats& s, F f) {
  for (MemoryStatArray* a : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                             &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
    for (MemoryStat& m : *a) f(m);
  }
}
}  // namespace

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mu_);
  for_each_stat(stats_, [](MemoryStat& m) { m.peak = m.current; });
}

void CachingAllocator::reset_accumulated_stats() {
  std::lock_guard lock(mu_);
  for_each_stat(stats_, [](MemoryStat& m) { m.allocated = m.freed = 0; });
  stats_.num_alloc_retries = stats_.num_ooms = stats_.num_device_alloc = stats_.num_device_free = 0;
}

}  // namespace spyre::backend
