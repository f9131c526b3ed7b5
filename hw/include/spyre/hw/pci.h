// PCI identity and BAR layout of the modelled Spyre card.
// The single source of truth: the model, the firmware and the driver include this file.
#pragma once

#include <cstdint>

namespace spyre::hw {

// IBM's PCI vendor ID. The device ID is the one our model answers with; it is a model choice,
// not taken from silicon documentation (see docs/hardware-interface.md).
inline constexpr uint16_t kPciVendorId = 0x1014;
inline constexpr uint16_t kPciDeviceId = 0x06a7;
inline constexpr uint8_t kPciClassCode = 0x12;  // processing accelerator

// Offsets in the 256-byte PCI configuration space that the model implements.
inline constexpr uint32_t kCfgVendorId = 0x00;   // u16
inline constexpr uint32_t kCfgDeviceId = 0x02;   // u16
inline constexpr uint32_t kCfgCommand = 0x04;    // u16, bit 1 memory space, bit 2 bus master
inline constexpr uint32_t kCfgClassCode = 0x0b;  // u8
inline constexpr uint32_t kCfgBar0 = 0x10;       // u32, BAR0 base (64-bit BAR, low half)
inline constexpr uint32_t kCfgSize = 0x100;

inline constexpr uint16_t kCmdMemorySpace = 1u << 1;
inline constexpr uint16_t kCmdBusMaster = 1u << 2;

// BAR0 holds every register (see regs.h); it is the only BAR.
inline constexpr uint32_t kBar0Size = 1u << 20;

}  // namespace spyre::hw
