#include "program_cache.h"

namespace spyre::backend {

std::optional<LoadedProgram> ProgramCache::find(const std::string& key) {
  std::lock_guard lock(mu_);
  const auto it = entries_.find(key);
  if (it == entries_.end()) {
    ++misses_;
    return std::nullopt;
  }
  ++hits_;
  order_.splice(order_.begin(), order_, it->second.order);
  return it->second.program;
}

std::optional<LoadedProgram> ProgramCache::at_address(uint64_t addr) const {
  std::lock_guard lock(mu_);
  for (const auto& [key, e] : entries_) {
    if (e.program.addr == addr) return e.program;
  }
  return std::nullopt;
}

std::vector<LoadedProgram> ProgramCache::insert(const std::string& key, const LoadedProgram& p, LoadedProgram* kept) {
  std::lock_guard lock(mu_);
  std::vector<LoadedProgram> evicted;
  if (const auto it = entries_.find(key); it != entries_.end()) {
    *kept = it->second.program;
    return evicted;
  }
  *kept = p;
  while (!order_.empty() && (entries_.size() + 1 > max_entries_ || bytes_ + p.size > max_bytes_)) {
    const auto victim = entries_.find(order_.back());
    evicted.push_back(victim->second.program);
    bytes_ -= victim->second.program.size;
    entries_.erase(victim);
    order_.pop_back();
    ++evictions_;
  }
  order_.push_front(key);
  entries_.emplace(key, Entry{p, order_.begin()});
  bytes_ += p.size;
  return evicted;
}

ProgramCacheStats ProgramCache::stats() const {
  std::lock_guard lock(mu_);
  return {entries_.size(), bytes_, hits_, misses_, evictions_};
}

}  // namespace spyre::backend
