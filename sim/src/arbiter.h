// Hands out units of a shared resource (the cores, the DMA channels) to the queue contexts that
// want them: a high-priority queue first, then the one that asked first. A waiter ahead in that
// order that wants any of the same units holds back those behind it, so no queue starves behind
// others of its priority (steady high-priority demand does hold normal queues back, by design).
#pragma once

#include <cstdint>
#include <list>

#include <systemc>

namespace spyre::sim {

class Arbiter {
 public:
  /// `count` units (at most 64), unit i as bit i.
  explicit Arbiter(uint32_t count) : all_(count >= 64 ? ~0ull : (1ull << count) - 1), free_(all_) {}

  /// Every unit's bit.
  uint64_t all() const { return all_; }

  /// Waits for the units in `want` and takes them. With `any`, one free unit of `want` is
  /// enough. Returns the units taken. Call from a SystemC thread.
  uint64_t acquire(uint64_t want, uint32_t priority, bool any) {
    const auto me = waiters_.insert(waiters_.end(), Waiter{want, priority, next_ticket_++});
    for (;;) {
      const uint64_t grant = any ? lowest(free_ & want) : ((free_ & want) == want ? want : 0);
      if (grant != 0 && !held_back(me)) {
        waiters_.erase(me);
        free_ &= ~grant;
        if (!waiters_.empty()) freed_.notify(sc_core::SC_ZERO_TIME);  // those it held back look again
        return grant;
      }
      sc_core::wait(freed_);
    }
  }

  /// Gives back units taken by acquire().
  void release(uint64_t units) {
    free_ |= units;
    freed_.notify(sc_core::SC_ZERO_TIME);
  }

 private:
  struct Waiter {
    uint64_t want;
    uint32_t priority;
    uint64_t ticket;
  };

  static uint64_t lowest(uint64_t bits) { return bits & (~bits + 1); }

  bool held_back(std::list<Waiter>::const_iterator me) const {
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      if (it == me || (it->want & me->want) == 0) continue;
      if (it->priority > me->priority || (it->priority == me->priority && it->ticket < me->ticket)) return true;
    }
    return false;
  }

  const uint64_t all_;
  uint64_t free_;
  uint64_t next_ticket_ = 0;
  std::list<Waiter> waiters_;
  sc_core::sc_event freed_;
};

}  // namespace spyre::sim
