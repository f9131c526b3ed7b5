#include "runtime_parts.h"

namespace spyre::backend {

std::unique_ptr<driver::HostBuffer> StagingPool::take(uint64_t n) {
  std::lock_guard lock(mu_);
  auto it = buffers_.lower_bound(n);
  if (it == buffers_.end() || it->first > 2 * n + (64 << 10)) return nullptr;  // none, or far too big
  std::unique_ptr<driver::HostBuffer> b = std::move(it->second);
  bytes_ -= it->first;
  buffers_.erase(it);
  return b;
}

void StagingPool::give_back(std::unique_ptr<driver::HostBuffer> b) {
  std::lock_guard lock(mu_);
  if (bytes_ + b->size() > kMaxBytes) return;  // freed here
  bytes_ += b->size();
  buffers_.emplace(b->size(), std::move(b));
}

driver::Status TimestampSlots::map(driver::Device& device) {
  const driver::Status s = device.map_host(kCount * sizeof(uint64_t), &buffer_);
  if (!s.ok()) return s;
  std::lock_guard lock(mu_);
  for (int i = kCount - 1; i >= 0; --i) free_.push_back(i);
  return s;
}

int TimestampSlots::take() {
  std::lock_guard lock(mu_);
  if (free_.empty()) return -1;
  const int slot = free_.back();
  free_.pop_back();
  return slot;
}

void TimestampSlots::give_back(int slot) {
  std::lock_guard lock(mu_);
  free_.push_back(slot);
}

uint64_t TimestampSlots::iova(int slot) const {
  return buffer_->iova() + static_cast<uint64_t>(slot) * sizeof(uint64_t);
}

uint64_t TimestampSlots::read(int slot) const {
  return static_cast<const volatile uint64_t*>(buffer_->data())[slot];
}

uint64_t LabelTable::find(const std::string& op) {
  std::lock_guard lock(mu_);
  const auto it = labels_.find(op);
  return it == labels_.end() ? 0 : it->second;
}

std::string LabelTable::op_at(uint64_t addr) {
  std::lock_guard lock(mu_);
  for (const auto& [op, at] : labels_) {
    if (at == addr) return op;
  }
  return {};
}

uint64_t LabelTable::keep(const std::string& op, uint64_t addr) {
  std::lock_guard lock(mu_);
  return labels_.emplace(op, addr).first->second;
}

uint64_t PeerWindows::get(int peer, const std::function<uint64_t()>& map) {
  std::lock_guard lock(mu_);
  auto it = windows_.find(peer);
  if (it == windows_.end()) it = windows_.emplace(peer, map()).first;
  return it->second;
}

}  // namespace spyre::backend
