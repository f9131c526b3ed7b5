#include "launch_replay.h"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "runner.h"
#include "spyre/hw/commands.h"

namespace spyre::simtool {

uint32_t end_of(const launchfile::LaunchFile& f, uint32_t rank) {
  hw::ProgramHeader h{};
  if (f.program.size() < sizeof h) throw std::runtime_error("the captured program is shorter than its header");
  std::memcpy(&h, f.program.data(), sizeof h);
  if (rank >= h.num_entries || sizeof h + 4ull * h.num_entries > f.program.size() ||
      h.instr_offset + uint64_t{h.num_instrs} * sizeof(hw::Instr) > f.program.size()) {
    throw std::runtime_error(fmt::format("the captured program has no core of rank {}", rank));
  }
  uint32_t pc = 0;
  std::memcpy(&pc, f.program.data() + sizeof h + 4ull * rank, 4);
  for (; pc < h.num_instrs; ++pc) {
    hw::Instr in{};
    std::memcpy(&in, f.program.data() + h.instr_offset + uint64_t{pc} * sizeof in, sizeof in);
    if (in.op == hw::Op::kEnd) return pc;
  }
  throw std::runtime_error(fmt::format("the core of rank {} has no END", rank));
}

LaunchReplay replay_launch(driver::Device& dev, const launchfile::LaunchFile& f, std::optional<Stop> stop) {
  const auto format = [](bool dlfloat) { return dlfloat ? "DLFloat16" : "IEEE half"; };
  if (f.fp16_dlfloat != dev.info().fp16_dlfloat) {
    throw std::runtime_error(
        fmt::format("the launch was captured on a card that keeps fp16 as {}, and this config keeps it as {} "
                    "(chip.fp16_format): its arithmetic would differ",
                    format(f.fp16_dlfloat), format(dev.info().fp16_dlfloat)));
  }
  if (f.args.size() > hw::kMaxLaunchArgs) throw std::runtime_error("the capture has too many arguments");
  std::unique_ptr<driver::Queue> q;
  check(dev.create_queue(64, &q));
  Allocations mem(dev);
  std::vector<uint64_t> where(f.blocks.size());
  for (size_t i = 0; i < f.blocks.size(); ++i) {
    const launchfile::Block& b = f.blocks[i];
    where[i] = mem.alloc(b.size);
    upload(dev, *q, where[i], b.size, [&](void* p) { std::memcpy(p, b.input.data(), b.size); });
  }
  const uint64_t program = mem.alloc(f.program.size());
  upload(dev, *q, program, f.program.size(), [&](void* p) { std::memcpy(p, f.program.data(), f.program.size()); });
  const std::string op = (f.op.empty() ? std::string("launch") : f.op).substr(0, hw::kMaxLabelBytes - 1);
  const uint64_t label = mem.alloc(op.size() + 1);
  upload(dev, *q, label, op.size() + 1, [&](void* p) { std::memcpy(p, op.c_str(), op.size() + 1); });
  std::vector<uint64_t> args;
  args.reserve(f.args.size());
  for (const launchfile::Arg& a : f.args) args.push_back(a.in_block ? where[a.block] + a.offset : a.value);

  LaunchReplay r;
  uint64_t seq = 0;
  uint64_t dump = 0;
  const uint64_t dump_bytes = hw::kBreakHeaderBytes + dev.info().card.lx_bytes;
  if (stop) {  // the core writes its registers and scratchpad here as it stops
    dump = mem.alloc(dump_bytes);
    check(q->sanitize(hw::SanitizeAction::kBreak, dump, dump_bytes, uint64_t{stop->rank} << 32 | stop->instruction,
                      &seq));
  }
  check(q->launch(program, f.program.size(), args.data(), args.size(), f.core_mask, label, &seq));
  if (const driver::Status s = q->wait(seq); !s.ok()) {
    r.error = s.message();
    if (stop) {
      std::vector<uint8_t> bytes(dump_bytes);
      (void)q->reset();
      download(dev, *q, dump, dump_bytes, bytes.data());
      r.registers.resize(hw::kBreakHeaderBytes / 8);
      std::memcpy(r.registers.data(), bytes.data(), hw::kBreakHeaderBytes);
      r.scratchpad.assign(bytes.begin() + hw::kBreakHeaderBytes, bytes.end());
    }
    return r;
  }
  hw::Completion c{};
  check(q->completion(seq, &c));
  r.cycles = c.end_cycle - c.start_cycle;
  std::vector<uint8_t> got;
  for (size_t i = 0; i < f.blocks.size(); ++i) {
    const launchfile::Block& b = f.blocks[i];
    got.resize(b.size);
    download(dev, *q, where[i], b.size, got.data());
    r.bytes += b.size;
    for (uint64_t k = 0; k < b.size; ++k) {
      if (got[k] == b.output[k]) continue;
      if (r.differing_bytes++ == 0) {
        r.first_block = static_cast<uint32_t>(i);
        r.first_offset = k;
      }
    }
  }
  return r;
}

}  // namespace spyre::simtool
