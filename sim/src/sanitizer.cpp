#include "sanitizer.h"

#include <algorithm>
#include <iterator>

namespace spyre::sim {
namespace {

// Bits [lo, hi) of a bitmap: set them, or find the first clear one (hi when none).
void set_bits(std::vector<uint64_t>& bits, uint64_t lo, uint64_t hi) {
  for (uint64_t i = lo; i < hi;) {
    const uint64_t word = i / 64, bit = i % 64, take = std::min<uint64_t>(64 - bit, hi - i);
    bits[word] |= (take == 64 ? ~0ull : ((1ull << take) - 1)) << bit;
    i += take;
  }
}

uint64_t first_clear(const std::vector<uint64_t>& bits, uint64_t lo, uint64_t hi) {
  for (uint64_t i = lo; i < hi;) {
    const uint64_t word = i / 64, bit = i % 64, take = std::min<uint64_t>(64 - bit, hi - i);
    const uint64_t mask = (take == 64 ? ~0ull : ((1ull << take) - 1)) << bit;
    if (const uint64_t clear = ~bits[word] & mask; clear != 0) return word * 64 + __builtin_ctzll(clear);
    i += take;
  }
  return hi;
}

uint32_t who(uint32_t core, uint32_t pc) {
  return core << 24 | (pc & 0xffffff);
}

}  // namespace

void RaceLog::split(uint64_t at) {
  auto it = segs_.upper_bound(at);
  if (it == segs_.begin()) return;
  --it;
  if (it->first >= at || it->second.end <= at) return;
  Seg right = it->second;
  it->second.end = at;
  segs_.emplace_hint(std::next(it), at, right);
}

bool RaceLog::touch(uint64_t lo, uint64_t hi, uint32_t rank, uint32_t core, uint32_t pc, Kind kind, uint32_t* other) {
  if (lo >= hi) return true;
  split(lo);
  split(hi);
  const uint64_t me = 1ull << (rank % 64);
  const int k = static_cast<int>(kind);
  // The ranks whose earlier access races with one of this kind, and which kind of theirs to name.
  const auto conflict = [&](const Seg& s) -> const Who* {
    const uint64_t r = s.readers & ~me, w = s.writers & ~me, a = s.accumulators & ~me;
    if (w) return &s.last[static_cast<int>(Kind::kWrite)];
    if (kind != Kind::kAccumulate && a) return &s.last[static_cast<int>(Kind::kAccumulate)];
    if (kind != Kind::kRead && r) return &s.last[static_cast<int>(Kind::kRead)];
    return nullptr;
  };
  uint64_t at = lo;
  auto it = segs_.lower_bound(lo);
  while (at < hi) {
    if (it == segs_.end() || it->first > at) {  // a gap nobody touched: a new segment
      const uint64_t end = it == segs_.end() ? hi : std::min(hi, it->first);
      it = segs_.emplace_hint(it, at, Seg{end, 0, 0, 0, {}});
    }
    Seg& s = it->second;
    if (const Who* w = conflict(s)) {
      // The last access of that kind may be this rank's own: the other rank is then named
      // without its instruction.
      *other = w->rank != rank ? who(w->core, w->pc) : 0xffffff;
      return false;
    }
    (kind == Kind::kRead ? s.readers : kind == Kind::kWrite ? s.writers : s.accumulators) |= me;
    s.last[k] = {core, pc, rank};
    at = s.end;
    ++it;
  }
  return true;
}

void Sanitizer::carve(uint64_t base, uint64_t end) {
  auto it = regions_.upper_bound(base);
  if (it != regions_.begin() && std::prev(it)->second.end > base) --it;
  while (it != regions_.end() && it->first < end) {
    const uint64_t lo = it->first;
    Region r = std::move(it->second);
    it = regions_.erase(it);
    // What sticks out on either side stays, without its initialisation (only freed memory is
    // split this way: the caching allocator splits a free block to serve a smaller request).
    if (lo < base) regions_.emplace(lo, Region{base, r.tag, r.freed, {}});
    if (r.end > end) it = regions_.emplace(end, Region{r.end, r.tag, r.freed, {}}).first;
  }
}

void Sanitizer::reset_queue(uint32_t queue) {
  breaks_.erase(queue);
  checks_.erase(queue);
  prints_.erase(queue);
}

std::optional<Breakpoint> Sanitizer::take_break(uint32_t queue) {
  const auto it = breaks_.find(queue);
  if (it == breaks_.end()) return std::nullopt;
  const Breakpoint b = it->second;
  breaks_.erase(it);
  return b;
}

void Sanitizer::command(uint32_t queue, const hw::SanitizeArgs& a) {
  switch (a.action) {
    case hw::SanitizeAction::kBreak:
      breaks_[queue] = {static_cast<uint32_t>(a.tag >> 32), static_cast<uint32_t>(a.tag), a.base, a.size};
      return;
    case hw::SanitizeAction::kUnbreak:
      breaks_.erase(queue);
      return;
    case hw::SanitizeAction::kEnable:
      checks_[queue] = a.tag & hw::kSanitizeMask;
      return;
    case hw::SanitizeAction::kPrintBuffer:
      if (a.size == 0) {
        prints_.erase(queue);
      } else {
        prints_[queue] = {a.base, a.size};
      }
      return;
    case hw::SanitizeAction::kAlloc: {
      carve(a.base, a.base + a.size);
      Region r{a.base + a.size, a.tag, false, {}};
      // Initialisation is tracked when any queue's launches may check it.
      if (std::any_of(checks_.begin(), checks_.end(),
                      [](const auto& q) { return q.second & hw::kSanitizeInitcheck; })) {
        r.init.assign((a.size + 63) / 64, 0);
      }
      regions_.emplace(a.base, std::move(r));
      return;
    }
    case hw::SanitizeAction::kFree:
      carve(a.base, a.base + a.size);
      regions_.emplace(a.base, Region{a.base + a.size, a.tag, true, {}});
      return;
    case hw::SanitizeAction::kWatch:
      watches_[a.base] = {a.base + a.size, a.tag};
      return;
    case hw::SanitizeAction::kUnwatch:
      watches_.erase(a.base);
      return;
    default:
      return;
  }
}

void Sanitizer::forget(uint64_t base, uint64_t size) {
  const uint64_t end = size > UINT64_MAX - base ? UINT64_MAX : base + size;
  carve(base, end);
  // carve keeps what sticks out of the range; only whole regions inside it went.
  for (auto it = watches_.lower_bound(base); it != watches_.end() && it->first < end;) it = watches_.erase(it);
}

void Sanitizer::written(const Rows& rows) {
  if (regions_.empty()) return;
  for (uint64_t r = 0; r < rows.count; ++r) {
    uint64_t lo = rows.at(r);
    const uint64_t hi = lo + rows.bytes;
    auto it = regions_.upper_bound(lo);
    if (it != regions_.begin() && std::prev(it)->second.end > lo) --it;
    for (; it != regions_.end() && it->first < hi; ++it) {
      Region& g = it->second;
      if (g.init.empty()) continue;
      set_bits(g.init, std::max(lo, it->first) - it->first, std::min(hi, g.end) - it->first);
    }
  }
}

bool Sanitizer::check_row(uint64_t addr, uint64_t n, bool read, uint64_t checks, SanitizerReport* out) const {
  const uint64_t end = addr + n;
  auto it = regions_.upper_bound(addr);
  const bool inside = it != regions_.begin() && std::prev(it)->second.end > addr;
  if (!inside) {
    // Outside every region: fine unless it runs into one.
    if (it == regions_.end() || it->first >= end) return true;
    out->kind = it->second.freed ? hw::SanitizeReport::kFreed : hw::SanitizeReport::kOutOfBounds;
    out->tag = it->second.tag;
    return false;
  }
  const Region& g = std::prev(it)->second;
  const uint64_t base = std::prev(it)->first;
  out->tag = g.tag;
  if (g.freed) {
    out->kind = hw::SanitizeReport::kFreed;
    return false;
  }
  if ((checks & hw::kSanitizeMemcheck) && end > g.end) {
    out->kind = hw::SanitizeReport::kOutOfBounds;
    return false;
  }
  if (read && (checks & hw::kSanitizeInitcheck) && !g.init.empty()) {
    const uint64_t hi = std::min(end, g.end) - base;
    if (first_clear(g.init, addr - base, hi) != hi) {
      out->kind = hw::SanitizeReport::kUninitialised;
      return false;
    }
  }
  return true;
}

bool Sanitizer::check(const Rows& rows, RaceLog::Kind kind, uint64_t checks, uint32_t rank, uint32_t core, uint32_t pc,
                      RaceLog* race, SanitizerReport* out) {
  const bool read = kind != RaceLog::Kind::kWrite;  // an accumulation reads what it adds to
  if (kind != RaceLog::Kind::kRead && !watches_.empty()) {
    for (uint64_t r = 0; r < rows.count; ++r) {
      const uint64_t lo = rows.at(r), hi = lo + rows.bytes;
      auto it = watches_.lower_bound(hi);  // the watches that start before hi...
      while (it != watches_.begin()) {
        --it;
        if (it->second.end <= lo) continue;  // ...and end after lo
        *out = SanitizerReport{hw::SanitizeReport::kWatchpoint, true, lo, rows.bytes, it->second.tag, 0};
        return false;
      }
    }
  }
  if (checks == 0) return true;
  const bool memory = (checks & (hw::kSanitizeMemcheck | hw::kSanitizeInitcheck)) != 0 && !regions_.empty();
  // Strided rows that lie inside one live allocation pass memcheck together; only initcheck and
  // racecheck need the rows one by one.
  if (!race && !(checks & hw::kSanitizeInitcheck) && !rows.list && rows.count > 1) {
    SanitizerReport span;
    const uint64_t first = rows.at(0), last = rows.at(rows.count - 1);
    if (!memory || check_row(first, last + rows.bytes - first, true, checks, &span)) return true;
  }
  for (uint64_t r = 0; r < rows.count; ++r) {
    const uint64_t addr = rows.at(r);
    SanitizerReport rep;
    rep.write = kind != RaceLog::Kind::kRead;
    rep.addr = addr;
    rep.bytes = rows.bytes;
    if (memory && !check_row(addr, rows.bytes, read, checks, &rep)) {
      // Without memcheck, only initcheck's own finding counts.
      if ((checks & hw::kSanitizeMemcheck) || rep.kind == hw::SanitizeReport::kUninitialised) {
        *out = rep;
        return false;
      }
    }
    if (race && !race->touch(addr, addr + rows.bytes, rank, core, pc, kind, &rep.other)) {
      rep.kind = hw::SanitizeReport::kRace;
      rep.tag = 0;
      SanitizerReport named;  // the allocation the bytes belong to, when the host named one
      check_row(addr, 1, false, checks, &named);
      rep.tag = named.tag;
      *out = rep;
      return false;
    }
  }
  return true;
}

const SanitizerReport& Sanitizer::report(uint32_t core) const {
  static const SanitizerReport kNone;
  return core < reports_.size() ? reports_[core] : kNone;
}

void Sanitizer::set_report(uint32_t core, const SanitizerReport& r) {
  if (core >= reports_.size()) reports_.resize(core + 1);
  reports_[core] = r;
}

}  // namespace spyre::sim
