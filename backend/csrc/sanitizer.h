// The host's half of the device sanitizer (SPYRE_SANITIZE=memcheck,racecheck,initcheck): it tells
// the card of every tensor allocation and free, in stream order (hw/commands.h, SanitizeArgs), and
// turns the card's findings into messages that name the allocation. docs/debugging-guide.md.
#pragma once

#include <cstdint>
#include <string>

#include "spyre/driver/device.h"

namespace spyre::backend {

class DeviceRuntime;

namespace sanitizer {

/// The checks SPYRE_SANITIZE asks for (hw::kSanitize* bits; 0 when unset), read once. Throws
/// ValueError naming an unknown check.
uint64_t checks();
/// The hw::kSanitize* bits of a comma-separated list of check names ("" and "0": none). Throws
/// ValueError naming an unknown one; `what` names the setting in the message.
uint64_t parse(const std::string& list, const char* what);
/// Sets device `dev`'s checks to `bits` from now on, once the card is idle (they must be among
/// checks(): allocations are only tracked under SPYRE_SANITIZE). ValueError otherwise.
void set_checks(int dev, uint64_t bits);
/// A tensor allocation of `bytes` at device address `addr` for work on `stream` of device `dev`.
void allocated(int dev, int64_t stream, uint64_t addr, uint64_t bytes);
/// The allocation at `addr` is freed, in `stream`'s order.
void freed(int dev, int64_t stream, uint64_t addr);
/// Sets a watchpoint on [addr, addr + bytes) of device `dev`, in `stream`'s order: the first core
/// store into it stops its launch with a report naming the writer. Works with or without
/// SPYRE_SANITIZE. Returns its number, for unwatch.
uint64_t watch(int dev, int64_t stream, uint64_t addr, uint64_t bytes);
/// Removes watchpoint `id`, in `stream`'s order.
void unwatch(int dev, int64_t stream, uint64_t id);
/// Arms a breakpoint for the next launch on `stream` of device `dev`: core rank `rank` stops before
/// instruction `pc` and dumps its registers and scratchpad to [buffer, buffer + bytes). `pc` < 0
/// disarms it.
void break_at(int dev, int64_t stream, uint64_t buffer, uint64_t bytes, int64_t pc, uint32_t rank);
/// What a finding on device `dev` means, naming the allocations it concerns (appended to the
/// device error).
std::string describe(int dev, const driver::SanitizerFinding& f);

}  // namespace sanitizer
}  // namespace spyre::backend
