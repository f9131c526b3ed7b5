#include "control_processor.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace spyre::sim {

ControlProcessor::ControlProcessor(const sc_core::sc_module_name& name, const Config& config, uint32_t card,
                                   Endpoint& endpoint, DeviceMemory& memory, DmaEngine& dma, std::vector<Core*> cores,
                                   Trace& trace, CardStats& stats, Server& server)
    : sc_core::sc_module(name),
      config_(config),
      clock_(config.chip.clock_mhz),
      endpoint_(endpoint),
      memory_(memory),
      dma_(dma),
      cores_(std::move(cores)),
      core_arbiter_(static_cast<uint32_t>(cores_.size())),
      server_(server),
      trace_(trace),
      stats_(stats),
      card_(card),
      firmware_(*this) {
  sc_core::sc_spawn_options opts;
  opts.set_stack_size(256 * 1024);
  for (uint32_t q = 0; q < config.firmware.queues; ++q) {
    sc_core::sc_spawn([this, q] { firmware_.serve(q); }, fmt::format("firmware_q{}", q).c_str(), &opts);
  }
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

hw::Verdict ControlProcessor::launch(uint32_t queue, uint64_t program, const fw::Arguments& args, uint64_t core_mask,
                                     uint32_t priority, const fw::Window& window) {
  core_arbiter_.acquire(core_mask, priority, /*any=*/false);
  std::unique_ptr<Launch> launch;
  if (idle_launches_.empty()) {
    launch = std::make_unique<Launch>(clock_.cycles(config_.chip.barrier_cycles));
  } else {
    launch = std::move(idle_launches_.back());
    idle_launches_.pop_back();
  }
  std::vector<Core*> ranks;
  for (uint32_t i = 0; i < cores_.size(); ++i) {
    if (core_mask >> i & 1) ranks.push_back(cores_[i]);
  }
  launch->reset(ranks);
  launch->set_break(sanitizer_ ? sanitizer_->take_break(queue) : std::nullopt);
  launch->set_checks(sanitizer_ ? sanitizer_->checks(queue) : 0);
  launch->set_print_buffer(sanitizer_ ? sanitizer_->print_buffer(queue) : PrintBuffer{});
  // Arrows in the trace from the launch on its queue's track to each core's program.
  launch->set_flow(next_flow_);
  const uint32_t track = queue_track(queue);
  for (uint32_t rank = 0; rank < ranks.size(); ++rank) trace_.flow(track, clock_.now_cycles(), next_flow_ + rank, true);
  next_flow_ += ranks.size();
  // The launch's share of its cores' counters: what they count from its start to its end.
  const auto totals = [&] {
    LaunchStats t;
    for (uint32_t i = 0; i < cores_.size(); ++i) {
      if (!(core_mask >> i & 1)) continue;
      const CoreStats& cs = stats_.cores[i];
      for (int k = 0; k < static_cast<int>(Stall::kCount); ++k) t.stall[k] += cs.stall[k];
      t.flops += cs.flops;
      t.bytes_loaded += cs.bytes_loaded;
      t.bytes_stored += cs.bytes_stored;
    }
    return t;
  };
  const LaunchStats before = totals();
  const uint64_t start = clock_.now_cycles();
  for (uint32_t rank = 0; rank < ranks.size(); ++rank) {
    ranks[rank]->set_window(window.base, window.size);
    ranks[rank]->start(program, args, rank, launch.get());
  }
  for (Core* core : ranks) {
    while (core->busy()) wait(core->done_event());
  }
  LaunchStats record = totals();
  for (int k = 0; k < static_cast<int>(Stall::kCount); ++k) record.stall[k] -= before.stall[k];
  record.flops -= before.flops;
  record.bytes_loaded -= before.bytes_loaded;
  record.bytes_stored -= before.bytes_stored;
  record.cores = static_cast<uint32_t>(ranks.size());
  record.start = start;
  record.end = clock_.now_cycles();
  finished_launches_.emplace(std::make_pair(program, args.addr), std::move(record));
  hw::Verdict v;
  for (Core* core : ranks) {
    if (!core->result().ok()) {
      v = core->result();
      v.field = hw::Field::kLaunchProgram;
      if (v.error == hw::ErrorCode::kSanitizerReport && sanitizer_) report(queue, sanitizer_->report(core->id()));
      break;
    }
  }
  idle_launches_.push_back(std::move(launch));
  core_arbiter_.release(core_mask);
  return v;
}

uint32_t ControlProcessor::queue_track(uint32_t queue) {
  // The track's name is formatted once per queue: this runs for every command.
  if (queue >= queue_tracks_.size()) queue_tracks_.resize(queue + 1, 0);
  if (queue_tracks_[queue] == 0) queue_tracks_[queue] = trace_.track(card_, fmt::format("queue {:02}", queue)) + 1;
  return queue_tracks_[queue] - 1;
}

void ControlProcessor::report(uint32_t queue, const SanitizerReport& r) {
  const auto set = [&](uint32_t reg, uint32_t value) { endpoint_.reg_write_device(hw::queue_reg(queue, reg), value); };
  set(hw::kQSanKind, static_cast<uint32_t>(r.kind) | (r.write ? hw::kSanReportWrite : 0));
  set(hw::kQSanAddrLo, static_cast<uint32_t>(r.addr));
  set(hw::kQSanAddrHi, static_cast<uint32_t>(r.addr >> 32));
  set(hw::kQSanBytes, static_cast<uint32_t>(std::min<uint64_t>(r.bytes, UINT32_MAX)));
  set(hw::kQSanTagLo, static_cast<uint32_t>(r.tag));
  set(hw::kQSanTagHi, static_cast<uint32_t>(r.tag >> 32));
  set(hw::kQSanOther, r.other);
}

std::string ControlProcessor::read_label(uint64_t addr) const {
  char buf[hw::kMaxLabelBytes] = {};
  const uint64_t n = std::min<uint64_t>(sizeof buf - 1, memory_.size() - std::min(addr, memory_.size()));
  memory_.read(addr, buf, n);
  return std::string(buf, strnlen(buf, n));
}

void ControlProcessor::command_done(uint32_t queue, const hw::Descriptor& d, const hw::Completion& c) {
  wait(clock_.cycles(config_.firmware.command_cycles));
  endpoint_.note_completed(queue, d.seq);
  const char* name = hw::opcode_name(d.opcode);
  ++stats_.commands[name];
  if (c.error != hw::ErrorCode::kOk) ++stats_.command_errors;
  const uint32_t track = queue_track(queue);
  // A launch is named by its program and tagged with the host op that queued it: debug information
  // read without timing, as a debugger reads symbols. A failed launch keeps both (when its program
  // lies in memory), and its slice says that it failed and why.
  std::string slice = name;
  std::string op;
  if (d.opcode == hw::Opcode::kLaunch) {
    hw::ProgramHeader h{};
    const uint64_t size = memory_.size();
    if (d.launch.program <= size && sizeof h <= size - d.launch.program) {
      memory_.read(d.launch.program, &h, sizeof h);
      const uint64_t at = d.launch.program + h.name_offset;
      if (h.name_size > 0 && h.name_size < hw::kMaxLabelBytes && at >= d.launch.program && at <= size &&
          h.name_size <= size - at) {
        slice.assign(h.name_size, '\0');
        memory_.read(at, slice.data(), h.name_size);
      }
    }
    if (d.launch.label != 0) op = read_label(d.launch.label);
  } else if (d.opcode == hw::Opcode::kCopy && d.copy.label != 0) {
    op = read_label(d.copy.label);  // a copy is named by its label (a collective's step), when it has one
    if (!op.empty()) slice = op;
  }
  const std::string launch_name = slice;
  if (c.error != hw::ErrorCode::kOk) slice = fmt::format("{} (failed: {})", slice, hw::error_name(c.error));
  if (d.opcode == hw::Opcode::kLaunch) {
    const auto it = finished_launches_.find({d.launch.program, d.launch.args});
    if (it != finished_launches_.end()) {
      if (stats_.launches.size() < CardStats::kMaxLaunches) {
        it->second.name = launch_name;
        it->second.op = op;
        it->second.queue = queue;
        stats_.launches.push_back(std::move(it->second));
      } else {
        ++stats_.launches_dropped;
      }
      finished_launches_.erase(it);
    }
  }
  trace_.slice(track, slice, c.start_cycle, clock_.now_cycles(),
               {{"seq", d.seq}, {"error", static_cast<uint64_t>(c.error)}, {"field", static_cast<uint64_t>(c.field)}},
               op);
}

}  // namespace spyre::sim
