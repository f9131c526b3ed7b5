// Error codes that the device reports in completion records, and the descriptor fields they name.
#pragma once

#include <cstdint>

namespace spyre::hw {

enum class ErrorCode : uint16_t {
  kOk = 0,
  kBadOpcode = 1,         // the opcode is not one the firmware knows
  kReservedNonZero = 2,   // a reserved field or bit is set
  kBadFlags = 3,          // flags not valid for this opcode
  kBadSize = 4,           // a size is zero or above the limit
  kBadAlignment = 5,      // an address or size breaks its alignment rule
  kOutOfRange = 6,        // a device address range leaves device memory (or the queue's window of it)
  kDmaFault = 7,          // an address the queue may not reach: unmapped host memory (IOMMU), or outside its windows
  kBadProgram = 8,        // the program header is malformed
  kCoreFault = 9,         // a core hit an illegal instruction or scratchpad access
  kQueueInError = 10,     // not executed: the queue was already in the error state
  kNoSuchCore = 11,       // the core mask names a core the device does not have (or none)
  kWatchdog = 12,         // a core ran past the launch's cycle budget (firmware.watchdog_cycles)
  kRingOverrun = 13,      // the doorbell put TAIL more than a ring ahead of HEAD
  kBadSequence = 14,      // a descriptor's seq is not above the one before it on its queue
  kDmaError = 15,         // a DMA transfer failed on the link (not an IOMMU refusal)
  kEccError = 16,         // a read hit an uncorrectable ECC error in device memory
  kLinkDown = 17,         // the PCIe link is down: the card is lost to the host
  kHostMemory = 18,       // emulator only: the host has no memory left to back a written page of device memory
  kSanitizerReport = 19,  // emulator only: the device sanitizer stopped the launch (the queue's kQSan* registers)
  kCount
};

enum class Field : uint16_t {
  kNone = 0,
  kOpcode,
  kFlags,
  kReserved,
  kCopySrc,
  kCopyDst,
  kCopySize,
  kLaunchProgram,
  kLaunchProgramSize,
  kLaunchArgs,
  kLaunchArgsSize,
  kLaunchCoreMask,
  kTimestampDst,
  kLaunchLabel,
  kSemaphoreAddr,
  kSanitizeAction,
  kSanitizeRange,
  kSanitizeTag,
  kCopyLabel,
  kCount
};

/// Stable lower-case name of an error code, for messages; "unknown" for values out of range.
constexpr const char* error_name(ErrorCode e) {
  switch (e) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kBadOpcode:
      return "bad opcode";
    case ErrorCode::kReservedNonZero:
      return "reserved field not zero";
    case ErrorCode::kBadFlags:
      return "bad flags";
    case ErrorCode::kBadSize:
      return "bad size";
    case ErrorCode::kBadAlignment:
      return "bad alignment";
    case ErrorCode::kOutOfRange:
      return "address out of device memory";
    case ErrorCode::kDmaFault:
      return "address not mapped for the queue (DMA fault)";
    case ErrorCode::kBadProgram:
      return "malformed program";
    case ErrorCode::kCoreFault:
      return "core fault";
    case ErrorCode::kQueueInError:
      return "not executed, queue in error state";
    case ErrorCode::kNoSuchCore:
      return "no such core";
    case ErrorCode::kWatchdog:
      return "watchdog: program ran past its cycle budget";
    case ErrorCode::kRingOverrun:
      return "doorbell overrun: TAIL more than a ring ahead of HEAD";
    case ErrorCode::kBadSequence:
      return "bad sequence number: not above the previous descriptor's";
    case ErrorCode::kDmaError:
      return "DMA transfer error";
    case ErrorCode::kEccError:
      return "uncorrectable ECC error in device memory";
    case ErrorCode::kLinkDown:
      return "PCIe link down";
    case ErrorCode::kHostMemory:
      return "the simulator's host has no memory left to back device memory";
    case ErrorCode::kSanitizerReport:
      return "device sanitizer report";
    default:
      return "unknown";
  }
}

/// Name of a descriptor field as written in docs/hardware-interface.md.
constexpr const char* field_name(Field f) {
  switch (f) {
    case Field::kNone:
      return "none";
    case Field::kOpcode:
      return "opcode";
    case Field::kFlags:
      return "flags";
    case Field::kReserved:
      return "reserved";
    case Field::kCopySrc:
      return "copy.src";
    case Field::kCopyDst:
      return "copy.dst";
    case Field::kCopySize:
      return "copy.size";
    case Field::kLaunchProgram:
      return "launch.program";
    case Field::kLaunchProgramSize:
      return "launch.program_size";
    case Field::kLaunchArgs:
      return "launch.args";
    case Field::kLaunchArgsSize:
      return "launch.args_size";
    case Field::kLaunchCoreMask:
      return "launch.core_mask";
    case Field::kTimestampDst:
      return "timestamp.dst";
    case Field::kLaunchLabel:
      return "launch.label";
    case Field::kSemaphoreAddr:
      return "semaphore.addr";
    case Field::kSanitizeAction:
      return "sanitize.action";
    case Field::kSanitizeRange:
      return "sanitize.base";
    case Field::kSanitizeTag:
      return "sanitize.tag";
    case Field::kCopyLabel:
      return "copy.label";
    default:
      return "unknown";
  }
}

/// Outcome of a command, a check or a block of the card: kOk, or an error code, the descriptor field
/// to blame and a detail word (what a completion record carries). The model's blocks return it and
/// the firmware passes it on.
struct Verdict {
  ErrorCode error = ErrorCode::kOk;
  Field field = Field::kNone;
  uint32_t detail = 0;

  constexpr bool ok() const { return error == ErrorCode::kOk; }
};

}  // namespace spyre::hw
