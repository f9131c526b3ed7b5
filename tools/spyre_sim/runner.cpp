#include "runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "spyre/hw/commands.h"

namespace spyre::simtool {

void check(const driver::Status& s) {
  if (!s.ok()) throw std::runtime_error(s.message());
}

Allocations::~Allocations() {
  for (uint64_t a : addrs_) (void)dev_.free(a);
}

uint64_t Allocations::alloc(uint64_t bytes) {
  uint64_t addr = 0;
  check(dev_.alloc(std::max<uint64_t>(bytes, 1), &addr));
  addrs_.push_back(addr);
  return addr;
}

std::unique_ptr<driver::HostBuffer> map(driver::Device& dev, uint64_t bytes) {
  std::unique_ptr<driver::HostBuffer> b;
  check(dev.map_host(std::max<uint64_t>(bytes, 1), &b));
  return b;
}

void upload(driver::Device& dev, driver::Queue& q, uint64_t dst, uint64_t n, const std::function<void(void*)>& fill) {
  const auto staging = map(dev, n);
  fill(staging->data());
  uint64_t seq = 0;
  check(q.copy(staging->iova(), dst, n, hw::kCopySrcHost, &seq));
  check(q.wait(seq));
}

void download(driver::Device& dev, driver::Queue& q, uint64_t src, uint64_t n, void* dst) {
  const auto staging = map(dev, n);
  uint64_t seq = 0;
  check(q.copy(src, staging->iova(), n, hw::kCopyDstHost, &seq));
  check(q.wait(seq));
  std::memcpy(dst, staging->data(), n);
}

RunResult run_kernel(driver::Device& dev, driver::Queue& q, Kernel& k, uint32_t repeat, const Formats& formats,
                     bool read_values) {
  Allocations mem(dev);
  std::vector<uint64_t> addr(k.buffers.size());
  for (size_t i = 0; i < k.buffers.size(); ++i) {
    Buffer& b = k.buffers[i];
    addr[i] = mem.alloc(b.bytes());
    if (b.role != Buffer::Role::kInput) continue;
    upload(dev, q, addr[i], b.bytes(), [&](void* p) {
      if (b.values.empty()) {
        std::memset(p, 0, b.bytes());  // a run that computes no values (timing mode)
      } else {
        encode(b.dtype, formats, b.values.data(), b.numel, p);
      }
    });
  }
  const std::vector<uint8_t>& image = k.program.image;
  const uint64_t program = mem.alloc(image.size());
  upload(dev, q, program, image.size(), [&](void* p) { std::memcpy(p, image.data(), image.size()); });
  if (k.args.size() > hw::kMaxLaunchArgs || k.program.num_args > k.args.size()) {
    throw std::logic_error("runner: the kernel's argument list does not fit its program");
  }
  std::vector<uint64_t> args;
  args.reserve(k.args.size());
  for (uint32_t b : k.args) args.push_back(addr[b]);
  const uint64_t args_bytes = args.size() * sizeof(uint64_t);
  const uint64_t args_addr = mem.alloc(args_bytes);
  upload(dev, q, args_addr, args_bytes, [&](void* p) { std::memcpy(p, args.data(), args_bytes); });
  const std::string title = k.title().substr(0, hw::kMaxLabelBytes - 1);  // the launch's name in traces
  const uint64_t label = mem.alloc(title.size() + 1);
  upload(dev, q, label, title.size() + 1, [&](void* p) { std::memcpy(p, title.c_str(), title.size() + 1); });

  RunResult r;
  q.observe([&](hw::Opcode op, const hw::Completion& c) {
    if (op == hw::Opcode::kLaunch && c.error == hw::ErrorCode::kOk)
      r.launch_cycles.push_back(c.end_cycle - c.start_cycle);
  });
  const auto stamps = map(dev, 2 * sizeof(uint64_t));
  uint64_t seq = 0;
  const auto t0 = std::chrono::steady_clock::now();
  check(q.timestamp(stamps->iova(), &seq));
  for (uint32_t i = 0; i < repeat; ++i) {
    check(q.launch(program, image.size(), args_addr, args_bytes, k.program.core_mask, label, &seq));
  }
  check(q.timestamp(stamps->iova() + sizeof(uint64_t), &seq));
  const driver::Status done = q.synchronize();
  r.launch_wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  q.observe({});
  check(done);
  const auto* t = static_cast<const volatile uint64_t*>(stamps->data());
  r.span_cycles = t[1] - t[0];

  for (size_t i = 0; i < k.buffers.size(); ++i) {
    Buffer& b = k.buffers[i];
    if (b.role != Buffer::Role::kOutput) continue;
    const auto staging = map(dev, b.bytes());
    check(q.copy(addr[i], staging->iova(), b.bytes(), hw::kCopyDstHost, &seq));
    check(q.wait(seq));
    if (!read_values) continue;
    b.values.resize(b.numel);
    decode(b.dtype, formats, staging->data(), b.numel, b.values.data());
  }
  return r;
}

}  // namespace spyre::simtool
