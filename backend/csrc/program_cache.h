// The programs a device has loaded, by signature, least recently used first out. Bounded in count
// and in device bytes, so that a workload with ever new shapes does not grow host or device memory
// without limit. Thread-safe: each call holds the cache's own lock.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "spyre/compiler/program.h"

namespace spyre::backend {

struct LoadedProgram {
  uint64_t addr = 0;  // device memory holding the image
  uint64_t size = 0;
  uint64_t core_mask = 0;
  std::string name;                                     // the program's own name (kernel name in profiles)
  bool prints = false;                                  // it has PRINT messages: its queue needs a print buffer
  std::shared_ptr<const compiler::ProgramNotes> notes;  // what its listing shows (ops, arguments)
};

struct ProgramCacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
};

class ProgramCache {
 public:
  ProgramCache(size_t max_entries, uint64_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

  /// The program cached under `key`, now the most recently used; nullopt (a miss) otherwise.
  std::optional<LoadedProgram> find(const std::string& key);
  /// Caches `p` under `key` unless the key is there already (then returns the cached one in `*kept`
  /// and `p` is the caller's to free). Returns the programs evicted to make room: their device
  /// memory is the caller's to free once the work using them has run.
  std::vector<LoadedProgram> insert(const std::string& key, const LoadedProgram& p, LoadedProgram* kept);
  ProgramCacheStats stats() const;
  /// The cached program loaded at device address `addr`, if any (an error path: it looks at every
  /// entry, and counts neither a hit nor a miss).
  std::optional<LoadedProgram> at_address(uint64_t addr) const;

 private:
  using Order = std::list<std::string>;  // front: most recently used
  struct Entry {
    LoadedProgram program;
    Order::iterator order;
  };
  mutable std::mutex mu_;
  size_t max_entries_;
  uint64_t max_bytes_;
  std::unordered_map<std::string, Entry> entries_;
  Order order_;
  uint64_t bytes_ = 0;
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace spyre::backend
