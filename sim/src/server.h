// What the cards of one simulated server share, beside the host: the PCIe switch their links
// meet in, the switch's upstream port to the host, and the line on which a semaphore raised on any
// card wakes the firmware waits for another card's semaphore (hw::kWaitHost).
//
// Every card's link (pcie.bandwidth_gbps per direction) ends at a port of the switch. Host DMA
// crosses the card's link and the upstream port (server.host_port_gbps); peer-to-peer DMA crosses
// the sender's link, the crossbar (server.switch_gbps, shared by all ports) and the receiver's
// link, and lands in the receiver's memory through its fabric. A transfer books every part of its
// path from the same time (cut-through) and ends when the slowest part has carried it, so
// contention anywhere on the path delays it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <systemc>
#include <tlm>

#include "spyre/sim/config.h"
#include "timing.h"
#include "trace.h"

namespace spyre::sim {

class Server {
 public:
  /// A card's memory as peers reach it: a timed access from the card's PCIe stop, which advances
  /// `delay` by the memory's time. False on an error response.
  using MemoryPort = std::function<bool(tlm::tlm_command, uint64_t addr, uint8_t* data, uint64_t n,
                                        sc_core::sc_time& delay, tlm::tlm_response_status* status)>;

  explicit Server(const Config& config);

  /// Card `card` joins the server (cards join in order, from 0): its memory as peers reach it.
  void add_card(uint32_t card, MemoryPort memory);

  /// Notified whenever a card raises a semaphore; signals() counts them.
  sc_core::sc_event& signal() { return signal_; }
  uint64_t signals() const { return signals_; }
  void raise_signal() {
    ++signals_;
    signal_.notify(sc_core::SC_ZERO_TIME);
  }

  /// Times `wire` bytes of a host DMA by `card` that may start at `at_ps`: a read's completions
  /// come down the upstream port and the card's link, a write goes up them. Returns when the last
  /// byte has crossed (latency not included).
  uint64_t host_transfer(uint32_t card, bool to_host, uint64_t at_ps, uint64_t wire);

  /// Card `card`'s DMA writes `n` bytes (`wire` on the links) at `addr` of card `peer`'s memory, or
  /// reads them: through the switch, and timed there when `timed`. `delay` (relative to now) is
  /// advanced to when the transfer completes: a write when its bytes are in the peer's memory, a
  /// read when they have arrived. False when the peer's memory answered an error (its response in
  /// `status`).
  bool peer_write(uint32_t card, uint32_t peer, uint64_t addr, const uint8_t* src, uint64_t n, uint64_t wire,
                  bool timed, sc_core::sc_time& delay, tlm::tlm_response_status* status);
  bool peer_read(uint32_t card, uint32_t peer, uint64_t addr, uint8_t* dst, uint64_t n, uint64_t wire, bool timed,
                 sc_core::sc_time& delay, tlm::tlm_response_status* status);

  /// Card `card`'s link to the switch: up (card to switch) and down (switch to card).
  const FluidServer& link_up(uint32_t card) const { return ports_.at(card).up; }
  const FluidServer& link_down(uint32_t card) const { return ports_.at(card).down; }
  /// What crossed the crossbar and the upstream port, for the stats.
  SwitchStats stats() const;

 private:
  struct Port {
    FluidServer up, down;
    MemoryPort memory;
  };

  /// Books `wire` bytes on links `a` and `c` and (unless nullptr) the shared `b` between them,
  /// all from `at_ps`; returns when the slowest has carried them.
  uint64_t path(FluidServer& a, FluidServer* b, FluidServer& c, uint64_t at_ps, uint64_t wire);

  const Config& config_;
  std::vector<Port> ports_;
  FluidServer crossbar_;
  FluidServer host_up_, host_down_;
  sc_core::sc_event signal_{"server_signal"};
  uint64_t signals_ = 0;
};

}  // namespace spyre::sim
