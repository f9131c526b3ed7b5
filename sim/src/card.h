// One Spyre card: instantiates the blocks and binds them. Behaviour lives in the blocks.
#pragma once

#include <memory>

#include <tlm_utils/simple_initiator_socket.h>
#include <vector>

#include "control_processor.h"
#include "core.h"
#include "device_memory.h"
#include "dma_engine.h"
#include "endpoint.h"
#include "fabric.h"
#include "sanitizer.h"
#include "server.h"
#include "worker.h"

namespace spyre::sim {

class Card : public sc_core::sc_module {
 public:
  /// The host's side of BAR0 (the wire), bound to the endpoint.
  tlm_utils::simple_initiator_socket<Card> host_bar0;

  Card(const sc_core::sc_module_name& name, uint32_t index, const Config& config, Trace& trace, Server& server);

  Endpoint& endpoint() { return *endpoint_; }
  /// BAR0 access from the host side, through the endpoint's target socket. False on a bus error.
  bool mmio(bool write, uint32_t offset, uint32_t& value);
  DeviceMemory& memory() { return *memory_; }
  /// Where the cores' GATHER and SCATTER indices are recorded or played from (nullptr: neither).
  void set_index_tape(IndexTape* tape) {
    for (auto& c : cores_) c->set_index_tape(tape);
  }
  /// The counters, with the fabric's and the PCIe link's brought up to date.
  const CardStats& stats();

 private:
  CardStats stats_;
  uint32_t index_;
  Server& server_;
  Fabric fabric_;
  Sanitizer sanitizer_;  // outlives the memory, cores and control processor that use it
  Worker worker_;        // outlives the cores, whose arithmetic it runs
  std::unique_ptr<DeviceMemory> memory_;
  /// Other cards' DMA into this card's memory, from the PCIe stop (peer-to-peer through the switch).
  tlm_utils::simple_initiator_socket<Card> peer_in_;
  std::unique_ptr<Endpoint> endpoint_;
  std::unique_ptr<DmaEngine> dma_;
  std::vector<std::unique_ptr<Core>> cores_;
  std::unique_ptr<ControlProcessor> cp_;
};

}  // namespace spyre::sim
