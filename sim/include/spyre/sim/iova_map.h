// For HostLink implementations (the inproc transport's IOMMU, spyre-simd's): the IOVA ranges a
// card may reach and what backs them, and the store that puts a card's DMA write into host memory.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>

namespace spyre::sim {

/// IOVA ranges, each starting at its key, to what backs them (a `Region` has a `len`).
template <typename Region>
class IovaMap {
 public:
  void insert(uint64_t iova, const Region& r) { regions_[iova] = r; }
  bool erase(uint64_t iova) { return regions_.erase(iova) != 0; }
  /// The region that holds all of [iova, iova + n), with iova's offset into it; nullptr when none does.
  const Region* find(uint64_t iova, uint64_t n, uint64_t* offset) const {
    auto it = regions_.upper_bound(iova);
    if (it == regions_.begin()) return nullptr;
    --it;
    const uint64_t off = iova - it->first;
    if (off >= it->second.len || n > it->second.len - off) return nullptr;
    *offset = off;
    return &it->second;
  }
  /// Every mapping, by IOVA (to drop several at once).
  std::map<uint64_t, Region>& all() { return regions_; }

 private:
  std::map<uint64_t, Region> regions_;
};

/// A card's DMA write of `n` bytes into host memory at `dst`. An aligned 8-byte write lands as one
/// atomic release store: fence words are polled by host threads.
inline void store_dma_write(uint8_t* dst, const void* src, uint64_t n) {
  if (n == 8 && reinterpret_cast<uintptr_t>(dst) % 8 == 0) {
    uint64_t v;
    std::memcpy(&v, src, 8);
    __atomic_store_n(reinterpret_cast<uint64_t*>(dst), v, __ATOMIC_RELEASE);
  } else {
    std::memcpy(dst, src, n);
  }
}

}  // namespace spyre::sim
