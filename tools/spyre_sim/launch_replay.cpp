#include "launch_replay.h"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "runner.h"
#include "spyre/hw/commands.h"

namespace spyre::simtool {

LaunchReplay replay_launch(driver::Device& dev, const launchfile::LaunchFile& f) {
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
  check(q->launch(program, f.program.size(), args.data(), args.size(), f.core_mask, label, &seq));
  if (const driver::Status s = q->wait(seq); !s.ok()) {
    r.error = s.message();
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
