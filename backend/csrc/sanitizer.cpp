#include "sanitizer.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "runtime.h"

namespace spyre::backend::sanitizer {
namespace {

struct Allocation {
  uint64_t addr = 0, bytes = 0, tag = 0;
  bool freed = false;
};

// What the host told each card: live allocations by address, and recent ones (freed included) by
// tag, so that a report about memory freed a while ago still names it.
struct Registry {
  std::mutex mu;
  uint64_t next_tag = 1;
  std::map<uint64_t, Allocation> live;     // by address
  std::map<uint64_t, Allocation> by_tag;   // the last kRemembered
  std::map<uint64_t, Allocation> watches;  // by number (Allocation's tag)
  uint64_t next_watch = 1;
  static constexpr size_t kRemembered = 1 << 16;
};

Registry& registry(int dev) {
  static std::mutex mu;
  static std::map<int, Registry> registries;
  std::lock_guard lock(mu);
  return registries[dev];  // std::map: references stay valid
}

std::string hex(uint64_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << v;
  return out.str();
}

std::string name(const Allocation& a) {
  return c10::str("allocation #", a.tag, " (", a.bytes, " bytes at ", hex(a.addr), "..", hex(a.addr + a.bytes),
                  a.freed ? ", freed" : "", ")");
}

}  // namespace

uint64_t parse(const std::string& list, const char* what) {
  if (list.empty() || list == "0") return 0;
  uint64_t bits = 0;
  std::stringstream in(list);
  for (std::string part; std::getline(in, part, ',');) {
    if (part == "memcheck") {
      bits |= hw::kSanitizeMemcheck;
    } else if (part == "racecheck") {
      bits |= hw::kSanitizeRacecheck;
    } else if (part == "initcheck") {
      bits |= hw::kSanitizeInitcheck;
    } else {
      TORCH_CHECK_VALUE(false, what, ": unknown check '", part,
                        "'; it takes a comma-separated list of memcheck, racecheck and initcheck");
    }
  }
  return bits;
}

uint64_t checks() {
  static const uint64_t value = [] {
    const char* env = std::getenv("SPYRE_SANITIZE");
    return parse(env ? env : "", "SPYRE_SANITIZE");
  }();
  return value;
}

void set_checks(int dev, uint64_t bits) {
  TORCH_CHECK_VALUE((bits & ~checks()) == 0,
                    "torch_spyre.debug.sanitize: a check SPYRE_SANITIZE did not name cannot be switched on later "
                    "(the device tracks allocations only from its start)");
  DeviceRuntime::get(dev).set_sanitize_checks(bits);
}

void allocated(int dev, int64_t stream, uint64_t addr, uint64_t bytes) {
  if (checks() == 0 || bytes == 0) return;
  Registry& r = registry(dev);
  uint64_t tag = 0;
  {
    std::lock_guard lock(r.mu);
    tag = r.next_tag++;
    const Allocation a{addr, bytes, tag, false};
    r.live[addr] = a;
    r.by_tag[tag] = a;
    if (r.by_tag.size() > Registry::kRemembered) r.by_tag.erase(r.by_tag.begin());
  }
  DeviceRuntime::get(dev).sanitize(stream, hw::SanitizeAction::kAlloc, addr, bytes, tag);
}

void freed(int dev, int64_t stream, uint64_t addr) {
  if (checks() == 0) return;
  Registry& r = registry(dev);
  Allocation a;
  {
    std::lock_guard lock(r.mu);
    const auto it = r.live.find(addr);
    if (it == r.live.end()) return;
    a = it->second;
    r.live.erase(it);
    if (const auto t = r.by_tag.find(a.tag); t != r.by_tag.end()) t->second.freed = true;
  }
  DeviceRuntime::get(dev).sanitize(stream, hw::SanitizeAction::kFree, a.addr, a.bytes, a.tag);
}

uint64_t watch(int dev, int64_t stream, uint64_t addr, uint64_t bytes) {
  TORCH_CHECK_VALUE(bytes > 0, "torch_spyre.debug.watch: the tensor has no bytes to watch");
  Registry& r = registry(dev);
  uint64_t id = 0;
  {
    std::lock_guard lock(r.mu);
    id = r.next_watch++;
    r.watches[id] = {addr, bytes, id, false};
  }
  DeviceRuntime::get(dev).sanitize(stream, hw::SanitizeAction::kWatch, addr, bytes, id);
  return id;
}

void unwatch(int dev, int64_t stream, uint64_t id) {
  Registry& r = registry(dev);
  Allocation w;
  {
    std::lock_guard lock(r.mu);
    const auto it = r.watches.find(id);
    if (it == r.watches.end()) return;
    w = it->second;
    r.watches.erase(it);
  }
  DeviceRuntime::get(dev).sanitize(stream, hw::SanitizeAction::kUnwatch, w.addr, w.bytes, id);
}

void break_at(int dev, int64_t stream, uint64_t buffer, uint64_t bytes, int64_t pc, uint32_t rank) {
  DeviceRuntime& rt = DeviceRuntime::get(dev);
  if (pc < 0) {
    rt.sanitize(stream, hw::SanitizeAction::kUnbreak, 0, 0, 0);
    return;
  }
  TORCH_CHECK_VALUE(pc <= 0xffffffffLL, "break_at: instruction ", pc, " is past any program");
  rt.sanitize(stream, hw::SanitizeAction::kBreak, buffer, bytes, uint64_t{rank} << 32 | static_cast<uint64_t>(pc));
}

std::string describe(int dev, const driver::SanitizerFinding& f) {
  Registry& r = registry(dev);
  std::lock_guard lock(r.mu);
  if (f.kind == hw::SanitizeReport::kBreakpoint) {
    return c10::str("; breakpoint: the core stopped before instruction ", f.tag, " and wrote its registers and ",
                    f.bytes - hw::kBreakHeaderBytes, " bytes of scratchpad to ", hex(f.addr));
  }
  if (f.kind == hw::SanitizeReport::kWatchpoint) {
    std::string what = c10::str("; watchpoint #", f.tag);
    if (const auto it = r.watches.find(f.tag); it != r.watches.end()) {
      const Allocation& w = it->second;
      const uint64_t at = std::max(f.addr, w.addr);
      what += c10::str(" (", w.bytes, " bytes at ", hex(w.addr), "): a write of ", f.bytes, " bytes at ", hex(f.addr),
                       " reaches byte ", at - w.addr, " of the watched range");
    } else {
      what += c10::str(": a write of ", f.bytes, " bytes at ", hex(f.addr));
    }
    return what;
  }
  std::optional<Allocation> a;
  if (const auto it = r.by_tag.find(f.tag); f.tag != 0 && it != r.by_tag.end()) a = it->second;
  // The first live allocation other than the one concerned that [lo, hi) touches, if any.
  const auto neighbour = [&](uint64_t lo, uint64_t hi) -> std::optional<Allocation> {
    auto it = r.live.upper_bound(lo);
    if (it != r.live.begin() && std::prev(it)->second.addr + std::prev(it)->second.bytes > lo) --it;
    for (; it != r.live.end() && it->first < hi; ++it) {
      if (!a || it->second.tag != a->tag) return it->second;
    }
    return std::nullopt;
  };
  const char* check = f.kind == hw::SanitizeReport::kRace            ? "racecheck"
                      : f.kind == hw::SanitizeReport::kUninitialised ? "initcheck"
                                                                     : "memcheck";
  std::string what = c10::str("; sanitizer (", check, "): ", f.write ? "a write of " : "a read of ", f.bytes,
                              " bytes at ", hex(f.addr));
  const std::string in = a ? name(*a) : std::string("memory no tensor owns");
  switch (f.kind) {
    case hw::SanitizeReport::kOutOfBounds: {
      if (!a) {
        what += ", outside its allocation";
        break;
      }
      const uint64_t end = f.addr + f.bytes, a_end = a->addr + a->bytes;
      if (f.addr >= a->addr) {
        what += c10::str(" runs ", end - a_end, " bytes past the end of ", in);
        if (const auto next = neighbour(a_end, end)) what += ", into " + name(*next);
      } else {
        what += c10::str(" starts ", a->addr - f.addr, " bytes before ", in);
        if (const auto prev = neighbour(f.addr, a->addr)) what += ", in " + name(*prev);
      }
      break;
    }
    case hw::SanitizeReport::kFreed:
      what += " touches " + in + " after its tensor was freed";
      break;
    case hw::SanitizeReport::kUninitialised:
      what += " reads bytes of " + in + " that nothing wrote since it was allocated";
      break;
    case hw::SanitizeReport::kRace:
      what += c10::str(" of ", in, " races with core ", f.other >> 24);
      if ((f.other & 0xffffff) != 0xffffff) what += c10::str(" at instruction ", f.other & 0xffffff);
      what += " of the same launch: no BARRIER orders them, and one of them writes";
      break;
    default:
      break;
  }
  return what;
}

}  // namespace spyre::backend::sanitizer
