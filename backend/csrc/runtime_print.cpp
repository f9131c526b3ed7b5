// Device printf on the host: a queue that launches a program with PRINT messages gets a print
// buffer on the card (SANITIZE kPrintBuffer, before that launch, in queue order). Every wait on the
// queue reads what its launches printed, formats each record with its program's messages (read
// back from device memory, as a debugger reads symbols) and writes the text to stderr, as CUDA's
// printf does at synchronization points. docs/debugging-guide.md, "Device printf".
#include <cstdio>
#include <cstring>
#include <vector>

#include <c10/util/Exception.h>

#include "runtime.h"
#include "spyre/common/print_format.h"
#include "spyre/hw/commands.h"

namespace spyre::backend {

namespace {
constexpr uint64_t kPrintBufferBytes = uint64_t{64} << 10;
// Reading a print buffer waits on its queue; that wait must not read it again.
thread_local bool t_flushing = false;
}  // namespace

bool DeviceRuntime::move_bytes(driver::Queue& q, uint64_t device, void* host, uint64_t n, bool to_device) {
  auto staging = take_staging(n);
  if (to_device) std::memcpy(staging->data(), host, n);
  uint64_t seq = 0;
  const bool ok = to_device ? q.copy(staging->iova(), device, n, hw::kCopySrcHost, &seq).ok() && q.wait(seq).ok()
                            : q.copy(device, staging->iova(), n, hw::kCopyDstHost, &seq).ok() && q.wait(seq).ok();
  if (ok && !to_device) std::memcpy(host, staging->data(), n);
  staging_.give_back(std::move(staging));
  return ok;
}

void DeviceRuntime::use_print_buffer(driver::Queue& q) {
  uint64_t fresh = 0;
  {
    std::lock_guard lock(print_mu_);
    const PrintBuffer& b = print_buffers_[&q];
    if (b.registered) return;
    if (b.addr == 0) fresh = 1;
  }
  // Outside the lock: a full device makes the allocator give memory back, which may wait on queues.
  if (fresh) fresh = alloc_reclaiming(kPrintBufferBytes);
  std::lock_guard lock(print_mu_);
  PrintBuffer& b = print_buffers_[&q];
  if (b.registered) {
    if (fresh) free(fresh);
    return;
  }
  if (b.addr == 0) {
    b.addr = fresh;
  } else if (fresh) {
    free(fresh);
  }
  hw::PrintBufferHeader h{sizeof h, 0};
  TORCH_CHECK(move_bytes(q, b.addr, &h, sizeof h, true), "spyre: could not set up the device print buffer");
  uint64_t seq = 0;
  SPYRE_CHECK(q.sanitize(hw::SanitizeAction::kPrintBuffer, b.addr, kPrintBufferBytes, 0, &seq));
  b.registered = true;
}

void DeviceRuntime::forget_print_buffer(driver::Queue& q) {
  std::lock_guard lock(print_mu_);
  const auto it = print_buffers_.find(&q);
  if (it != print_buffers_.end()) it->second.registered = false;  // a reset took it off the card
}

void DeviceRuntime::flush_prints(driver::Queue& q) noexcept {
  if (t_flushing) return;
  std::lock_guard lock(print_mu_);
  const auto it = print_buffers_.find(&q);
  if (it == print_buffers_.end() || !it->second.registered) return;
  t_flushing = true;
  try {
    const uint64_t base = it->second.addr;
    hw::PrintBufferHeader h{};
    if (move_bytes(q, base, &h, sizeof h, false) && (h.used > sizeof h || h.dropped > 0) &&
        h.used <= kPrintBufferBytes) {
      std::vector<uint8_t> records(h.used - sizeof h);
      if (records.empty() || move_bytes(q, base + sizeof h, records.data(), records.size(), false)) {
        print_records(q, records);
      }
      if (h.dropped > 0) {
        std::fprintf(stderr, "spyre:%d: %llu device print record(s) dropped: the print buffer of %llu bytes was full\n",
                     index_, static_cast<unsigned long long>(h.dropped),
                     static_cast<unsigned long long>(kPrintBufferBytes));
      }
      hw::PrintBufferHeader empty{sizeof h, 0};
      (void)move_bytes(q, base, &empty, sizeof empty, true);
    }
  } catch (const std::exception& e) {  // printing is a debugging aid: it never turns a wait into an error
    std::fprintf(stderr, "spyre:%d: device print records lost: %s\n", index_, e.what());
  }
  t_flushing = false;
}

void DeviceRuntime::print_records(driver::Queue& q, const std::vector<uint8_t>& records) {
  std::string out;
  for (size_t at = 0; at + sizeof(hw::PrintRecord) <= records.size();) {
    hw::PrintRecord r{};
    std::memcpy(&r, records.data() + at, sizeof r);
    if (r.bytes < sizeof r || r.bytes > records.size() - at) break;
    const uint64_t regs_bytes = 8ull * r.nregs;
    const hw::DType t = static_cast<hw::DType>(r.dtype);
    const uint64_t values_bytes = t < hw::DType::kCount ? uint64_t{r.nvalues} * hw::dtype_size(t) : 0;
    if (r.nregs > hw::kMaxPrintRegs || sizeof r + regs_bytes + values_bytes > r.bytes) break;
    uint64_t regs[hw::kMaxPrintRegs] = {};
    std::memcpy(regs, records.data() + at + sizeof r, regs_bytes);
    // The program's messages: its header, then its format strings.
    std::string format = "<message " + std::to_string(r.message) + ">";
    hw::ProgramHeader ph{};
    if (move_bytes(q, r.program, &ph, sizeof ph, false) && ph.magic == hw::kProgramMagic && ph.strings_size > 0 &&
        ph.strings_size <= (1u << 20)) {
      std::vector<char> table(ph.strings_size);
      if (move_bytes(q, r.program + ph.strings_offset, table.data(), table.size(), false)) {
        if (auto f = common::format_string(table.data(), table.size(), r.message)) format = std::move(*f);
      }
    }
    out += common::format_print(format, regs, r.nregs, t, records.data() + at + sizeof r + regs_bytes, r.nvalues,
                                device_->info().fp16_dlfloat);
    at += r.bytes;
  }
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace spyre::backend
