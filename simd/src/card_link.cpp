#include "card_link.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace spyre::simd {

namespace {
constexpr uint64_t kPage = 4096;
}

std::string CardLink::map(uint32_t client, int fd, uint64_t bytes, uint64_t offset, uint64_t* iova) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return std::string("cannot map the client's memory: ") + std::strerror(errno);
  std::lock_guard lock(mu_);
  uint64_t& next = next_[client];
  if (next == 0) next = kPage;
  *iova = (uint64_t{client} << kClientShift) + next;
  next += bytes + kPage;  // a guard page between mappings
  regions_.insert(*iova, {static_cast<uint8_t*>(p), bytes, client});
  return "";
}

uint64_t CardLink::map_peer(uint32_t client, uint32_t peer, uint64_t addr, uint64_t bytes) {
  std::lock_guard lock(mu_);
  uint64_t& next = next_[client];
  if (next == 0) next = kPage;
  const uint64_t iova = (uint64_t{client} << kClientShift) + next;
  next += (bytes + kPage - 1) / kPage * kPage + kPage;
  regions_.insert(iova, {nullptr, bytes, client, peer, addr});
  return iova;
}

bool CardLink::unmap(uint32_t client, uint64_t iova) {
  std::lock_guard lock(mu_);
  uint64_t off = 0;
  const Region* r = regions_.find(iova, 1, &off);
  if (!r || off != 0 || r->client != client) return false;
  if (r->host) munmap(r->host, r->len);
  regions_.erase(iova);
  return true;
}

void CardLink::set_owner(uint32_t q, uint32_t client) {
  std::lock_guard lock(mu_);
  if (q < owner_.size()) owner_[q] = client;
}

void CardLink::set_irq(uint32_t client, int fd) {
  std::lock_guard lock(mu_);
  if (auto it = irqs_.find(client); it != irqs_.end()) close(it->second);
  irqs_[client] = fd;
}

void CardLink::drop(uint32_t client) {
  std::lock_guard lock(mu_);
  auto& all = regions_.all();
  for (auto it = all.begin(); it != all.end();) {
    if (it->second.client == client) {
      if (it->second.host) munmap(it->second.host, it->second.len);
      it = all.erase(it);
    } else {
      ++it;
    }
  }
  if (auto it = irqs_.find(client); it != irqs_.end()) {
    close(it->second);
    irqs_.erase(it);
  }
  next_.erase(client);
}

void CardLink::revoke_peer(uint32_t peer, uint64_t addr, uint64_t bytes) {
  std::lock_guard lock(mu_);
  auto& all = regions_.all();
  for (auto it = all.begin(); it != all.end();) {
    const Region& r = it->second;
    const bool reaches = !r.host && r.peer == peer && r.peer_addr < addr + bytes && addr < r.peer_addr + r.len;
    it = reaches ? all.erase(it) : std::next(it);
  }
}

bool CardLink::dma_read(uint64_t iova, void* dst, uint64_t n) {
  std::lock_guard lock(mu_);
  uint64_t off = 0;
  const Region* r = regions_.find(iova, n, &off);
  if (!r || !r->host) return false;  // a peer window is the switch's (peer_window)
  std::memcpy(dst, r->host + off, n);
  return true;
}

bool CardLink::dma_write(uint64_t iova, const void* src, uint64_t n) {
  std::lock_guard lock(mu_);
  uint64_t off = 0;
  const Region* r = regions_.find(iova, n, &off);
  if (!r || !r->host) return false;
  sim::store_dma_write(r->host + off, src, n);
  return true;
}

bool CardLink::peer_window(uint64_t iova, uint64_t n, uint32_t* card, uint64_t* addr) {
  std::lock_guard lock(mu_);
  uint64_t off = 0;
  const Region* r = regions_.find(iova, n, &off);
  if (!r || r->host) return false;
  *card = r->peer;
  *addr = r->peer_addr + off;
  return true;
}

void CardLink::raise_irq(uint32_t vector) {
  std::lock_guard lock(mu_);
  if (vector >= owner_.size()) return;
  const auto it = irqs_.find(owner_[vector]);
  const uint64_t one = 1;
  if (it != irqs_.end()) (void)!write(it->second, &one, sizeof one);
}

}  // namespace spyre::simd
