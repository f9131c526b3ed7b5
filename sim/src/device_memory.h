// Device memory (LPDDR5): a sparse backing store whose accesses are timed by the fabric's channels
// and ring links. All of the card's 112 GB are addressable; host memory grows only with the 64 KiB
// pages that are written, and only while the host can give it (sim.host_memory_bytes): a write that
// would need more fails with kHostMemoryResponse instead of the host's out-of-memory killer ending
// the process. What a replay's DMA copies from its capture is not copied into pages at all: the
// memory reads it where the capture holds it (write_kept).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include <tlm_utils/multi_passthrough_target_socket.h>

#include "fabric.h"
#include "sanitizer.h"
#include "spyre/sim/config.h"
#include "timing.h"

namespace spyre::sim {

/// Where device memory's pages live on the host: 64 KiB slots carved from 2 MiB blocks that the
/// kernel may back with huge pages, so that a megabyte written costs one page fault, not 256. A
/// slot is zero when handed out (fresh memory from the kernel, or given back with
/// MADV_DONTNEED), so neither a new page nor a freed one is cleared by hand, and a freed slot's
/// host memory goes back to the host at once. The kernel's khugepaged may later back a block
/// whose slots were partly freed with a whole huge page again, so host memory stays within the
/// blocks ever handed out (the run's peak), not within the pages alive now.
class PagePool {
 public:
  static constexpr uint64_t kSlotBytes = 64 * 1024;
  PagePool() = default;
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;
  ~PagePool();
  /// A zeroed slot, or nullptr when the host has no memory for another block.
  uint8_t* take();
  /// Gives the slot's host memory back; the slot reads as zeros when next taken.
  void give(uint8_t* slot);

 private:
  static constexpr uint64_t kBlockBytes = 2 * 1024 * 1024;
  std::vector<void*> blocks_;
  std::vector<uint8_t*> free_;
  uint8_t* next_ = nullptr;  // the unused rest of the newest block
  uint8_t* end_ = nullptr;
};

class DeviceMemory : public sc_core::sc_module {
 public:
  /// Every initiator (DMA engine, cores) binds here, and names its ring stop in a RowList (an access
  /// without one comes from the PCIe stop). Out-of-range accesses answer TLM_ADDRESS_ERROR_RESPONSE;
  /// the annotated delay includes queueing on the channels and ring links.
  tlm_utils::multi_passthrough_target_socket<DeviceMemory> socket;

  DeviceMemory(const sc_core::sc_module_name& name, const Config& config, Fabric& fabric);

  uint64_t size() const { return size_; }
  /// Untimed functional access for loaders and tests; the range must lie inside memory.
  void read(uint64_t addr, void* dst, uint64_t n) const;
  /// False when a page it needs could not be backed (see may_grow): the pages before it are written.
  bool write(uint64_t addr, const void* src, uint64_t n);
  /// Writes [addr, addr + n) with the `n` bytes at `src`, which stay unchanged there for the life of
  /// this memory (a replay's capture): reads take them from there and no page is backed for them,
  /// so a replay copies no input into pages (in timing mode, which reads no tensor, none at all).
  void write_kept(uint64_t addr, const uint8_t* src, uint64_t n);
  /// Ranges written with write_kept and not written over since (for tests).
  size_t kept_ranges() const { return kept_.size(); }
  uint64_t resident_bytes() const { return pages_.size() * kPageBytes; }
  /// Zeroes [addr, addr + n) (clipped to memory) and releases the pages it wholly covers.
  void scrub(uint64_t addr, uint64_t n);
  /// Called with (addr, n) before any byte of device memory is written: the owner of deferred
  /// reads (see RowList::deferred) finishes those that read the range.
  void set_write_guard(std::function<void(uint64_t, uint64_t)> guard) { guard_ = std::move(guard); }
  /// The device sanitizer, told of every write (nullptr: none).
  void set_sanitizer(Sanitizer* s) { sanitizer_ = s; }
  /// Fault injection: reads touching [addr, addr + n) answer kEccErrorResponse (n = 0: none).
  void poison(uint64_t addr, uint64_t n) {
    poison_lo_ = addr;
    poison_hi_ = addr + n;
  }

 private:
  static constexpr uint64_t kPageBytes = PagePool::kSlotBytes;
  /// A page of zeros: what a never-written page reads as.
  static const uint8_t* zero_page();
  /// Whether one more page may be backed: below sim.host_memory_bytes when it is set, else while
  /// the host keeps a sixteenth of its memory, at least 256 MiB, available (/proc/meminfo, read
  /// once per kLookPages pages).
  bool may_grow();
  static constexpr uint64_t kLookPages = 1024;
  void b_transport(int id, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  void transport_rows(const RowList& list, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  /// Whether [addr, addr + n) is a non-empty range inside memory; whether it touches a poisoned byte.
  bool in_memory(uint64_t addr, uint64_t n) const;
  bool poisoned(uint64_t addr, uint64_t n) const;
  /// Appends where the n bytes at addr are (never-written pages read from a page of zeros).
  void locate(uint64_t addr, uint64_t n, std::vector<std::pair<const uint8_t*, uint64_t>>& out) const;
  /// locate() of the pages alone, as if nothing were kept.
  void locate_pages(uint64_t addr, uint64_t n, std::vector<std::pair<const uint8_t*, uint64_t>>& out) const;
  /// Forgets the parts of kept ranges inside [addr, addr + n) (before a write or a scrub).
  void drop_kept(uint64_t addr, uint64_t n);
  struct Kept {
    const uint8_t* src;
    uint64_t n;
  };
  /// The first kept range that ends after `addr`, in address order.
  std::map<uint64_t, Kept>::const_iterator kept_after(uint64_t addr) const;
  // Device address -> the bytes write_kept wrote there; they hide what the pages hold (older).
  // Disjoint ranges; empty unless a replay's host keeps its bytes.
  std::map<uint64_t, Kept> kept_;

  uint64_t size_;
  uint64_t host_limit_;    // sim.host_memory_bytes: 0 = what the host has
  uint64_t headroom_ = 0;  // pages that may still be backed before the host is looked at again
  Fabric& fabric_;
  PagePool pool_;
  std::unordered_map<uint64_t, uint8_t*> pages_;  // device page -> its slot in pool_
  std::function<void(uint64_t, uint64_t)> guard_;
  uint64_t poison_lo_ = 0, poison_hi_ = 0;
  Sanitizer* sanitizer_ = nullptr;
};

}  // namespace spyre::sim
