// Device printf, formatted: a PRINT record's message (a format string of its program) applied to
// its registers and scratchpad values. The host runtime formats what it reads back from a print
// buffer for stderr, and the simulator formats the same records for its trace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "spyre/hw/isa.h"

namespace spyre::common {

/// The i-th NUL-terminated string of a program's format table (`size` bytes at `table`), or
/// nullopt when the table has fewer (a last string without its NUL counts up to the table's end).
std::optional<std::string> format_string(const char* table, size_t size, uint32_t i);

/// `format` applied printf-style to the registers (int64, first) and then the values (`nvalues`
/// elements of `dtype` at `values`; f16 as DLFloat16 when `fp16_dlfloat`, else IEEE):
///   %d %i   the next argument as a signed integer     %u %x %X  as unsigned, decimal or hex
///   %f %e %g (and upper case)   as a double            %v        every value left, as [a, b, ...]
///   %%      a percent sign
/// with flags (-+ 0#), a width and a precision, as printf takes them (no '*'). An argument past
/// the last prints as "<missing>"; an unknown conversion is copied as it is. Never reads past its
/// inputs; the result is at most 64 KiB.
std::string format_print(const std::string& format, const uint64_t* regs, size_t nregs, hw::DType dtype,
                         const void* values, size_t nvalues, bool fp16_dlfloat);

}  // namespace spyre::common
