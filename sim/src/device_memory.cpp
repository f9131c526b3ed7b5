#include "device_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace spyre::sim {

DeviceMemory::DeviceMemory(const sc_core::sc_module_name& name, const Config& config, Fabric& fabric)
    : sc_core::sc_module(name),
      socket("socket"),
      size_(config.memory.usable_bytes),
      host_limit_(config.sim.host_memory_bytes),
      fabric_(fabric) {
  socket.register_b_transport(this, &DeviceMemory::b_transport);
}

namespace {
/// MemAvailable and MemTotal of /proc/meminfo in bytes; {0, 0} when they cannot be read.
std::pair<uint64_t, uint64_t> host_memory() {
  std::ifstream in("/proc/meminfo");
  uint64_t available = 0, total = 0;
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") available = kib << 10;
    if (key == "MemTotal:") total = kib << 10;
  }
  return {available, total};
}
}  // namespace

PagePool::~PagePool() {
  for (void* b : blocks_) ::munmap(b, kBlockBytes);
}

uint8_t* PagePool::take() {
  if (!free_.empty()) {
    uint8_t* slot = free_.back();
    free_.pop_back();
    return slot;
  }
  if (next_ == end_) {
    // Twice the block, so that an aligned block lies inside; the rest goes back at once.
    void* raw = ::mmap(nullptr, 2 * kBlockBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    auto* lo = static_cast<uint8_t*>(raw);
    const uint64_t skip = (kBlockBytes - reinterpret_cast<uintptr_t>(lo) % kBlockBytes) % kBlockBytes;
    uint8_t* block = lo + skip;
    if (skip > 0) ::munmap(lo, skip);
    ::munmap(block + kBlockBytes, kBlockBytes - skip);
    ::madvise(block, kBlockBytes, MADV_HUGEPAGE);  // a hint: without huge pages, 4 KiB ones
    blocks_.push_back(block);
    next_ = block;
    end_ = block + kBlockBytes;
  }
  uint8_t* slot = next_;
  next_ += kSlotBytes;
  return slot;
}

void PagePool::give(uint8_t* slot) {
  ::madvise(slot, kSlotBytes, MADV_DONTNEED);  // private anonymous memory: reads as zeros after
  free_.push_back(slot);
}

const uint8_t* DeviceMemory::zero_page() {
  static const std::vector<uint8_t> zeros(kPageBytes);
  return zeros.data();
}

bool DeviceMemory::may_grow() {
  if (host_limit_ != 0) return (pages_.size() + 1) * kPageBytes <= host_limit_;
  if (headroom_ > 0) {
    --headroom_;
    return true;
  }
  const auto [available, total] = host_memory();
  if (total == 0) return true;  // no /proc: nothing to go by
  // Keep a sixteenth of the host (at least 256 MiB) for everything else the process and the host run.
  const uint64_t reserve = std::max<uint64_t>(total / 16, uint64_t{256} << 20);
  if (available <= reserve + kPageBytes) return false;
  headroom_ = std::min<uint64_t>(kLookPages, (available - reserve) / kPageBytes) - 1;
  return true;
}

void DeviceMemory::read(uint64_t addr, void* dst, uint64_t n) const {
  const uint64_t begin = addr, end = addr + n;
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const uint64_t page = addr / kPageBytes;
    const uint64_t off = addr % kPageBytes;
    const uint64_t len = std::min(n, kPageBytes - off);
    const auto it = pages_.find(page);
    if (it == pages_.end()) {
      std::memset(out, 0, len);  // never-written memory reads as zero
    } else {
      std::memcpy(out, it->second + off, len);
    }
    out += len;
    addr += len;
    n -= len;
  }
  // What write_kept wrote hides the pages.
  for (auto it = kept_after(begin); it != kept_.end() && it->first < end; ++it) {
    const uint64_t lo = std::max(begin, it->first), hi = std::min(end, it->first + it->second.n);
    std::memcpy(static_cast<uint8_t*>(dst) + (lo - begin), it->second.src + (lo - it->first), hi - lo);
  }
}

std::map<uint64_t, DeviceMemory::Kept>::const_iterator DeviceMemory::kept_after(uint64_t addr) const {
  if (kept_.empty()) return kept_.end();
  auto it = kept_.upper_bound(addr);
  if (it != kept_.begin() && std::prev(it)->first + std::prev(it)->second.n > addr) --it;
  return it;
}

void DeviceMemory::locate(uint64_t addr, uint64_t n, std::vector<std::pair<const uint8_t*, uint64_t>>& out) const {
  const uint64_t end = addr + n;
  for (auto it = kept_after(addr); it != kept_.end() && it->first < end && addr < end; ++it) {
    if (it->first > addr) {  // pages up to the kept range
      locate_pages(addr, it->first - addr, out);
      addr = it->first;
    }
    const uint64_t hi = std::min(end, it->first + it->second.n);
    out.emplace_back(it->second.src + (addr - it->first), hi - addr);
    addr = hi;
  }
  if (addr < end) locate_pages(addr, end - addr, out);
}

void DeviceMemory::locate_pages(uint64_t addr, uint64_t n,
                                std::vector<std::pair<const uint8_t*, uint64_t>>& out) const {
  while (n > 0) {
    const uint64_t off = addr % kPageBytes;
    const uint64_t len = std::min(n, kPageBytes - off);
    const auto it = pages_.find(addr / kPageBytes);
    const uint8_t* at = it == pages_.end() ? zero_page() : it->second + off;
    if (!out.empty() && out.back().first + out.back().second == at) {
      out.back().second += len;  // pages that happen to follow each other in host memory
    } else {
      out.emplace_back(at, len);
    }
    addr += len;
    n -= len;
  }
}

void DeviceMemory::write_kept(uint64_t addr, const uint8_t* src, uint64_t n) {
  if (n == 0) return;
  if (guard_) guard_(addr, n);
  drop_kept(addr, n);
  kept_.emplace(addr, Kept{src, n});
}

void DeviceMemory::drop_kept(uint64_t addr, uint64_t n) {
  const uint64_t end = addr + n;
  for (auto it = kept_after(addr); it != kept_.end() && it->first < end;) {
    const uint64_t lo = it->first, hi = lo + it->second.n;
    const uint8_t* src = it->second.src;
    it = kept_.erase(it);
    if (lo < addr) kept_.emplace(lo, Kept{src, addr - lo});  // before `it`: not visited again
    if (hi > end) it = kept_.emplace_hint(it, end, Kept{src + (end - lo), hi - end});
  }
}

bool DeviceMemory::write(uint64_t addr, const void* src, uint64_t n) {
  if (guard_) guard_(addr, n);
  drop_kept(addr, n);
  const auto* in = static_cast<const uint8_t*>(src);
  while (n > 0) {
    const uint64_t page = addr / kPageBytes;
    const uint64_t off = addr % kPageBytes;
    const uint64_t len = std::min(n, kPageBytes - off);
    // Zeros into a page never written change nothing it reads: it needs no host memory yet.
    auto it = pages_.find(page);
    if (it == pages_.end() && std::memcmp(in, zero_page(), len) != 0) {
      uint8_t* slot = may_grow() ? pool_.take() : nullptr;
      if (!slot) return false;
      it = pages_.emplace(page, slot).first;
    }
    if (it != pages_.end()) std::memcpy(it->second + off, in, len);
    in += len;
    addr += len;
    n -= len;
  }
  return true;
}

void DeviceMemory::scrub(uint64_t addr, uint64_t n) {
  if (addr >= size_) return;
  n = std::min(n, size_ - addr);
  if (guard_) guard_(addr, n);
  drop_kept(addr, n);
  const uint64_t end = addr + n;
  const auto clear = [&](decltype(pages_)::iterator it) {  // the page's part in range; the next page
    const uint64_t lo = it->first * kPageBytes, hi = lo + kPageBytes;
    if (lo >= addr && hi <= end) {
      pool_.give(it->second);
      return pages_.erase(it);
    }
    const uint64_t from = std::max(lo, addr), to = std::min(hi, end);
    std::memset(it->second + (from - lo), 0, to - from);
    return std::next(it);
  };
  const uint64_t first = addr / kPageBytes, last = (end + kPageBytes - 1) / kPageBytes;
  if (last - first < pages_.size()) {  // a small range: look its pages up
    for (uint64_t p = first; p < last; ++p) {
      if (const auto it = pages_.find(p); it != pages_.end()) clear(it);
    }
  } else {
    for (auto it = pages_.begin(); it != pages_.end();) {
      it = it->first >= first && it->first < last ? clear(it) : std::next(it);
    }
  }
}

void DeviceMemory::b_transport(int /*id*/, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
  if (gp.get_byte_enable_ptr() != nullptr) {
    gp.set_response_status(tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE);
    return;
  }
  if (const auto* list = gp.get_extension<RowList>()) return transport_rows(*list, gp, delay);
  const uint64_t addr = gp.get_address();
  RowList one;  // a plain access: one row, from the PCIe stop
  one.rows = Rows::strided(addr, 0, 1, gp.get_data_length());
  one.stop = Fabric::pcie_stop();
  transport_rows(one, gp, delay);
}

bool DeviceMemory::in_memory(uint64_t addr, uint64_t n) const {
  return n != 0 && addr < size_ && n <= size_ - addr;
}

bool DeviceMemory::poisoned(uint64_t addr, uint64_t n) const {
  return addr < poison_hi_ && addr + n > poison_lo_;
}

void DeviceMemory::transport_rows(const RowList& list, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay) {
  const Rows& rows = list.rows;
  const uint64_t n = rows.bytes;
  // Every row is checked before any byte moves, and the first bad row names the error. A strided
  // set lies inside memory when its first and last rows do, and reads no poisoned byte when its
  // span does not; only otherwise are its rows looked at one by one, as a listed set's always are.
  const uint64_t last = rows.count == 0 ? rows.base : rows.at(rows.count - 1);
  const bool each = rows.list != nullptr || !in_memory(rows.base, n) || !in_memory(last, n) ||
                    (gp.is_read() && poisoned(rows.base, last + n - rows.base));
  for (uint64_t r = 0; each && r < rows.count; ++r) {
    const uint64_t addr = rows.at(r);
    const tlm::tlm_response_status error = !in_memory(addr, n)                 ? tlm::TLM_ADDRESS_ERROR_RESPONSE
                                           : gp.is_read() && poisoned(addr, n) ? kEccErrorResponse
                                                                               : tlm::TLM_OK_RESPONSE;
    if (error != tlm::TLM_OK_RESPONSE) {
      gp.set_response_status(error);
      return;
    }
  }
  uint8_t* data = gp.get_data_ptr();
  for (uint64_t r = 0; list.data && r < rows.count; ++r, data += n) {
    if (gp.is_read() && list.deferred) {
      locate(rows.at(r), n, *list.deferred);
    } else if (gp.is_read()) {
      read(rows.at(r), data, n);
    } else if (list.kept) {
      write_kept(rows.at(r), data, n);
    } else if (!write(rows.at(r), data, n)) {
      gp.set_response_status(kHostMemoryResponse);
      return;
    }
  }
  gp.set_response_status(tlm::TLM_OK_RESPONSE);
  if (sanitizer_ && sanitizer_->tracks() && gp.is_write()) sanitizer_->written(rows);
  if (!list.book) return;
  // NOLINTNEXTLINE(performance-unnecessary-copy-initialization): a copy, the time as it is now
  const sc_core::sc_time now = sc_core::sc_time_stamp();
  const uint64_t done = fabric_.transfer((now + delay).value(), list.stop, gp.is_read(), rows, list.ring_bound);
  delay = sc_core::sc_time::from_value(done) - now;
}

}  // namespace spyre::sim
