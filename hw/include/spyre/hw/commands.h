// Command descriptors (host -> device) and completion records (device -> host).
// Both live in rings in DMA-mapped host memory; see regs.h for the queue registers.
#pragma once

#include <cstdint>

#include "spyre/hw/errors.h"
#include "spyre/hw/isa.h"

namespace spyre::hw {

enum class Opcode : uint8_t {
  kNop = 0,
  kCopy = 1,       // DMA copy between host and device memory or within device memory
  kLaunch = 2,     // run a tile-ISA program on a set of cores
  kTimestamp = 3,  // write the device cycle counter (u64) to host memory
  kSignal = 4,     // raise a timeline semaphore in device memory to a value
  kWait = 5,       // hold the queue until a timeline semaphore reaches a value
  kSanitize = 6,   // emulator only: switch the device sanitizer on, or tell it of an allocation or a free
  kCount
};

/// Lower-case name of an opcode, for messages and traces.
constexpr const char* opcode_name(Opcode op) {
  switch (op) {
    case Opcode::kNop:
      return "nop";
    case Opcode::kCopy:
      return "copy";
    case Opcode::kLaunch:
      return "launch";
    case Opcode::kTimestamp:
      return "timestamp";
    case Opcode::kSignal:
      return "signal";
    case Opcode::kWait:
      return "wait";
    case Opcode::kSanitize:
      return "sanitize";
    default:
      return "invalid opcode";
  }
}

// Copy flags: which side of the copy is host memory (an IOVA); the other is device memory.
inline constexpr uint8_t kCopySrcHost = 1u << 0;
inline constexpr uint8_t kCopyDstHost = 1u << 1;
inline constexpr uint8_t kCopyFlagMask = kCopySrcHost | kCopyDstHost;

// Launch flags. kLaunchArgsHost: `args` is an IOVA in host memory, which the firmware reads over
// PCIe as it starts the launch, as a GPU reads a kernel-argument buffer; so the host needs no copy
// command before each launch.
inline constexpr uint8_t kLaunchArgsHost = 1u << 0;
inline constexpr uint8_t kLaunchFlagMask = kLaunchArgsHost;

// Wait flags. kWaitHost: the semaphore's `addr` is an IOVA that the firmware reads by DMA across
// PCIe, not a device address: host memory, or another card's semaphore through its memory window
// (a stream of one card waiting for an event of another). SIGNAL takes no flags.
inline constexpr uint8_t kWaitHost = 1u << 0;
inline constexpr uint8_t kWaitFlagMask = kWaitHost;

inline constexpr uint64_t kMaxCopyBytes = 1ull << 32;      // 4 GiB per descriptor
inline constexpr uint32_t kMaxLaunchArgs = 16;             // u64 argument slots per launch
inline constexpr uint64_t kMaxProgramBytes = 64ull << 20;  // largest program a launch may name

struct CopyArgs {
  uint64_t src;    // device address, or IOVA when kCopySrcHost
  uint64_t dst;    // device address, or IOVA when kCopyDstHost
  uint64_t size;   // bytes, 1 .. kMaxCopyBytes
  uint64_t label;  // device address of a NUL-terminated label for traces (a collective's step), or 0
  uint64_t reserved[2];
};

struct LaunchArgs {
  uint64_t program;       // device address of the program (64-byte aligned)
  uint64_t program_size;  // bytes
  uint64_t args;          // device address of the u64 argument block (8-byte aligned), or IOVA with kLaunchArgsHost
  uint64_t args_size;     // bytes, a multiple of 8, at most kMaxLaunchArgs * 8
  uint64_t core_mask;     // bit i runs the program on core i
  uint64_t label;         // device address of a NUL-terminated label for traces (the host op), or 0
};

struct TimestampArgs {
  uint64_t dst;  // IOVA of an 8-byte slot in host memory
  uint64_t reserved[5];
};

/// A timeline semaphore is a u64 in device memory that only grows: SIGNAL raises it to `value`
/// (a lower value leaves it as it is), WAIT holds its queue, without occupying cores or DMA
/// channels, until it is at least `value`. So one queue orders itself after another without the
/// host. SIGNAL runs even on a queue in the error state (its completion still reports the error),
/// so that a queue waiting on a failed one is not held forever.
struct SemaphoreArgs {
  uint64_t addr;  // device address of the u64 semaphore (8-byte aligned); an IOVA for WAIT with kWaitHost
  uint64_t value;
  uint64_t reserved[4];
};

/// The device sanitizer (an emulator-only debugging aid; silicon answers kBadOpcode). It checks
/// every load and store of the cores against what the host told it, in queue order, so that a
/// free reaches it after the launches queued before it have run:
/// - kEnable: `tag` holds the kSanitize* checks to run on this queue's launches from now on
///   (0: none); base = size = 0.
/// - kAlloc: [base, base + size) is a new allocation named `tag` (nonzero): uninitialised,
///   and an access that starts in it must end in it.
/// - kFree: the allocation [base, base + size) is freed: any access to it is reported.
/// - kWatch: a watchpoint named `tag` (nonzero) on [base, base + size): the first core store into
///   it stops its launch, with or without checks; kUnwatch removes the one at `base`.
/// - kBreak: the next launch of this queue stops when core rank `tag >> 32` is about to execute
///   instruction `tag & 0xffffffff`; that core first writes its 16 scalar registers (u64) and its
///   scratchpad to [base, base + size) (size >= kBreakHeaderBytes; what does not fit is left out).
///   kUnbreak (base = size = tag = 0) disarms it; a launch takes it either way.
/// - kPrintBuffer: [base, base + size) (base 8-byte aligned, size at least kPrintBufferMin; or
///   base = size = 0, none) receives the PRINT records of this queue's launches from now on: a
///   PrintBufferHeader, then records one after another. tag = 0.
/// A report stops the launch with kSanitizerReport; the queue's kQSan* registers say what it saw.
/// docs/hardware-interface.md, "The device sanitizer".
enum class SanitizeAction : uint64_t {
  kEnable = 0,
  kAlloc = 1,
  kFree = 2,
  kWatch = 3,
  kUnwatch = 4,
  kBreak = 5,
  kUnbreak = 6,
  kPrintBuffer = 7,
  kCount
};
inline constexpr uint64_t kBreakHeaderBytes = 128;       // a breakpoint's dump: the 16 registers, then the scratchpad
inline constexpr uint64_t kSanitizeMemcheck = 1u << 0;   // bounds of allocations, and freed memory
inline constexpr uint64_t kSanitizeRacecheck = 1u << 1;  // cores of one launch touching the same bytes unordered
inline constexpr uint64_t kSanitizeInitcheck = 1u << 2;  // reads of bytes never written since their allocation
inline constexpr uint64_t kSanitizeMask = kSanitizeMemcheck | kSanitizeRacecheck | kSanitizeInitcheck;

struct SanitizeArgs {
  SanitizeAction action;
  uint64_t base;  // device address
  uint64_t size;  // bytes
  uint64_t tag;   // the allocation's name (kAlloc, kFree), or the checks (kEnable)
  uint64_t reserved[2];
};

/// A print buffer (SANITIZE kPrintBuffer) starts with this header, which the host sets to
/// {sizeof header, 0} and the cores advance: `used` counts the bytes from the buffer's start
/// through the last record; a record that does not fit is dropped and counted.
struct PrintBufferHeader {
  uint64_t used;
  uint64_t dropped;
};
inline constexpr uint64_t kPrintBufferMin = 256;
/// One PRINT: this header, then `nregs` u64 register values, then `nvalues` elements of `dtype`
/// (hw::DType), then zeros up to `bytes` (a multiple of 8).
struct PrintRecord {
  uint32_t bytes;        // the whole record
  uint32_t message;      // PRINT's a: the index of its format string in the program
  uint32_t rank;         // the core's rank in the launch
  uint32_t instruction;  // the PRINT's index in the program
  uint64_t program;      // the program's device address (its header names the format strings)
  uint64_t cycle;        // the core's clock when it printed
  uint8_t nregs;
  uint8_t dtype;
  uint16_t nvalues;
  uint32_t reserved;
};
static_assert(sizeof(PrintRecord) == 40, "a print record's header is 40 bytes");

/// What a sanitizer report found (the queue's kQSanKind register, bits 7..0).
enum class SanitizeReport : uint32_t {
  kNone = 0,
  kOutOfBounds = 1,    // the access starts in allocation kQSanTag and leaves it (or enters it from outside)
  kFreed = 2,          // the access touches allocation kQSanTag after it was freed
  kRace = 3,           // another core of the launch (kQSanOther) touched these bytes with no BARRIER between
  kUninitialised = 4,  // a read of bytes of allocation kQSanTag that nothing wrote since it was allocated
  kWatchpoint = 5,     // a store into the bytes of watchpoint kQSanTag
  kBreakpoint = 6,     // the core reached the queue's breakpoint (kBreak); its state is in the dump
  kCount
};
inline constexpr uint32_t kSanReportWrite = 1u << 8;  // kQSanKind: the reported access is a store

constexpr const char* sanitize_report_name(SanitizeReport r) {
  switch (r) {
    case SanitizeReport::kNone:
      return "none";
    case SanitizeReport::kOutOfBounds:
      return "out of bounds";
    case SanitizeReport::kFreed:
      return "use after free";
    case SanitizeReport::kRace:
      return "race";
    case SanitizeReport::kUninitialised:
      return "uninitialised read";
    case SanitizeReport::kWatchpoint:
      return "watchpoint";
    case SanitizeReport::kBreakpoint:
      return "breakpoint";
    default:
      return "unknown";
  }
}

/// One 64-byte descriptor. `seq` is the queue's sequence number for this descriptor: the firmware
/// writes it to the queue's fence word once the descriptor completed (successfully or not).
struct Descriptor {
  Opcode opcode;
  uint8_t flags;
  uint16_t reserved0;
  uint32_t reserved1;
  uint64_t seq;
  union {
    CopyArgs copy;
    LaunchArgs launch;
    TimestampArgs timestamp;
    SemaphoreArgs semaphore;
    SanitizeArgs sanitize;
    uint64_t raw[6];
  };
};
static_assert(sizeof(Descriptor) == 64, "descriptor is 64 bytes");

/// One 32-byte completion record, written at the same ring index as its descriptor.
struct Completion {
  uint64_t seq;          // copied from the descriptor
  ErrorCode error;       // kOk on success
  Field field;           // the descriptor field that caused the error, kNone otherwise
  uint32_t detail;       // error detail: the faulting core and program counter for kCoreFault
  uint64_t start_cycle;  // device cycle when the command started
  uint64_t end_cycle;    // device cycle when it finished
};
static_assert(sizeof(Completion) == 32, "completion is 32 bytes");

}  // namespace spyre::hw
