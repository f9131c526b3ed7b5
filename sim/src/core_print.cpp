// PRINT, the device printf: a core appends a record (its message, registers and scratchpad
// values) to its launch's print buffer in device memory, where the host reads and formats it
// (spyre/hw/commands.h, PrintRecord; docs/hardware-interface.md, "Device printf"). The record and
// the buffer's header move in one step of this core's thread, so cores of one launch never
// interleave their records. With a trace, the slice reads as the formatted text, as a debugger
// shows what a program printed.
#include <cstring>
#include <vector>

#include "core.h"
#include "device_memory.h"
#include "spyre/common/print_format.h"
#include "spyre/hw/commands.h"

namespace spyre::sim {

bool Core::print(const hw::Instr& in) {
  const uint32_t nregs = hw::print_reg_count(in.c);
  if (in.d != 0 || nregs > hw::kMaxPrintRegs || (in.c >> (4 + 4 * hw::kMaxPrintRegs)) != 0 ||
      in.e > hw::kMaxPrintValues || in.dtype >= hw::DType::kCount) {
    return false;
  }
  const uint64_t begin = now();
  const uint64_t value_bytes = uint64_t{in.e} * hw::dtype_size(in.dtype);
  const uint8_t* values = in.e > 0 ? lx(in, in.b, value_bytes) : nullptr;
  if (in.e > 0 && !values) return false;
  if (values) pt_wait({{values, value_bytes, false}});
  sync();
  if (values) settle(values, value_bytes, false);  // the arithmetic posted before it has landed
  uint64_t regs[hw::kMaxPrintRegs] = {};
  for (uint32_t i = 0; i < nregs; ++i) regs[i] = regs_[hw::print_reg(in.c, i)];
  hw::PrintRecord head{};
  head.bytes = static_cast<uint32_t>((sizeof head + 8ull * nregs + value_bytes + 7) / 8 * 8);
  head.message = in.a;
  head.rank = rank_;
  head.instruction = at_;
  head.program = program_;
  head.cycle = now();
  head.nregs = static_cast<uint8_t>(nregs);
  head.dtype = static_cast<uint8_t>(in.dtype);
  head.nvalues = static_cast<uint16_t>(in.e);
  std::vector<uint8_t> record(head.bytes, 0);
  std::memcpy(record.data(), &head, sizeof head);
  std::memcpy(record.data() + sizeof head, regs, 8ull * nregs);
  if (values) std::memcpy(record.data() + sizeof head + 8ull * nregs, values, value_bytes);

  sc_core::sc_time delay = sc_core::SC_ZERO_TIME;
  const PrintBuffer out = launch_ ? launch_->print_buffer() : PrintBuffer{};
  if (out.size >= sizeof(hw::PrintBufferHeader)) {
    hw::PrintBufferHeader h{};
    if (!in_window(out.base, out.size)) return false;
    tlm::tlm_response_status status = tlm::TLM_OK_RESPONSE;
    if (!tlm_access(mem, tlm::TLM_READ_COMMAND, out.base, reinterpret_cast<uint8_t*>(&h), sizeof h, delay, stop_,
                    &status)) {
      fault_code_ = memory_error(status, fault_code_);
      return false;
    }
    // A header the host garbled starts the buffer over rather than writing outside it.
    if (h.used < sizeof h || h.used > out.size) h.used = sizeof h;
    if (record.size() <= out.size - h.used) {
      if (!tlm_access(mem, tlm::TLM_WRITE_COMMAND, out.base + h.used, record.data(), record.size(), delay, stop_,
                      &status)) {
        fault_code_ = memory_error(status, fault_code_);
        return false;
      }
      h.used += record.size();
    } else {
      ++h.dropped;
    }
    if (!tlm_access(mem, tlm::TLM_WRITE_COMMAND, out.base, reinterpret_cast<uint8_t*>(&h), sizeof h, delay, stop_,
                    &status)) {
      fault_code_ = memory_error(status, fault_code_);
      return false;
    }
  }
  // Timed as a small store: issued, then the record's bytes over a ring link.
  const uint64_t ring = std::max<uint64_t>(config_.ring.bytes_per_cycle, 1);
  local_ += clock_.cycles(functional_ ? 1 : config_.chip.issue_cycles + (record.size() + ring - 1) / ring);
  stall_ = Stall::kRing;
  wait(delay);
  if (trace_.instructions()) {
    trace_.slice(track_, "print: " + formatted(head, regs, values), begin, now(),
                 {{"instruction", at_}, {"message", in.a}});
  }
  return true;
}

std::string Core::formatted(const hw::PrintRecord& r, const uint64_t* regs, const uint8_t* values) {
  // The format strings follow the program's code (debug information, read without timing).
  std::string format = "<message " + std::to_string(r.message) + ">";
  const uint64_t size = debug_memory_ ? debug_memory_->size() : 0;
  hw::ProgramHeader h{};
  if (program_ <= size && sizeof h <= size - program_) {
    debug_memory_->read(program_, &h, sizeof h);
    const uint64_t at = program_ + h.strings_offset;
    if (h.strings_size > 0 && h.strings_size <= 65536 && at >= program_ && at <= size && h.strings_size <= size - at) {
      std::vector<char> table(h.strings_size);
      debug_memory_->read(at, table.data(), table.size());
      if (auto f = common::format_string(table.data(), table.size(), r.message)) format = std::move(*f);
    }
  }
  std::string text = common::format_print(format, regs, r.nregs, static_cast<hw::DType>(r.dtype), values, r.nvalues,
                                          config_.chip.fp16_format != "ieee");
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text.substr(0, 200);
}

}  // namespace spyre::sim
