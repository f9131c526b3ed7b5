// Device memory (LPDDR5): sparse backing store plus a bandwidth/latency model. All of the
// card's 112 GB are addressable; host memory grows only with the 64 KiB pages that are written.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include <tlm_utils/multi_passthrough_target_socket.h>

#include "spyre/sim/config.h"
#include "timing.h"

namespace spyre::sim {

class DeviceMemory : public sc_core::sc_module {
 public:
  /// Every initiator (DMA engine, cores) binds here. Out-of-range accesses answer
  /// TLM_ADDRESS_ERROR_RESPONSE; the annotated delay includes queueing for bandwidth.
  tlm_utils::multi_passthrough_target_socket<DeviceMemory> socket;

  DeviceMemory(const sc_core::sc_module_name& name, const Config& config);

  uint64_t size() const { return size_; }
  /// Untimed functional access for loaders and tests; the range must lie inside memory.
  void read(uint64_t addr, void* dst, uint64_t n) const;
  void write(uint64_t addr, const void* src, uint64_t n);
  uint64_t resident_bytes() const { return pages_.size() * kPageBytes; }
  const BandwidthServer& server() const { return server_; }

 private:
  static constexpr uint64_t kPageBytes = 64 * 1024;
  void b_transport(int id, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);
  void transport_rows(const RowList& list, tlm::tlm_generic_payload& gp, sc_core::sc_time& delay);

  uint64_t size_;
  BandwidthServer server_;
  std::unordered_map<uint64_t, std::unique_ptr<uint8_t[]>> pages_;
};

}  // namespace spyre::sim
