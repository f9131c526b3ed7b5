// BAR0 register map of the modelled Spyre card. All registers are 32 bits wide and little endian.
// Documented in docs/hardware-interface.md; nothing else in the tree declares these offsets.
#pragma once

#include <cstdint>

namespace spyre::hw {

inline constexpr uint32_t kRegMagicValue = 0x52595053;  // "SPYR"
inline constexpr uint32_t kInterfaceVersion = 7;        // 5: SANITIZE and the SAN_* registers; 6: PRINT; 7: kWaitHost

// Device-wide registers.
inline constexpr uint32_t kRegMagic = 0x0000;      // ro: kRegMagicValue
inline constexpr uint32_t kRegVersion = 0x0004;    // ro: kInterfaceVersion
inline constexpr uint32_t kRegNumQueues = 0x0008;  // ro: hardware queues implemented
inline constexpr uint32_t kRegNumCores = 0x000c;   // ro: AI cores present
inline constexpr uint32_t kRegMemSizeLo = 0x0010;  // ro: usable device memory in bytes
inline constexpr uint32_t kRegMemSizeHi = 0x0014;
inline constexpr uint32_t kRegStatus = 0x0018;   // ro: kStatus* bits
inline constexpr uint32_t kRegControl = 0x001c;  // wo: kControl* bits
inline constexpr uint32_t kRegCycleLo = 0x0020;  // ro: device cycle counter; reading LO latches HI
inline constexpr uint32_t kRegCycleHi = 0x0024;
inline constexpr uint32_t kRegClockMhz = 0x0028;  // ro: core clock in MHz
inline constexpr uint32_t kRegLxBytes = 0x002c;   // ro: scratchpad bytes per core
inline constexpr uint32_t kRegNumerics = 0x0030;  // ro: kNumerics* bits: the formats of device data
// ro: the first device address this function may use; with kRegMemSize, its memory window. The
// physical function owns all of memory (base 0); a client of a shared card sees its own window.
inline constexpr uint32_t kRegMemBaseLo = 0x0034;
inline constexpr uint32_t kRegMemBaseHi = 0x0038;
// Capability registers (ro): the figures of the card that a compiler plans tiles and work
// division with (spyre/hw/figures.h gathers them; docs/hardware-interface.md).
inline constexpr uint32_t kRegCorelets = 0x003c;        // corelets per core, each with one PT array
inline constexpr uint32_t kRegPtRows = 0x0040;          // PT array rows
inline constexpr uint32_t kRegPtCols = 0x0044;          // PT array columns
inline constexpr uint32_t kRegPtSimd = 0x0048;          // fp16 multiply-add lanes per PE
inline constexpr uint32_t kRegFp32Rate = 0x004c;        // fp32 PT throughput relative to fp16, 16.16 fixed point
inline constexpr uint32_t kRegLxReadBytes = 0x0050;     // scratchpad read port feeding the PT arrays, bytes per cycle
inline constexpr uint32_t kRegSfpLanes = 0x0054;        // SFP 16-bit lanes per core
inline constexpr uint32_t kRegRingBytes = 0x0058;       // ring bytes per cycle, per link and direction
inline constexpr uint32_t kRegMemControllers = 0x005c;  // memory controllers (ring stops that serve the channels)
inline constexpr uint32_t kRegMemMBps = 0x0060;         // device memory bandwidth, MB/s (10^6 bytes)

// fp16 data in device memory (and the SFP and PT arrays' f16) is DLFloat16 (spyre/hw/dlfloat16.h),
// not IEEE half: the host converts at the copy boundary.
inline constexpr uint32_t kNumericsFp16DlFloat = 1u << 0;

inline constexpr uint32_t kStatusFirmwareReady = 1u << 0;

inline constexpr uint32_t kControlReset = 1u << 0;  // resets every queue (the cores finish what they run)

// Queue register blocks: queue q starts at kQueueBase + q * kQueueStride.
inline constexpr uint32_t kMaxQueues = 16;
inline constexpr uint32_t kQueueBase = 0x1000;
inline constexpr uint32_t kQueueStride = 0x100;

inline constexpr uint32_t kQRingBaseLo = 0x00;  // rw: IOVA of the descriptor ring (host memory)
inline constexpr uint32_t kQRingBaseHi = 0x04;
inline constexpr uint32_t kQRingEntries = 0x08;  // rw: descriptors in the ring, a power of two
inline constexpr uint32_t kQCplBaseLo = 0x10;    // rw: IOVA of the completion ring (same entry count)
inline constexpr uint32_t kQCplBaseHi = 0x14;
inline constexpr uint32_t kQFenceLo = 0x18;  // rw: IOVA of the 8-byte fence word
inline constexpr uint32_t kQFenceHi = 0x1c;
inline constexpr uint32_t kQMsixVector = 0x20;  // rw: MSI-X vector raised after each completion
inline constexpr uint32_t kQControl = 0x24;     // wo: kQControl* bits
inline constexpr uint32_t kQStatus = 0x28;      // ro: kQStatus* bits, last error code in bits 16..31
inline constexpr uint32_t kQHead = 0x2c;        // ro: descriptors consumed (free-running)
inline constexpr uint32_t kQTail = 0x30;        // rw: doorbell, descriptors produced (free-running)
inline constexpr uint32_t kQPriority = 0x34;    // rw: kQPriority*: who gets the cores and DMA channels first
inline constexpr uint32_t kQResets = 0x38;      // ro: resets of this queue (free-running)
// ro: 1 while the firmware executes a command of this queue (a copy or a launch), else 0. A reset
// does not clear it: the command runs on to its end, its result dropped. The host waits for 0
// before it hands the queue's memory to someone else.
inline constexpr uint32_t kQActive = 0x3c;
// ro: the device sanitizer's last report on this queue (commands.h, SanitizeArgs): what it found
// (SanitizeReport, | kSanReportWrite for a store), the access (address, bytes), the allocation
// concerned (its tag) and, for a race, the other core (core << 24 | instruction). Written when a
// launch stops with kSanitizerReport; a queue reset keeps them, a device reset clears them.
inline constexpr uint32_t kQSanKind = 0x40;
inline constexpr uint32_t kQSanAddrLo = 0x44;
inline constexpr uint32_t kQSanAddrHi = 0x48;
inline constexpr uint32_t kQSanBytes = 0x4c;
inline constexpr uint32_t kQSanTagLo = 0x50;
inline constexpr uint32_t kQSanTagHi = 0x54;
inline constexpr uint32_t kQSanOther = 0x58;

// Queues run concurrently and share the cores and the DMA channels. When several wait for the same
// ones, a high-priority queue goes first, then the one that asked first.
inline constexpr uint32_t kQPriorityNormal = 0;
inline constexpr uint32_t kQPriorityHigh = 1;

// A write to kQControl sets the enabled state to its Enable bit; with Reset it also clears the
// error state and sets head = tail = 0.
inline constexpr uint32_t kQControlEnable = 1u << 0;
inline constexpr uint32_t kQControlReset = 1u << 1;

inline constexpr uint32_t kQStatusEnabled = 1u << 0;
inline constexpr uint32_t kQStatusError = 1u << 1;
// The queue stopped without completing its descriptors: its ring, completion ring or fence is
// unreachable or misconfigured, so the firmware dropped what it held (HEAD = TAIL) and raised the
// queue's interrupt. Only a reset clears it.
inline constexpr uint32_t kQStatusHalted = 1u << 2;

inline constexpr uint32_t kMinRingEntries = 2;
inline constexpr uint32_t kMaxRingEntries = 1u << 16;

/// Offset in BAR0 of register `reg` of queue `q`.
constexpr uint32_t queue_reg(uint32_t q, uint32_t reg) {
  return kQueueBase + q * kQueueStride + reg;
}

// The management page: how the card is shared between clients. Only the host's privileged driver
// (spyre-simd, or a kernel driver) writes it; a client's MMIO never reaches it. Each queue has a
// device-memory window and a host (IOVA) window: the firmware refuses a descriptor whose device
// or host range leaves them (kOutOfRange, kDmaFault), and a launch's cores fault with kDmaFault on
// an access outside the device window. After reset both windows cover everything.
inline constexpr uint32_t kMgmtBase = 0x8000;
inline constexpr uint32_t kMgmtQueueStride = 0x20;
inline constexpr uint32_t kMQMemBaseLo = 0x00;  // rw: first device address of queue q's window
inline constexpr uint32_t kMQMemBaseHi = 0x04;
inline constexpr uint32_t kMQMemSizeLo = 0x08;  // rw: its bytes
inline constexpr uint32_t kMQMemSizeHi = 0x0c;
inline constexpr uint32_t kMQIovaBaseLo = 0x10;  // rw: first IOVA queue q's DMA may reach
inline constexpr uint32_t kMQIovaBaseHi = 0x14;
inline constexpr uint32_t kMQIovaSizeLo = 0x18;  // rw: its bytes
inline constexpr uint32_t kMQIovaSizeHi = 0x1c;
// Scrubbing: writing 1 to kMgmtScrub zeroes [base, base + size) of device memory and releases
// its backing (a client's window before the next client gets it). Posted; later accesses see it.
inline constexpr uint32_t kMgmtScrubBaseLo = kMgmtBase + 0x400;
inline constexpr uint32_t kMgmtScrubBaseHi = kMgmtBase + 0x404;
inline constexpr uint32_t kMgmtScrubSizeLo = kMgmtBase + 0x408;
inline constexpr uint32_t kMgmtScrubSizeHi = kMgmtBase + 0x40c;
inline constexpr uint32_t kMgmtScrub = kMgmtBase + 0x410;
inline constexpr uint32_t kMgmtEnd = kMgmtBase + 0x1000;

/// True when [addr, addr + n) lies inside the window [base, base + size), n > 0, without overflow.
constexpr bool in_window(uint64_t addr, uint64_t n, uint64_t base, uint64_t size) {
  return addr >= base && addr - base < size && n <= size - (addr - base);
}

/// Offset in BAR0 of management register `reg` of queue `q`.
constexpr uint32_t mgmt_reg(uint32_t q, uint32_t reg) {
  return kMgmtBase + q * kMgmtQueueStride + reg;
}

}  // namespace spyre::hw
