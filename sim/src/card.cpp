#include "card.h"

#include <fmt/format.h>

namespace spyre::sim {

Card::Card(const sc_core::sc_module_name& name, uint32_t index, const Config& config, Trace& trace, Server& server)
    : sc_core::sc_module(name),
      host_bar0("host_bar0"),
      index_(index),
      server_(server),
      fabric_(config),
      worker_(config.sim.async_compute),
      peer_in_("peer_in") {
  stats_.cores.resize(config.chip.cores);
  memory_ = std::make_unique<DeviceMemory>("memory", config, fabric_);
  memory_->set_write_guard([this](uint64_t addr, uint64_t n) { worker_.settle_device_write(addr, addr + n); });
  memory_->set_sanitizer(&sanitizer_);
  peer_in_.bind(memory_->socket);
  server.add_card(index, [this](tlm::tlm_command cmd, uint64_t addr, uint8_t* data, uint64_t n, sc_core::sc_time& delay,
                                tlm::tlm_response_status* status) {
    return tlm_access(peer_in_, cmd, addr, data, n, delay, Fabric::pcie_stop(), status);
  });
  endpoint_ = std::make_unique<Endpoint>("pcie", config, index, server, memory_->size(), stats_);
  host_bar0.bind(endpoint_->bar0);
  endpoint_->on_scrub([this](uint64_t addr, uint64_t n) {
    memory_->scrub(addr, n);
    sanitizer_.forget(addr, n);
  });
  endpoint_->on_queue_reset([this](uint32_t q) { sanitizer_.reset_queue(q); });
  dma_ = std::make_unique<DmaEngine>("dma", config, index, *endpoint_, trace, stats_);
  dma_->mem.bind(memory_->socket);
  std::vector<Core*> cores;
  for (uint32_t i = 0; i < config.chip.cores; ++i) {
    cores_.push_back(std::make_unique<Core>(fmt::format("core{}", i).c_str(), index, i, config, fabric_.core_stop(i),
                                            trace, stats_.cores[i], worker_));
    cores_.back()->mem.bind(memory_->socket);
    cores_.back()->set_sanitizer(&sanitizer_);
    cores_.back()->set_debug_memory(memory_.get());
    cores.push_back(cores_.back().get());
  }
  cp_ = std::make_unique<ControlProcessor>("cp", config, index, *endpoint_, *memory_, *dma_, std::move(cores), trace,
                                           stats_, server);
  cp_->set_sanitizer(&sanitizer_);
  const FaultsConfig& f = config.faults;
  if (index == f.card) {
    memory_->poison(f.ecc_addr, f.ecc_bytes);
    dma_->fail_copy(f.dma_error_copy);
    if (f.hang_core >= 0) cores_[static_cast<uint32_t>(f.hang_core)]->hang_in(f.hang_launch);
    if (f.link_down_cycle > 0) endpoint_->link_down_at(f.link_down_cycle);
  }
}

const CardStats& Card::stats() {
  const auto server = [](const auto& b) { return ServerStats{b.bytes(), b.busy_ps()}; };
  stats_.channels.clear();
  for (const BandwidthServer& c : fabric_.channels()) stats_.channels.push_back(server(c));
  stats_.links.clear();
  for (const Fabric::Link& l : fabric_.links()) stats_.links.push_back({l.from, l.to, l.clockwise, server(*l.server)});
  stats_.ring_byte_hops = fabric_.byte_hops();
  stats_.pcie_up = server(server_.link_up(index_));
  stats_.pcie_down = server(server_.link_down(index_));
  return stats_;
}

bool Card::mmio(bool write, uint32_t offset, uint32_t& value) {
  tlm::tlm_generic_payload gp;
  gp.set_command(write ? tlm::TLM_WRITE_COMMAND : tlm::TLM_READ_COMMAND);
  gp.set_address(offset);
  gp.set_data_ptr(reinterpret_cast<unsigned char*>(&value));
  gp.set_data_length(4);
  gp.set_streaming_width(4);
  gp.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
  sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
  host_bar0->b_transport(gp, delay);
  return gp.is_response_ok();
}

}  // namespace spyre::sim
