#include "spyre/firmware/firmware.h"

#include "spyre/hw/regs.h"

namespace spyre::fw {
namespace {

using hw::ErrorCode;
using hw::Field;

constexpr hw::Verdict fail(ErrorCode e, Field f, uint32_t detail = 0) {
  return hw::Verdict{e, f, detail};
}

// True when [addr, addr + size) lies inside the queue's device-memory window.
constexpr bool in_device(uint64_t addr, uint64_t size, const Limits& lim) {
  return hw::in_window(addr, size, lim.mem_base, lim.mem_size);
}

// True when the queue's DMA may reach [iova, iova + size) of host memory.
constexpr bool in_host(uint64_t iova, uint64_t size, const Limits& lim) {
  return lim.iova_size == 0 || hw::in_window(iova, size, lim.iova_base, lim.iova_size);
}

hw::Verdict validate_copy(const hw::Descriptor& d, const Limits& lim) {
  const hw::CopyArgs& c = d.copy;
  if ((d.flags & ~hw::kCopyFlagMask) != 0) return fail(ErrorCode::kBadFlags, Field::kFlags);
  if ((d.flags & hw::kCopySrcHost) && (d.flags & hw::kCopyDstHost)) {
    return fail(ErrorCode::kBadFlags, Field::kFlags);  // host-to-host is not a device copy
  }
  for (uint64_t r : c.reserved) {
    if (r != 0) return fail(ErrorCode::kReservedNonZero, Field::kReserved);
  }
  if (c.size == 0 || c.size > hw::kMaxCopyBytes) return fail(ErrorCode::kBadSize, Field::kCopySize);
  if (c.label != 0 && !in_device(c.label, 1, lim)) return fail(ErrorCode::kOutOfRange, Field::kCopyLabel);
  if (!(d.flags & hw::kCopySrcHost) && !in_device(c.src, c.size, lim)) {
    return fail(ErrorCode::kOutOfRange, Field::kCopySrc);
  }
  if (!(d.flags & hw::kCopyDstHost) && !in_device(c.dst, c.size, lim)) {
    return fail(ErrorCode::kOutOfRange, Field::kCopyDst);
  }
  // Host memory outside the queue's IOMMU domain is not there for it: a DMA fault, as the IOMMU
  // would report it.
  if ((d.flags & hw::kCopySrcHost) && !in_host(c.src, c.size, lim)) return fail(ErrorCode::kDmaFault, Field::kCopySrc);
  if ((d.flags & hw::kCopyDstHost) && !in_host(c.dst, c.size, lim)) return fail(ErrorCode::kDmaFault, Field::kCopyDst);
  return {};
}

hw::Verdict validate_launch(const hw::Descriptor& d, const Limits& lim) {
  const hw::LaunchArgs& l = d.launch;
  if ((d.flags & ~hw::kLaunchFlagMask) != 0) return fail(ErrorCode::kBadFlags, Field::kFlags);
  if (l.label != 0 && !in_device(l.label, 1, lim)) return fail(ErrorCode::kOutOfRange, Field::kLaunchLabel);
  if (l.program % hw::kProgramAlign != 0) return fail(ErrorCode::kBadAlignment, Field::kLaunchProgram);
  if (l.program_size < sizeof(hw::ProgramHeader) || l.program_size % sizeof(hw::Instr) != 0 ||
      l.program_size > hw::kMaxProgramBytes) {
    return fail(ErrorCode::kBadSize, Field::kLaunchProgramSize);
  }
  if (!in_device(l.program, l.program_size, lim)) {
    return fail(ErrorCode::kOutOfRange, Field::kLaunchProgram);
  }
  if (l.args % 8 != 0) return fail(ErrorCode::kBadAlignment, Field::kLaunchArgs);
  if (l.args_size % 8 != 0 || l.args_size > uint64_t{hw::kMaxLaunchArgs} * 8) {
    return fail(ErrorCode::kBadSize, Field::kLaunchArgsSize);
  }
  if (d.flags & hw::kLaunchArgsHost) {
    if (l.args_size != 0 && !in_host(l.args, l.args_size, lim)) return fail(ErrorCode::kDmaFault, Field::kLaunchArgs);
  } else if (l.args_size != 0 && !in_device(l.args, l.args_size, lim)) {
    return fail(ErrorCode::kOutOfRange, Field::kLaunchArgs);
  }
  const uint64_t present = lim.num_cores >= 64 ? ~0ull : ((1ull << lim.num_cores) - 1);
  if (l.core_mask == 0 || (l.core_mask & ~present) != 0) {
    return fail(ErrorCode::kNoSuchCore, Field::kLaunchCoreMask);
  }
  return {};
}

hw::Verdict validate_timestamp(const hw::Descriptor& d, const Limits& lim) {
  if (d.flags != 0) return fail(ErrorCode::kBadFlags, Field::kFlags);
  for (uint64_t r : d.timestamp.reserved) {
    if (r != 0) return fail(ErrorCode::kReservedNonZero, Field::kReserved);
  }
  if (d.timestamp.dst % 8 != 0) return fail(ErrorCode::kBadAlignment, Field::kTimestampDst);
  if (!in_host(d.timestamp.dst, 8, lim)) return fail(ErrorCode::kDmaFault, Field::kTimestampDst);
  return {};
}

hw::Verdict validate_semaphore(const hw::Descriptor& d, const Limits& lim) {
  const uint8_t allowed = d.opcode == hw::Opcode::kWait ? hw::kWaitFlagMask : 0;
  if ((d.flags & ~allowed) != 0) return fail(ErrorCode::kBadFlags, Field::kFlags);
  for (uint64_t r : d.semaphore.reserved) {
    if (r != 0) return fail(ErrorCode::kReservedNonZero, Field::kReserved);
  }
  if (d.semaphore.addr % 8 != 0) return fail(ErrorCode::kBadAlignment, Field::kSemaphoreAddr);
  if (d.flags & hw::kWaitHost) {
    if (!in_host(d.semaphore.addr, 8, lim)) return fail(ErrorCode::kDmaFault, Field::kSemaphoreAddr);
  } else if (!in_device(d.semaphore.addr, 8, lim)) {
    return fail(ErrorCode::kOutOfRange, Field::kSemaphoreAddr);
  }
  return {};
}

hw::Verdict validate_sanitize(const hw::Descriptor& d, const Limits& lim) {
  const hw::SanitizeArgs& s = d.sanitize;
  if (d.flags != 0) return fail(ErrorCode::kBadFlags, Field::kFlags);
  for (uint64_t r : s.reserved) {
    if (r != 0) return fail(ErrorCode::kReservedNonZero, Field::kReserved);
  }
  switch (s.action) {
    case hw::SanitizeAction::kUnbreak:
      if (s.base != 0 || s.size != 0 || s.tag != 0) return fail(ErrorCode::kReservedNonZero, Field::kSanitizeRange);
      return {};
    case hw::SanitizeAction::kBreak:
      if (s.size < hw::kBreakHeaderBytes) return fail(ErrorCode::kBadSize, Field::kSanitizeRange);
      if (!in_device(s.base, s.size, lim)) return fail(ErrorCode::kOutOfRange, Field::kSanitizeRange);
      return {};
    case hw::SanitizeAction::kPrintBuffer:
      if (s.tag != 0) return fail(ErrorCode::kReservedNonZero, Field::kSanitizeTag);
      if (s.base == 0 && s.size == 0) return {};  // none
      if (s.base % 8 != 0) return fail(ErrorCode::kBadAlignment, Field::kSanitizeRange);
      if (s.size < hw::kPrintBufferMin) return fail(ErrorCode::kBadSize, Field::kSanitizeRange);
      if (!in_device(s.base, s.size, lim)) return fail(ErrorCode::kOutOfRange, Field::kSanitizeRange);
      return {};
    case hw::SanitizeAction::kEnable:
      if (s.base != 0 || s.size != 0) return fail(ErrorCode::kReservedNonZero, Field::kSanitizeRange);
      if ((s.tag & ~hw::kSanitizeMask) != 0) return fail(ErrorCode::kBadFlags, Field::kSanitizeTag);
      return {};
    case hw::SanitizeAction::kAlloc:
    case hw::SanitizeAction::kFree:
    case hw::SanitizeAction::kWatch:
    case hw::SanitizeAction::kUnwatch:
      if (s.size == 0) return fail(ErrorCode::kBadSize, Field::kSanitizeRange);
      if (!in_device(s.base, s.size, lim)) return fail(ErrorCode::kOutOfRange, Field::kSanitizeRange);
      if (s.tag == 0) return fail(ErrorCode::kBadSize, Field::kSanitizeTag);
      return {};
    default:
      return fail(ErrorCode::kBadFlags, Field::kSanitizeAction);
  }
}

constexpr uint32_t qreg(uint32_t q, uint32_t r) {
  return hw::queue_reg(q, r);
}

}  // namespace

hw::Verdict validate_descriptor(const hw::Descriptor& d, const Limits& limits) {
  if (d.reserved0 != 0 || d.reserved1 != 0) return fail(ErrorCode::kReservedNonZero, Field::kReserved);
  switch (d.opcode) {
    case hw::Opcode::kNop:
      if (d.flags != 0) return fail(ErrorCode::kBadFlags, Field::kFlags);
      return {};
    case hw::Opcode::kCopy:
      return validate_copy(d, limits);
    case hw::Opcode::kLaunch:
      return validate_launch(d, limits);
    case hw::Opcode::kTimestamp:
      return validate_timestamp(d, limits);
    case hw::Opcode::kSignal:
    case hw::Opcode::kWait:
      return validate_semaphore(d, limits);
    case hw::Opcode::kSanitize:
      return validate_sanitize(d, limits);
    default:
      return fail(ErrorCode::kBadOpcode, Field::kOpcode);
  }
}

hw::Verdict validate_program(const hw::ProgramHeader& h, const hw::LaunchArgs& l) {
  if (h.magic != hw::kProgramMagic || h.version != hw::kIsaVersion) {
    return fail(ErrorCode::kBadProgram, Field::kLaunchProgram);
  }
  if (static_cast<uint32_t>(__builtin_popcountll(l.core_mask)) != h.num_entries) {
    return fail(ErrorCode::kBadProgram, Field::kLaunchCoreMask);
  }
  const uint64_t table_end = sizeof(hw::ProgramHeader) + 4ull * h.num_entries;
  const uint64_t code_end = static_cast<uint64_t>(h.instr_offset) + sizeof(hw::Instr) * uint64_t{h.num_instrs};
  if (h.instr_offset % sizeof(hw::Instr) != 0 || h.instr_offset < table_end || code_end > l.program_size) {
    return fail(ErrorCode::kBadProgram, Field::kLaunchProgramSize);
  }
  // The name and PRINT's format strings follow the code; the host reads them, the cores never do.
  const auto after_code = [&](uint32_t offset, uint32_t size) {
    return offset >= code_end && uint64_t{offset} + size <= l.program_size;
  };
  if (h.name_size >= hw::kMaxLabelBytes || (h.name_size > 0 && !after_code(h.name_offset, h.name_size))) {
    return fail(ErrorCode::kBadProgram, Field::kLaunchProgram);
  }
  if (h.strings_size > 0 ? !after_code(h.strings_offset, h.strings_size) : h.strings_offset != 0) {
    return fail(ErrorCode::kBadProgram, Field::kLaunchProgram);
  }
  return {};
}

bool Firmware::poll_once() {
  const uint32_t nq = hal_.reg_read(hw::kRegNumQueues);
  bool progressed = false;
  for (uint32_t i = 0; i < nq; ++i) {
    const uint32_t q = (next_queue_ + i) % nq;
    progressed |= service_queue(q);
  }
  next_queue_ = nq ? (next_queue_ + 1) % nq : 0;
  return progressed;
}

void Firmware::serve(uint32_t q) {
  for (;;) {
    if (!service_queue(q)) hal_.wait_for_work(q);
  }
}

void Firmware::fail_queue(uint32_t q, hw::ErrorCode e) {
  const uint32_t status = hal_.reg_read(qreg(q, hw::kQStatus)) & 0xffffu;
  hal_.reg_write(qreg(q, hw::kQStatus), status | hw::kQStatusError | (static_cast<uint32_t>(e) << 16));
}

void Firmware::halt_queue(uint32_t q, hw::ErrorCode e, uint32_t tail) {
  fail_queue(q, e);
  hal_.reg_write(qreg(q, hw::kQStatus), hal_.reg_read(qreg(q, hw::kQStatus)) | hw::kQStatusHalted);
  hal_.reg_write(qreg(q, hw::kQHead), tail);
  hal_.raise_msix(hal_.reg_read(qreg(q, hw::kQMsixVector)));  // wake waiters so they see the halt
}

bool Firmware::service_queue(uint32_t q) {
  const uint32_t status = hal_.reg_read(qreg(q, hw::kQStatus));
  // A halted queue stays stopped until the host resets it: a doorbell meanwhile runs nothing.
  if (!(status & hw::kQStatusEnabled) || (status & hw::kQStatusHalted)) return false;
  const uint32_t resets = hal_.reg_read(qreg(q, hw::kQResets));
  const uint32_t head = hal_.reg_read(qreg(q, hw::kQHead));
  const uint32_t tail = hal_.reg_read(qreg(q, hw::kQTail));
  if (head == tail) return false;

  const uint32_t entries = hal_.reg_read(qreg(q, hw::kQRingEntries));
  if (entries < hw::kMinRingEntries || entries > hw::kMaxRingEntries || (entries & (entries - 1)) != 0) {
    halt_queue(q, ErrorCode::kBadSize, tail);  // no usable ring: nothing can be reported per descriptor
    return true;
  }
  // HEAD and TAIL are free-running: more than a ring between them means the host overwrote slots
  // the firmware has not read, and serving them would run stale descriptors again.
  if (tail - head > entries) {
    halt_queue(q, ErrorCode::kRingOverrun, tail);
    return true;
  }
  const uint64_t ring =
      hal_.reg_read(qreg(q, hw::kQRingBaseLo)) | (uint64_t{hal_.reg_read(qreg(q, hw::kQRingBaseHi))} << 32);
  const uint64_t cpl =
      hal_.reg_read(qreg(q, hw::kQCplBaseLo)) | (uint64_t{hal_.reg_read(qreg(q, hw::kQCplBaseHi))} << 32);
  const uint64_t fence =
      hal_.reg_read(qreg(q, hw::kQFenceLo)) | (uint64_t{hal_.reg_read(qreg(q, hw::kQFenceHi))} << 32);
  const uint32_t index = head & (entries - 1);
  const Limits limits = this->limits(q);
  // The rings and the fence must lie in the queue's IOMMU domain, like every other DMA of it.
  if (!in_host(ring, uint64_t{entries} * sizeof(hw::Descriptor), limits) ||
      !in_host(cpl, uint64_t{entries} * sizeof(hw::Completion), limits) || !in_host(fence, 8, limits)) {
    halt_queue(q, ErrorCode::kDmaFault, tail);
    return true;
  }

  hw::Descriptor d{};
  if (!hal_.host_read(ring + uint64_t{index} * sizeof(hw::Descriptor), &d, sizeof d)) {
    halt_queue(q, ErrorCode::kDmaFault, tail);
    return true;
  }

  // The fence only moves forward: a seq not above the last one on this ring means the ring holds
  // something other than what the host meant to submit, and no completion could be trusted.
  if (seq_resets_[q] != resets) {
    seq_resets_[q] = resets;
    last_seq_[q] = 0;
  }
  if (d.seq <= last_seq_[q]) {
    halt_queue(q, ErrorCode::kBadSequence, tail);
    return true;
  }

  hw::Completion c{};
  c.seq = d.seq;
  c.start_cycle = hal_.now_cycles();
  hw::Verdict v;
  if (status & hw::kQStatusError) {
    v = fail(ErrorCode::kQueueInError, Field::kNone);
    // A signal still runs, so that a queue waiting on this one is not held forever.
    if (d.opcode == hw::Opcode::kSignal && validate_descriptor(d, limits).ok()) signal(d.semaphore);
  } else {
    v = validate_descriptor(d, limits);
    if (v.ok()) {
      if (d.opcode == hw::Opcode::kWait) {
        if (!wait_semaphore(q, d, resets, v)) return true;
      } else {
        hal_.reg_write(qreg(q, hw::kQActive), 1);
        v = execute(q, resets, d, limits);
        hal_.reg_write(qreg(q, hw::kQActive), 0);
      }
    }
  }
  // A reset while the command ran dropped the ring: a completion now would land in the new one.
  if (hal_.reg_read(qreg(q, hw::kQResets)) != resets) return true;
  if (!v.ok() && !(status & hw::kQStatusError)) fail_queue(q, v.error);
  c.error = v.error;
  c.field = v.field;
  c.detail = v.detail;
  c.end_cycle = hal_.now_cycles();

  // Completion, then HEAD, then the fence: a host that sees the fence can trust the record, and
  // may reset the queue at once without a late HEAD write undoing the reset.
  if (!hal_.host_write(cpl + uint64_t{index} * sizeof(hw::Completion), &c, sizeof c)) {
    halt_queue(q, ErrorCode::kDmaFault, tail);
    return true;
  }
  hal_.reg_write(qreg(q, hw::kQHead), head + 1);
  last_seq_[q] = d.seq;
  if (!hal_.host_write(fence, &d.seq, sizeof d.seq)) {
    halt_queue(q, ErrorCode::kDmaFault, tail);
    return true;
  }
  hal_.command_done(q, d, c);
  hal_.raise_msix(hal_.reg_read(qreg(q, hw::kQMsixVector)));
  return true;
}

uint64_t Firmware::reg64(uint32_t lo) {
  return hal_.reg_read(lo) | uint64_t{hal_.reg_read(lo + 4)} << 32;
}

Limits Firmware::limits(uint32_t q) {
  const uint64_t mem = hal_.dev_mem_size();
  Limits lim{mem, hal_.num_cores()};
  if (const uint64_t size = reg64(hw::mgmt_reg(q, hw::kMQMemSizeLo)); size != 0) {
    const uint64_t base = reg64(hw::mgmt_reg(q, hw::kMQMemBaseLo));
    lim.mem_base = base;
    lim.mem_size = base >= mem ? 0 : (size < mem - base ? size : mem - base);  // inside device memory
  }
  lim.iova_base = reg64(hw::mgmt_reg(q, hw::kMQIovaBaseLo));
  lim.iova_size = reg64(hw::mgmt_reg(q, hw::kMQIovaSizeLo));
  return lim;
}

hw::Verdict Firmware::execute(uint32_t q, uint32_t resets, const hw::Descriptor& d, const Limits& limits) {
  const uint32_t priority = hal_.reg_read(qreg(q, hw::kQPriority)) != 0 ? hw::kQPriorityHigh : hw::kQPriorityNormal;
  switch (d.opcode) {
    case hw::Opcode::kNop:
      return {};
    case hw::Opcode::kCopy:
      return hal_.copy(d.copy, d.flags, priority);
    case hw::Opcode::kLaunch:
      return run_launch(q, resets, d.launch, d.flags, priority, limits);
    case hw::Opcode::kSignal:
      return signal(d.semaphore);
    case hw::Opcode::kSanitize:
      hal_.sanitize(q, d.sanitize);
      return {};
    case hw::Opcode::kTimestamp: {
      const uint64_t now = hal_.now_cycles();
      if (!hal_.host_write(d.timestamp.dst, &now, sizeof now)) {
        return fail(ErrorCode::kDmaFault, Field::kTimestampDst);
      }
      return {};
    }
    default:
      return fail(ErrorCode::kBadOpcode, Field::kOpcode);
  }
}

hw::Verdict Firmware::run_launch(uint32_t q, uint32_t resets, const hw::LaunchArgs& l, uint8_t flags, uint32_t priority,
                                 const Limits& limits) {
  hw::ProgramHeader h{};
  hal_.dev_read(l.program, &h, sizeof h);
  const hw::Verdict v = validate_program(h, l);
  if (!v.ok()) return v;
  Arguments args{l.args, l.args_size, (flags & hw::kLaunchArgsHost) != 0, {}};
  if (args.from_host && args.size != 0 && !hal_.host_read(args.addr, args.values, static_cast<uint32_t>(args.size))) {
    return fail(ErrorCode::kDmaFault, Field::kLaunchArgs);
  }
  // A reset since the descriptor was fetched gave the host the ring back: those bytes may be a
  // new launch's arguments. The command is dropped (the caller writes no completion either).
  if (args.from_host && hal_.reg_read(qreg(q, hw::kQResets)) != resets) return {};
  return hal_.launch(q, l.program, args, l.core_mask, priority, Window{limits.mem_base, limits.mem_size});
}

hw::Verdict Firmware::signal(const hw::SemaphoreArgs& s) {
  uint64_t now = 0;
  hal_.dev_read(s.addr, &now, sizeof now);
  if (s.value > now) {  // a timeline only moves forward
    hal_.dev_write(s.addr, &s.value, sizeof s.value);
    hal_.signalled();
  }
  return {};
}

bool Firmware::wait_semaphore(uint32_t q, const hw::Descriptor& d, uint32_t resets, hw::Verdict& v) {
  const hw::SemaphoreArgs& s = d.semaphore;
  const bool across = (d.flags & hw::kWaitHost) != 0;
  for (;;) {
    hal_.arm_signal(q);
    uint64_t now = 0;
    if (!across) {
      hal_.dev_read(s.addr, &now, sizeof now);
    } else if (!hal_.host_read(s.addr, &now, sizeof now)) {
      v = fail(ErrorCode::kDmaFault, Field::kSemaphoreAddr);
      return true;
    }
    if (now >= s.value) return true;
    if (hal_.reg_read(qreg(q, hw::kQResets)) != resets) return false;
    // Another card's semaphore is raised by that card: any card's signal wakes the wait.
    hal_.wait_for_signal(q, across);
  }
}

}  // namespace spyre::fw
