#include "server.h"

#include <algorithm>
#include <stdexcept>

namespace spyre::sim {

namespace {

// Books `bytes` on `s` from `at_ps`: a packet or less (a descriptor fetch, a completion, a
// semaphore) slips between the packets of the transfers booked before it; more waits for room.
uint64_t book(FluidServer& s, uint64_t at_ps, uint64_t bytes, uint64_t packet) {
  return bytes <= packet ? s.pass_ps(at_ps, bytes) : s.reserve_ps(at_ps, bytes);
}

// The upstream port: as fast as a card's link unless the config says otherwise.
double host_port_gbps(const Config& c) {
  return c.server.host_port_gbps > 0 ? c.server.host_port_gbps : c.pcie.bandwidth_gbps;
}

}  // namespace

Server::Server(const Config& config)
    : config_(config),
      crossbar_(config.server.switch_gbps),
      host_up_(host_port_gbps(config)),
      host_down_(host_port_gbps(config)) {}

void Server::add_card(uint32_t card, MemoryPort memory) {
  if (card != ports_.size()) throw std::logic_error("server: cards join in order");
  ports_.push_back(
      Port{FluidServer(config_.pcie.bandwidth_gbps), FluidServer(config_.pcie.bandwidth_gbps), std::move(memory)});
}

SwitchStats Server::stats() const {
  const auto of = [](const FluidServer& b) { return ServerStats{b.bytes(), b.busy_ps()}; };
  return {of(crossbar_), of(host_up_), of(host_down_)};
}

uint64_t Server::path(FluidServer& a, FluidServer* b, FluidServer& c, uint64_t at_ps, uint64_t wire) {
  const uint64_t packet = uint64_t{config_.pcie.max_payload_bytes} + config_.pcie.packet_overhead_bytes;
  uint64_t done = std::max(book(a, at_ps, wire, packet), book(c, at_ps, wire, packet));
  if (b) done = std::max(done, book(*b, at_ps, wire, packet));
  return done;
}

uint64_t Server::host_transfer(uint32_t card, bool to_host, uint64_t at_ps, uint64_t wire) {
  Port& p = ports_.at(card);
  return to_host ? path(p.up, nullptr, host_up_, at_ps, wire) : path(host_down_, nullptr, p.down, at_ps, wire);
}

bool Server::peer_write(uint32_t card, uint32_t peer, uint64_t addr, const uint8_t* src, uint64_t n, uint64_t wire,
                        bool timed, sc_core::sc_time& delay, tlm::tlm_response_status* status) {
  if (peer >= ports_.size()) return false;  // no such card behind the switch: a DMA fault
  auto* data = const_cast<uint8_t*>(src);   // a write payload is only read
  if (!timed) {
    sc_core::sc_time ignored = sc_core::SC_ZERO_TIME;
    return ports_.at(peer).memory(tlm::TLM_WRITE_COMMAND, addr, data, n, ignored, status);
  }
  // The receiving memory takes the bytes as they stream in, far below its bandwidth: it is booked
  // when the transfer starts, not when its last byte lands, so that it does not hold the
  // receiver's memory channels for the transfer's whole time on the link.
  const uint64_t now = sc_core::sc_time_stamp().value();
  const uint64_t crossed = path(ports_.at(card).up, &crossbar_, ports_.at(peer).down, now + delay.value(), wire) +
                           uint64_t{config_.server.switch_latency_ns} * 1000;
  sc_core::sc_time stored = delay;
  const bool ok = ports_.at(peer).memory(tlm::TLM_WRITE_COMMAND, addr, data, n, stored, status);
  delay = std::max(stored, sc_core::sc_time::from_value(crossed - now));
  return ok;
}

bool Server::peer_read(uint32_t card, uint32_t peer, uint64_t addr, uint8_t* dst, uint64_t n, uint64_t wire, bool timed,
                       sc_core::sc_time& delay, tlm::tlm_response_status* status) {
  if (peer >= ports_.size()) return false;
  if (!timed) {
    sc_core::sc_time ignored = sc_core::SC_ZERO_TIME;
    return ports_.at(peer).memory(tlm::TLM_READ_COMMAND, addr, dst, n, ignored, status);
  }
  // The request crosses to the peer, its memory reads, and the completions come back.
  const uint64_t now = sc_core::sc_time_stamp().value();
  const uint64_t latency = uint64_t{config_.server.switch_latency_ns} * 1000;
  sc_core::sc_time read = delay + sc_core::sc_time::from_value(latency);
  if (!ports_.at(peer).memory(tlm::TLM_READ_COMMAND, addr, dst, n, read, status)) return false;
  const uint64_t back = path(ports_.at(peer).up, &crossbar_, ports_.at(card).down, now + read.value(), wire) + latency;
  delay = sc_core::sc_time::from_value(back - now);
  return true;
}

}  // namespace spyre::sim
