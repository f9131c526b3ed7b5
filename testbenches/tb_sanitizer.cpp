// Testbench of the device sanitizer's bookkeeping (sim/src/sanitizer.h) against a byte-by-byte
// reference: random allocations, frees, writes and accesses over a small address space, each
// verdict (pass, or the kind of finding and the allocation it names) compared with what a shadow
// byte array says; and the race log against per-byte sets of the ranks that touched each byte.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <random>
#include <vector>

#include "sanitizer.h"

using namespace spyre;
using namespace spyre::sim;

namespace {

constexpr uint64_t kSpace = 4096;
constexpr uint64_t kBase = 0x10000;  // where the space starts in device memory

// The reference: what each byte is.
struct Byte {
  uint64_t tag = 0;  // 0: never named
  bool freed = false;
  bool init = false;
};

struct Reference {
  std::array<Byte, kSpace> b{};

  // The verdict for an access of n bytes at offset at (memcheck and initcheck on).
  SanitizerReport check(uint64_t at, uint64_t n, bool read) const {
    SanitizerReport r;
    const Byte& first = b[at];
    if (first.tag == 0) {
      for (uint64_t i = at; i < at + n; ++i) {
        if (b[i].tag != 0) {
          r.kind = b[i].freed ? hw::SanitizeReport::kFreed : hw::SanitizeReport::kOutOfBounds;
          r.tag = b[i].tag;
          return r;
        }
      }
      return r;
    }
    r.tag = first.tag;
    if (first.freed) {
      r.kind = hw::SanitizeReport::kFreed;
      return r;
    }
    for (uint64_t i = at; i < at + n; ++i) {
      if (b[i].tag != first.tag || b[i].freed) {
        r.kind = hw::SanitizeReport::kOutOfBounds;
        return r;
      }
    }
    for (uint64_t i = at; read && i < at + n; ++i) {
      if (!b[i].init) {
        r.kind = hw::SanitizeReport::kUninitialised;
        return r;
      }
    }
    r.tag = 0;
    return r;
  }
};

hw::SanitizeArgs command(hw::SanitizeAction action, uint64_t base, uint64_t size, uint64_t tag) {
  hw::SanitizeArgs a{};
  a.action = action;
  a.base = base;
  a.size = size;
  a.tag = tag;
  return a;
}

}  // namespace

TEST_CASE("memcheck and initcheck give the verdicts of a byte-by-byte shadow") {
  std::mt19937_64 rng(7);
  for (int run = 0; run < 40; ++run) {
    Sanitizer san;
    Reference ref;
    san.command(0, command(hw::SanitizeAction::kEnable, 0, 0, hw::kSanitizeMemcheck | hw::kSanitizeInitcheck));
    std::vector<std::pair<uint64_t, uint64_t>> live;  // (offset, size)
    uint64_t next_tag = 1;
    for (int step = 0; step < 400; ++step) {
      const int what = static_cast<int>(rng() % 10);
      if (what < 3) {  // allocate over bytes that are free (never named, or freed), as the allocator does
        const uint64_t at = rng() % kSpace, n = 1 + rng() % std::min<uint64_t>(300, kSpace - at);
        bool free = true;
        for (uint64_t i = at; i < at + n; ++i) free &= ref.b[i].tag == 0 || ref.b[i].freed;
        if (!free) continue;
        const uint64_t tag = next_tag++;
        san.command(0, command(hw::SanitizeAction::kAlloc, kBase + at, n, tag));
        for (uint64_t i = at; i < at + n; ++i) ref.b[i] = {tag, false, false};
        live.emplace_back(at, n);
      } else if (what < 4 && !live.empty()) {  // free a whole live allocation
        const size_t k = rng() % live.size();
        const auto [at, n] = live[k];
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        san.command(0, command(hw::SanitizeAction::kFree, kBase + at, n, ref.b[at].tag));
        for (uint64_t i = at; i < at + n; ++i) ref.b[i] = {ref.b[i].tag, true, false};
      } else if (what < 6) {  // strided writes (a core's STORE or a copy)
        const uint64_t bytes = 1 + rng() % 40, stride = bytes + rng() % 64, count = 1 + rng() % 8;
        const uint64_t span = (count - 1) * stride + bytes;
        if (span > kSpace) continue;
        const uint64_t at = rng() % (kSpace - span + 1);
        san.written(Rows::strided(kBase + at, stride, count, bytes));
        for (uint64_t r = 0; r < count; ++r) {
          for (uint64_t i = 0; i < bytes; ++i) {
            Byte& x = ref.b[at + r * stride + i];
            if (x.tag != 0 && !x.freed) x.init = true;
          }
        }
      } else {  // a core's access: strided rows, or listed ones
        const bool read = rng() % 2;
        const uint64_t bytes = 1 + rng() % 64, count = 1 + rng() % 6;
        std::vector<uint64_t> addrs(count);
        for (uint64_t& a : addrs) a = rng() % (kSpace - bytes + 1);
        const bool listed = rng() % 2;
        if (!listed) {
          const uint64_t stride = bytes + rng() % 32;
          if ((count - 1) * stride + bytes > kSpace) continue;
          const uint64_t at = rng() % (kSpace - (count - 1) * stride - bytes + 1);
          for (uint64_t r = 0; r < count; ++r) addrs[r] = at + r * stride;
        }
        std::vector<uint64_t> device(count);
        for (uint64_t r = 0; r < count; ++r) device[r] = kBase + addrs[r];
        const Rows rows = listed ? Rows::listed(device.data(), count, bytes)
                                 : Rows::strided(device[0], count > 1 ? device[1] - device[0] : 0, count, bytes);
        SanitizerReport want;  // the first row that fails names the finding
        for (uint64_t r = 0; r < count && want.kind == hw::SanitizeReport::kNone; ++r) {
          want = ref.check(addrs[r], bytes, read);
          if (want.kind != hw::SanitizeReport::kNone) want.addr = device[r];
        }
        SanitizerReport got;
        const bool ok =
            san.check(rows, read ? RaceLog::Kind::kRead : RaceLog::Kind::kWrite, san.checks(0), 0, 0, 0, nullptr, &got);
        INFO("run " << run << " step " << step);
        REQUIRE(ok == (want.kind == hw::SanitizeReport::kNone));
        if (!ok) {
          CHECK(got.kind == want.kind);
          CHECK(got.tag == want.tag);
          CHECK(got.addr == want.addr);
          CHECK(got.bytes == bytes);
          CHECK(got.write == !read);
        }
      }
    }
  }
}

TEST_CASE("racecheck: the race log agrees with per-byte sets of ranks") {
  std::mt19937_64 rng(11);
  constexpr uint64_t kBytes = 256;
  for (int run = 0; run < 200; ++run) {
    RaceLog log;
    // Per byte: the ranks that read, wrote and accumulated since the last barrier.
    std::vector<std::array<uint64_t, 3>> ref(kBytes, {0, 0, 0});
    for (int step = 0; step < 60; ++step) {
      if (rng() % 12 == 0) {  // a barrier
        log.clear();
        for (auto& r : ref) r = {0, 0, 0};
        continue;
      }
      const uint32_t rank = static_cast<uint32_t>(rng() % 4);
      const auto kind = static_cast<RaceLog::Kind>(rng() % 3);
      const uint64_t lo = rng() % kBytes, hi = lo + 1 + rng() % std::min<uint64_t>(40, kBytes - lo);
      bool want = true;
      const uint64_t me = 1ull << rank;
      for (uint64_t i = lo; i < hi; ++i) {
        const auto& [readers, writers, accumulators] = ref[i];
        if ((writers & ~me) || (kind != RaceLog::Kind::kAccumulate && (accumulators & ~me)) ||
            (kind != RaceLog::Kind::kRead && (readers & ~me))) {
          want = false;
        }
      }
      uint32_t other = 0;
      const bool got = log.touch(lo, hi, rank, rank + 10, static_cast<uint32_t>(step), kind, &other);
      INFO("run " << run << " step " << step);
      REQUIRE(got == want);
      if (!got) {  // the other side is another core (core = rank + 10 here), or unknown
        CHECK((other >> 24) != rank + 10);
        log.clear();
        for (auto& r : ref) r = {0, 0, 0};
        continue;
      }
      for (uint64_t i = lo; i < hi; ++i) ref[i][static_cast<int>(kind)] |= me;
    }
  }
}

TEST_CASE("a watchpoint stops stores that touch its bytes, and only stores, with or without checks") {
  for (const uint64_t checks : {uint64_t{0}, hw::kSanitizeMask}) {
    Sanitizer san;
    san.command(0, command(hw::SanitizeAction::kEnable, 0, 0, checks));
    CHECK(san.checks(0) == checks);
    CHECK_FALSE(san.watching());
    san.command(0, command(hw::SanitizeAction::kWatch, kBase + 100, 32, 9));
    CHECK(san.watching());
    SanitizerReport r;
    const auto store = [&](uint64_t at, uint64_t stride, uint64_t count, uint64_t bytes) {
      r = {};
      return san.check(Rows::strided(kBase + at, stride, count, bytes), RaceLog::Kind::kWrite, checks, 0, 0, 0, nullptr,
                       &r);
    };
    CHECK(store(0, 0, 1, 100));         // ends where the watch begins
    CHECK(store(132, 0, 1, 64));        // begins where it ends
    CHECK(store(90, 50, 2, 10));        // rows at 90 and 140: they step over it
    CHECK_FALSE(store(60, 20, 3, 20));  // the third row, at 100, is in it
    CHECK(r.kind == hw::SanitizeReport::kWatchpoint);
    CHECK(r.tag == 9);
    CHECK(r.addr == kBase + 100);
    CHECK_FALSE(store(131, 0, 1, 1));
    SanitizerReport read;
    CHECK(san.check(Rows::strided(kBase + 100, 0, 1, 32), RaceLog::Kind::kRead, checks, 0, 0, 0, nullptr, &read));
    CHECK_FALSE(
        san.check(Rows::strided(kBase + 96, 0, 1, 8), RaceLog::Kind::kAccumulate, checks, 0, 0, 0, nullptr, &read));
    san.command(0, command(hw::SanitizeAction::kUnwatch, kBase + 100, 32, 9));
    CHECK(store(100, 0, 1, 32));
    CHECK_FALSE(san.watching());
  }
}

TEST_CASE("a breakpoint belongs to its queue's next launch, which takes it") {
  Sanitizer san;
  san.command(3, command(hw::SanitizeAction::kBreak, kBase, 4096, uint64_t{2} << 32 | 17));
  CHECK_FALSE(san.take_break(0));
  const Breakpoint b = san.take_break(3).value_or(Breakpoint{});
  CHECK(b.rank == 2);
  CHECK(b.pc == 17);
  CHECK(b.buffer == kBase);
  CHECK(b.size == 4096);
  CHECK_FALSE(san.take_break(3));  // one launch only
  san.command(3, command(hw::SanitizeAction::kBreak, kBase, 4096, 5));
  san.command(3, command(hw::SanitizeAction::kUnbreak, 0, 0, 0));
  CHECK_FALSE(san.take_break(3));
  CHECK_FALSE(san.watching());  // a breakpoint costs the cores' loads and stores nothing
  CHECK(san.checks(3) == 0);
}

TEST_CASE("checks are per queue: ENABLE on one queue leaves the others' launches unchecked") {
  Sanitizer san;
  san.command(2, command(hw::SanitizeAction::kEnable, 0, 0, hw::kSanitizeMemcheck | hw::kSanitizeInitcheck));
  CHECK(san.checks(2) == (hw::kSanitizeMemcheck | hw::kSanitizeInitcheck));
  CHECK(san.checks(0) == 0);
  san.command(0, command(hw::SanitizeAction::kAlloc, kBase, 64, 1));  // tracked for queue 2's initcheck
  SanitizerReport r;
  const Rows read = Rows::strided(kBase, 0, 1, 16);
  CHECK_FALSE(san.check(read, RaceLog::Kind::kRead, san.checks(2), 0, 0, 0, nullptr, &r));
  CHECK(r.kind == hw::SanitizeReport::kUninitialised);
  CHECK(san.check(read, RaceLog::Kind::kRead, san.checks(0), 0, 0, 0, nullptr, &r));
  san.command(2, command(hw::SanitizeAction::kEnable, 0, 0, 0));
  CHECK(san.checks(2) == 0);
  san.command(1, command(hw::SanitizeAction::kEnable, 0, 0, hw::kSanitizeRacecheck));
  san.command(1, command(hw::SanitizeAction::kBreak, kBase, 4096, 3));
  san.reset_queue(1);  // a new ring, perhaps another client's: nothing of the old owner's stays
  CHECK(san.checks(1) == 0);
  CHECK_FALSE(san.take_break(1));
}

TEST_CASE("a scrubbed range is forgotten: allocations, frees and watchpoints in it") {
  Sanitizer san;
  san.command(0, command(hw::SanitizeAction::kEnable, 0, 0, hw::kSanitizeMemcheck));
  san.command(0, command(hw::SanitizeAction::kAlloc, kBase, 64, 1));
  san.command(0, command(hw::SanitizeAction::kFree, kBase + 64, 64, 2));
  san.command(0, command(hw::SanitizeAction::kWatch, kBase + 200, 8, 3));
  SanitizerReport r;
  const auto write = [&](uint64_t at, uint64_t n) {
    return san.check(Rows::strided(kBase + at, 0, 1, n), RaceLog::Kind::kWrite, hw::kSanitizeMemcheck, 0, 0, 0, nullptr,
                     &r);
  };
  CHECK_FALSE(write(64, 8));   // freed
  CHECK_FALSE(write(60, 8));   // out of allocation 1
  CHECK_FALSE(write(200, 8));  // watched
  san.forget(kBase + 32, 1024);
  CHECK(write(64, 8));
  CHECK(write(200, 8));
  CHECK_FALSE(write(28, 8));  // the part of allocation 1 below the scrub is still named
  CHECK(r.tag == 1);
}

extern "C" int sc_main(int argc, char* argv[]) {
  doctest::Context context(argc, argv);
  return context.run();
}
