#include "control_processor.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace spyre::sim {

ControlProcessor::ControlProcessor(const sc_core::sc_module_name& name, const Config& config, uint32_t card,
                                   Endpoint& endpoint, DeviceMemory& memory, DmaEngine& dma, std::vector<Core*> cores,
                                   Trace& trace, CardStats& stats)
    : sc_core::sc_module(name),
      config_(config),
      clock_(config.chip.clock_mhz),
      endpoint_(endpoint),
      memory_(memory),
      dma_(dma),
      cores_(std::move(cores)),
      launch_(clock_.cycles(config.chip.barrier_cycles)),
      trace_(trace),
      stats_(stats),
      card_(card),
      firmware_(*this) {
  sc_core::sc_spawn_options opts;
  opts.set_stack_size(256 * 1024);
  sc_core::sc_spawn([this] { firmware_.run(); }, "firmware", &opts);
}

bool ControlProcessor::host_read(uint64_t iova, void* dst, uint32_t n) {
  sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
  const bool ok = endpoint_.host_read(iova, dst, n, delay);
  wait(delay);
  return ok;
}

bool ControlProcessor::host_write(uint64_t iova, const void* src, uint32_t n) {
  sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
  const bool ok = endpoint_.host_write(iova, src, n, delay);
  wait(delay);
  return ok;
}

fw::Verdict ControlProcessor::launch(uint64_t program, uint64_t args, uint64_t args_size, uint64_t core_mask) {
  std::vector<Core*> ranks;
  for (uint32_t i = 0; i < cores_.size(); ++i) {
    if (core_mask >> i & 1) ranks.push_back(cores_[i]);
  }
  launch_.reset(ranks);
  for (uint32_t rank = 0; rank < ranks.size(); ++rank) ranks[rank]->start(program, args, args_size, rank, &launch_);
  for (uint32_t i = 0; i < cores_.size(); ++i) {
    if (core_mask >> i & 1) {
      while (cores_[i]->busy()) wait(cores_[i]->done_event());
    }
  }
  for (uint32_t i = 0; i < cores_.size(); ++i) {
    if ((core_mask >> i & 1) && !cores_[i]->result().ok()) {
      fw::Verdict v = cores_[i]->result();
      v.field = hw::Field::kLaunchProgram;
      return v;
    }
  }
  return {};
}

std::string ControlProcessor::read_label(uint64_t addr) const {
  char buf[hw::kMaxLabelBytes] = {};
  const uint64_t n = std::min<uint64_t>(sizeof buf - 1, memory_.size() - std::min(addr, memory_.size()));
  memory_.read(addr, buf, n);
  return std::string(buf, strnlen(buf, n));
}

void ControlProcessor::command_done(uint32_t queue, const hw::Descriptor& d, const hw::Completion& c) {
  wait(clock_.cycles(config_.firmware.command_cycles));
  const char* name = hw::opcode_name(d.opcode);
  ++stats_.commands[name];
  if (c.error != hw::ErrorCode::kOk) ++stats_.command_errors;
  const uint32_t track = trace_.track(card_, fmt::format("queue {:02}", queue));
  // A launch is named by its program and tagged with the host op that queued it: debug information
  // read without timing, as a debugger reads symbols.
  std::string slice = c.error == hw::ErrorCode::kOk ? name : "error";
  std::string op;
  if (d.opcode == hw::Opcode::kLaunch && c.error == hw::ErrorCode::kOk) {
    hw::ProgramHeader h{};
    memory_.read(d.launch.program, &h, sizeof h);
    if (h.name_size > 0) {
      slice.assign(h.name_size, '\0');
      memory_.read(d.launch.program + h.name_offset, slice.data(), h.name_size);
    }
    if (d.launch.label != 0) op = read_label(d.launch.label);
  }
  trace_.slice(track, slice, c.start_cycle, clock_.now_cycles(),
               {{"seq", d.seq}, {"error", static_cast<uint64_t>(c.error)}, {"field", static_cast<uint64_t>(c.field)}},
               op);
}

}  // namespace spyre::sim
