// The parts of a device runtime (runtime.h) that keep state of their own, each behind its own
// lock: host staging buffers, the slots timed events write their timestamps to, the device copies
// of op labels, and the windows onto other cards. The program cache is program_cache.h. Light
// header: no ATen.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "spyre/driver/device.h"

namespace spyre::backend {

/// Host buffers that stage copies from and to pageable memory, kept for reuse up to a bound.
class StagingPool {
 public:
  /// A kept buffer of at least `n` bytes and not far more, or nullptr: the caller maps a new one.
  std::unique_ptr<driver::HostBuffer> take(uint64_t n);
  /// Keeps `b` for reuse, or frees it when the pool holds its bound already.
  void give_back(std::unique_ptr<driver::HostBuffer> b);

 private:
  static constexpr uint64_t kMaxBytes = 256ull << 20;
  std::mutex mu_;
  std::multimap<uint64_t, std::unique_ptr<driver::HostBuffer>> buffers_;  // by size
  uint64_t bytes_ = 0;
};

/// Where timed events' timestamps land: one u64 slot each of host memory mapped for the card.
class TimestampSlots {
 public:
  static constexpr int kCount = 4096;  // timed events in flight at once
  /// Maps the slots on `device`.
  driver::Status map(driver::Device& device);
  /// A free slot, or -1 when every one is taken.
  int take();
  void give_back(int slot);
  /// The slot's address for the card, and what the card wrote there.
  uint64_t iova(int slot) const;
  uint64_t read(int slot) const;

 private:
  std::unique_ptr<driver::HostBuffer> buffer_;
  std::mutex mu_;
  std::vector<int> free_;
};

/// The device copy of each op name that launches carry as their label, written once per name and
/// kept (there are a few hundred names at most).
class LabelTable {
 public:
  /// The label's device address; 0 when it is not written yet.
  uint64_t find(const std::string& op);
  /// Keeps `addr` as op's label unless another thread kept one first; returns the one kept (when
  /// it is not `addr`, `addr` is the caller's to free).
  uint64_t keep(const std::string& op, uint64_t addr);
  /// The op whose label is at `addr`; empty when none is (an error path: it looks at every label).
  std::string op_at(uint64_t addr);

 private:
  std::mutex mu_;
  std::map<std::string, uint64_t> labels_;
};

/// The IOVA windows through which this card's DMA reaches other cards' memory.
class PeerWindows {
 public:
  /// The window onto card `peer`; `map` maps it the first time (and may throw).
  uint64_t get(int peer, const std::function<uint64_t()>& map);

 private:
  std::mutex mu_;
  std::map<int, uint64_t> windows_;
};

}  // namespace spyre::backend
