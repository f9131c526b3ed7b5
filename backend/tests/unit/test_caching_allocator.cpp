// Unit tests of the caching allocator's core with a fake driver and fake streams: size classes,
// splitting and merging, per-stream reuse, the retry on out of memory, the memory fraction, memory
// pools, and the figures, each against values worked out by hand from the documented policy.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "caching_allocator.h"

using namespace spyre::backend;

namespace {

constexpr uint64_t KiB = 1024;
constexpr uint64_t MiB = 1024 * KiB;

// A driver with `capacity` bytes that never reuses an address, and streams whose progress the
// test moves by hand: a stream's mark is how much work it has queued, passed once that much is done.
struct Fake {
  uint64_t capacity;
  uint64_t used = 0;
  uint64_t next_addr = 1 << 20;
  std::map<uint64_t, uint64_t> segments;  // addr -> bytes
  std::map<int64_t, uint64_t> queued, done;

  explicit Fake(uint64_t cap) : capacity(cap) {}

  AllocatorHooks hooks() {
    AllocatorHooks h;
    h.segment_alloc = [this](uint64_t bytes, uint64_t* addr) {
      if (used + bytes > capacity) return false;
      *addr = next_addr;
      next_addr += bytes;
      used += bytes;
      segments[*addr] = bytes;
      return true;
    };
    h.segment_free = [this](uint64_t addr, uint64_t bytes) {
      REQUIRE(segments.count(addr));
      CHECK(segments[addr] == bytes);
      used -= bytes;
      segments.erase(addr);
    };
    h.stream_mark = [this](int64_t s) { return queued[s]; };
    h.stream_passed = [this](int64_t s, uint64_t mark) { return done[s] >= mark; };
    return h;
  }
};

struct Fixture {
  Fake fake;
  CachingAllocator a;
  explicit Fixture(uint64_t capacity = 1024 * MiB, uint64_t device_bytes = 1024 * MiB, bool caching = true)
      : fake(capacity), a("spyre:test", device_bytes, fake.hooks(), caching) {}
};

int64_t cur(const MemoryStatArray& s, PoolClass c = kAllPools) {
  return s[c].current;
}

}  // namespace

TEST_CASE("small requests are rounded to 512 bytes and carved from 2 MiB segments") {
  Fixture f;
  CacheBlock* x = f.a.malloc(1000, 0);
  CacheBlock* y = f.a.malloc(1000, 0);
  CHECK(CachingAllocator::size(x) == 1024);
  CHECK(CachingAllocator::address(y) == CachingAllocator::address(x) + 1024);
  CHECK(f.fake.segments.size() == 1);
  CHECK(f.fake.segments.begin()->second == 2 * MiB);
  const AllocatorStats s = f.a.stats();
  CHECK(cur(s.allocated_bytes) == 2048);
  CHECK(cur(s.allocated_bytes, kSmallPool) == 2048);
  CHECK(cur(s.allocated_bytes, kLargePool) == 0);
  CHECK(cur(s.requested_bytes) == 2000);
  CHECK(cur(s.reserved_bytes) == 2 * MiB);
  CHECK(cur(s.segment) == 1);
  CHECK(cur(s.allocation) == 2);
  CHECK(cur(s.inactive_split) == 1);  // the rest of the segment after y
  CHECK(cur(s.inactive_split_bytes) == 2 * MiB - 2048);
  f.a.free(x);
  f.a.free(y);
}

TEST_CASE("a freed block is reused for the next request of its size without a driver call") {
  Fixture f;
  CacheBlock* x = f.a.malloc(4 * MiB, 0);
  const uint64_t addr = CachingAllocator::address(x);
  f.a.free(x);
  CacheBlock* y = f.a.malloc(4 * MiB, 0);
  CHECK(CachingAllocator::address(y) == addr);
  CHECK(f.a.stats().num_device_alloc == 1);
  f.a.free(y);
}

TEST_CASE("large requests: 20 MiB segments below 10 MiB, their own 2 MiB-rounded segment above") {
  Fixture f;
  CacheBlock* a = f.a.malloc(3 * MiB, 0);
  CHECK(f.fake.segments.rbegin()->second == 20 * MiB);
  CacheBlock* b = f.a.malloc(12 * MiB, 0);  // fits in the 17 MiB left: no new segment
  CHECK(f.fake.segments.size() == 1);
  CHECK(CachingAllocator::address(b) == CachingAllocator::address(a) + 3 * MiB);
  CacheBlock* c = f.a.malloc(31 * MiB + 1, 0);
  CHECK(f.fake.segments.size() == 2);
  CHECK(f.fake.segments.rbegin()->second == 32 * MiB);
  // 32 MiB - (31 MiB + 512) is under 1 MiB: not worth a block, so c keeps it.
  CHECK(CachingAllocator::size(c) == 32 * MiB);
  const AllocatorStats s = f.a.stats();
  CHECK(cur(s.allocated_bytes, kLargePool) == static_cast<int64_t>((3 + 12 + 32) * MiB));
  CHECK(cur(s.reserved_bytes, kLargePool) == static_cast<int64_t>(52 * MiB));
  CHECK(cur(s.requested_bytes) == static_cast<int64_t>((46 * MiB) + 1));
  CHECK(cur(s.inactive_split_bytes, kLargePool) == static_cast<int64_t>(5 * MiB));
  f.a.free(a);
  f.a.free(b);
  f.a.free(c);
}

TEST_CASE("freed neighbours merge back into a whole segment, which empty_cache returns") {
  Fixture f;
  CacheBlock* a = f.a.malloc(512, 0);
  CacheBlock* b = f.a.malloc(512, 0);
  CacheBlock* c = f.a.malloc(512, 0);
  f.a.free(a);
  f.a.free(c);  // merges with the rest of the segment
  AllocatorStats s = f.a.stats();
  CHECK(cur(s.inactive_split) == 2);  // a, and c with the tail
  CHECK(cur(s.inactive_split_bytes) == static_cast<int64_t>(2 * MiB - 512));
  f.a.empty_cache();
  CHECK(f.fake.segments.size() == 1);  // still split around b
  f.a.free(b);
  s = f.a.stats();
  CHECK(cur(s.inactive_split) == 0);
  CHECK(cur(s.reserved_bytes) == static_cast<int64_t>(2 * MiB));
  f.a.empty_cache();
  s = f.a.stats();
  CHECK(f.fake.segments.empty());
  CHECK(cur(s.reserved_bytes) == 0);
  CHECK(cur(s.segment) == 0);
  CHECK(s.num_device_alloc == 1);
  CHECK(s.num_device_free == 1);
}

TEST_CASE("a block serves only the stream it was allocated on") {
  Fixture f;
  CacheBlock* a = f.a.malloc(4096, 1);
  const uint64_t addr = CachingAllocator::address(a);
  f.a.free(a);
  CacheBlock* b = f.a.malloc(4096, 2);
  CHECK(CachingAllocator::address(b) != addr);
  CHECK(f.fake.segments.size() == 2);
  CacheBlock* c = f.a.malloc(4096, 1);
  CHECK(CachingAllocator::address(c) == addr);
  f.a.free(b);
  f.a.free(c);
}

TEST_CASE("record_stream keeps a freed block out of the cache until the stream passes its mark") {
  Fixture f;
  f.fake.queued[2] = 5;
  f.fake.done[2] = 3;
  CacheBlock* a = f.a.malloc(8192, 1);
  const uint64_t addr = CachingAllocator::address(a);
  f.a.record_stream(a, 2);
  f.a.record_stream(a, 1);  // its own stream: nothing to wait for
  f.a.free(a);
  f.fake.queued[2] = 9;  // work queued after the free does not matter
  AllocatorStats s = f.a.stats();
  CHECK(cur(s.allocated_bytes) == 0);
  CHECK(cur(s.active_bytes) == 8192);
  CHECK(cur(s.active) == 1);
  CacheBlock* b = f.a.malloc(8192, 1);
  CHECK(CachingAllocator::address(b) != addr);
  f.a.free(b);
  f.fake.done[2] = 5;
  CacheBlock* c = f.a.malloc(8192, 1);
  CHECK(CachingAllocator::address(c) == addr);
  s = f.a.stats();
  CHECK(cur(s.active) == 1);
  CHECK(cur(s.active_bytes) == 8192);
  f.a.free(c);
}

TEST_CASE("empty_cache completes frees whose streams have passed, and keeps the others") {
  Fixture f;
  f.fake.queued[3] = 1;
  CacheBlock* a = f.a.malloc(MiB, 0);
  f.a.record_stream(a, 3);
  f.a.free(a);
  f.a.empty_cache();
  CHECK(f.fake.segments.size() == 1);
  f.fake.done[3] = 1;
  f.a.empty_cache();
  CHECK(f.fake.segments.empty());
}

TEST_CASE("out of memory: the cache is emptied and the request retried once") {
  Fixture f(4 * MiB);
  CacheBlock* a = f.a.malloc(MiB, 1);
  CacheBlock* b = f.a.malloc(MiB, 2);
  f.a.free(a);
  f.a.free(b);  // 4 MiB cached on two streams; the driver has nothing left
  CacheBlock* c = f.a.malloc(MiB, 3);
  AllocatorStats s = f.a.stats();
  CHECK(s.num_alloc_retries == 1);
  CHECK(s.num_ooms == 0);
  CHECK(s.num_device_free == 2);
  CHECK(cur(s.reserved_bytes) == static_cast<int64_t>(2 * MiB));
  CHECK_THROWS_WITH_AS(f.a.malloc(3 * MiB, 3),
                       doctest::Contains("spyre:test: out of device memory: tried to allocate 3.00 MiB (3145728 bytes"),
                       OutOfMemory);
  s = f.a.stats();
  CHECK(s.num_alloc_retries == 2);
  CHECK(s.num_ooms == 1);
  f.a.free(c);
  CHECK(CachingAllocator::address(f.a.malloc(MiB, 3)) != 0);  // still usable
}

TEST_CASE("the memory fraction caps reserved memory, and the error names it") {
  Fixture f(1024 * MiB, 100 * MiB);
  f.a.set_memory_fraction(0.1);            // 10 MiB
  CacheBlock* a = f.a.malloc(3 * MiB, 0);  // a 20 MiB segment is refused; a 4 MiB one is not
  CHECK(f.fake.segments.begin()->second == 4 * MiB);
  CHECK_THROWS_WITH_AS(f.a.malloc(8 * MiB, 0), doctest::Contains("per-process memory fraction 0.1 allows"),
                       OutOfMemory);
  CHECK(f.a.stats().num_ooms == 1);
  f.a.set_memory_fraction(1.0);
  CacheBlock* b = f.a.malloc(8 * MiB, 0);
  CHECK_THROWS_AS(f.a.set_memory_fraction(1.5), std::invalid_argument);
  f.a.free(a);
  f.a.free(b);
}

TEST_CASE("a memory pool serves from its own segments, and gives them back when released") {
  Fixture f;
  f.a.create_pool(7);
  f.a.reserve(7, 5 * MiB, 0);  // rounded to 6 MiB
  CHECK(f.fake.segments.size() == 1);
  const uint64_t pool_segment = f.fake.segments.begin()->first;
  CacheBlock* p = f.a.malloc(3 * MiB, 0, 7);
  CHECK(CachingAllocator::address(p) == pool_segment);
  CHECK(f.fake.segments.size() == 1);
  CacheBlock* d = f.a.malloc(3 * MiB, 0);  // default pool: not from the pool's remaining 3 MiB
  CHECK(f.fake.segments.size() == 2);
  f.a.free(p);
  f.a.free(d);
  f.a.empty_cache();  // the default pool's segment only
  CHECK(f.fake.segments.size() == 1);
  CHECK(f.fake.segments.begin()->first == pool_segment);
  CHECK(f.a.stats().reserved_bytes[kAllPools].current == static_cast<int64_t>(6 * MiB));
  f.a.release_pool(7);
  CHECK(f.fake.segments.empty());
  CHECK_THROWS_AS(f.a.malloc(1, 0, 7), std::invalid_argument);
  CHECK_THROWS_AS(f.a.create_pool(0), std::invalid_argument);
}

TEST_CASE("a released pool with live blocks gives each segment back when it becomes free") {
  Fixture f;
  f.a.create_pool(8);
  CacheBlock* a = f.a.malloc(1000, 0, 8);
  f.a.release_pool(8);
  CHECK(f.fake.segments.size() == 1);
  f.a.free(a);
  CHECK(f.fake.segments.empty());
  f.a.create_pool(8);  // the id is free again
  f.a.release_pool(8);
}

TEST_CASE("peaks and accumulated totals reset on request") {
  Fixture f;
  CacheBlock* a = f.a.malloc(MiB, 0);
  CacheBlock* b = f.a.malloc(MiB, 0);  // the other half of the 2 MiB segment
  f.a.free(a);
  AllocatorStats s = f.a.stats();
  CHECK(s.allocated_bytes[kAllPools].peak == static_cast<int64_t>(2 * MiB));
  CHECK(s.allocated_bytes[kAllPools].allocated == static_cast<int64_t>(2 * MiB));
  CHECK(s.allocated_bytes[kAllPools].freed == static_cast<int64_t>(MiB));
  f.a.reset_peak_stats();
  s = f.a.stats();
  CHECK(s.allocated_bytes[kAllPools].peak == static_cast<int64_t>(MiB));
  CHECK(s.allocated_bytes[kAllPools].allocated == static_cast<int64_t>(2 * MiB));
  f.a.reset_accumulated_stats();
  s = f.a.stats();
  CHECK(s.allocated_bytes[kAllPools].allocated == 0);
  CHECK(s.allocated_bytes[kAllPools].freed == 0);
  CHECK(s.allocated_bytes[kAllPools].current == static_cast<int64_t>(MiB));
  CHECK(s.num_device_alloc == 0);
  f.a.free(b);
}

TEST_CASE("without caching every request has its own segment, given back when freed") {
  Fixture f(1024 * MiB, 1024 * MiB, false);
  CacheBlock* a = f.a.malloc(1000, 0);
  CHECK(f.fake.segments.begin()->second == 1024);
  f.a.free(a);
  CHECK(f.fake.segments.empty());
  CHECK(f.a.stats().num_device_free == 1);
}

TEST_CASE("random traffic: live blocks never overlap and the figures match them") {
  Fixture f(8192 * MiB, 8192 * MiB);
  std::mt19937_64 rng(42);
  std::map<uint64_t, std::pair<CacheBlock*, uint64_t>> live;  // addr -> block, requested
  for (int i = 0; i < 20000; ++i) {
    if (live.size() < 200 && (live.empty() || rng() % 2)) {
      const uint64_t n = rng() % 8 == 0 ? rng() % (24 * MiB) : rng() % (64 * KiB);
      const int64_t stream = static_cast<int64_t>(rng() % 3);
      CacheBlock* b = f.a.malloc(n, stream);
      REQUIRE(CachingAllocator::size(b) >= n);
      live[CachingAllocator::address(b)] = {b, n};
    } else {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      f.a.free(it->second.first);
      live.erase(it);
    }
    if (i % 500 == 0) {
      uint64_t end = 0, bytes = 0, requested = 0;
      for (const auto& [addr, e] : live) {
        REQUIRE(addr >= end);
        end = addr + CachingAllocator::size(e.first);
        bytes += CachingAllocator::size(e.first);
        requested += e.second;
      }
      const AllocatorStats s = f.a.stats();
      REQUIRE(cur(s.allocated_bytes) == static_cast<int64_t>(bytes));
      REQUIRE(cur(s.requested_bytes) == static_cast<int64_t>(requested));
      REQUIRE(cur(s.allocation) == static_cast<int64_t>(live.size()));
      REQUIRE(cur(s.reserved_bytes) == static_cast<int64_t>(f.fake.used));
      REQUIRE(cur(s.allocated_bytes, kSmallPool) + cur(s.allocated_bytes, kLargePool) == cur(s.allocated_bytes));
    }
  }
  for (auto& [addr, e] : live) f.a.free(e.first);
  AllocatorStats s = f.a.stats();
  CHECK(cur(s.inactive_split) == 0);
  CHECK(cur(s.allocated_bytes) == 0);
  f.a.empty_cache();
  CHECK(f.fake.segments.empty());
  CHECK(cur(f.a.stats().reserved_bytes) == 0);
}
