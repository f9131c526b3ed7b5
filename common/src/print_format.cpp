// printf-style formatting of device print records, without handing a format string from a program
// to the C library: each conversion is rebuilt as a {fmt} format spec from its parsed parts.
#include "spyre/common/print_format.h"

#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "spyre/hw/dlfloat16.h"
#include "spyre/hw/float16.h"

namespace spyre::common {
namespace {

constexpr size_t kMaxOutput = size_t{64} << 10;

// Argument i of a record: a register, or a value (as a double for float types).
struct Arg {
  bool is_float = false;
  int64_t i = 0;
  double d = 0;
};

Arg value_at(hw::DType t, const uint8_t* p, bool dlfloat) {
  Arg a;
  switch (t) {
    case hw::DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return a.is_float = true, a.d = f, a;
    }
    case hw::DType::kF16:
    case hw::DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      a.is_float = true;
      a.d = t == hw::DType::kBF16 ? hw::bf16_to_float(h) : dlfloat ? hw::dlf16_to_float(h) : hw::half_to_float(h);
      return a;
    }
    case hw::DType::kI64:
      std::memcpy(&a.i, p, 8);
      return a;
    case hw::DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return a.i = v, a;
    }
    case hw::DType::kI8:
      return a.i = static_cast<int8_t>(*p), a;
    default:  // bool
      return a.i = *p != 0, a;
  }
}

std::string formatted(const Arg& a, char conv, const std::string& flags, const std::string& width,
                      const std::string& precision) {
  // {fmt}'s spec: [fill-align][sign][#][0][width][.precision][type]
  std::string spec;
  if (flags.find('-') != std::string::npos) spec += '<';
  if (flags.find('+') != std::string::npos) {
    spec += '+';
  } else if (flags.find(' ') != std::string::npos) {
    spec += ' ';
  }
  if (flags.find('#') != std::string::npos) spec += '#';
  if (flags.find('0') != std::string::npos && flags.find('-') == std::string::npos) spec += '0';
  spec += width;
  const bool as_float = conv == 'f' || conv == 'F' || conv == 'e' || conv == 'E' || conv == 'g' || conv == 'G';
  if (as_float && !precision.empty()) spec += "." + precision;
  const std::string f = "{:" + spec +
                        (conv == 'X'   ? "X"
                         : conv == 'x' ? "x"
                         : as_float    ? std::string(1, conv)
                                       : "") +
                        "}";
  try {
    if (as_float) return fmt::format(fmt::runtime(f), a.is_float ? a.d : static_cast<double>(a.i));
    const int64_t i = a.is_float ? static_cast<int64_t>(a.d) : a.i;
    if (conv == 'u' || conv == 'x' || conv == 'X') return fmt::format(fmt::runtime(f), static_cast<uint64_t>(i));
    return fmt::format(fmt::runtime(f), i);
  } catch (const fmt::format_error&) {
    return "<bad format>";
  }
}

}  // namespace

std::optional<std::string> format_string(const char* table, size_t size, uint32_t i) {
  size_t at = 0;
  for (uint32_t k = 0; k < i; ++k) {
    const void* nul = at < size ? std::memchr(table + at, '\0', size - at) : nullptr;
    if (!nul) return std::nullopt;
    at = static_cast<size_t>(static_cast<const char*>(nul) - table) + 1;
  }
  if (at >= size) return std::nullopt;
  const void* nul = std::memchr(table + at, '\0', size - at);
  const size_t end = nul ? static_cast<size_t>(static_cast<const char*>(nul) - table) : size;
  return std::string(table + at, end - at);
}

std::string format_print(const std::string& format, const uint64_t* regs, size_t nregs, hw::DType dtype,
                         const void* values, size_t nvalues, bool fp16_dlfloat) {
  const auto* bytes = static_cast<const uint8_t*>(values);
  const size_t esz = dtype < hw::DType::kCount ? hw::dtype_size(dtype) : 1;
  size_t next = 0;  // arguments taken: registers, then values
  const auto take = [&](Arg* a) {
    if (next < nregs) {
      a->i = static_cast<int64_t>(regs[next++]);
      return true;
    }
    if (next - nregs < nvalues && bytes) {
      *a = value_at(dtype, bytes + (next++ - nregs) * esz, fp16_dlfloat);
      return true;
    }
    return false;
  };
  std::string out;
  for (size_t i = 0; i < format.size() && out.size() < kMaxOutput; ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    size_t j = i + 1;
    const auto span = [&](std::string_view set) {
      const size_t from = j;
      while (j < format.size() && set.find(format[j]) != std::string_view::npos) ++j;
      return format.substr(from, j - from);
    };
    const std::string flags = span("-+ 0#");
    const std::string width = span("0123456789").substr(0, 4);
    std::string precision;
    if (j < format.size() && format[j] == '.') {
      ++j;
      precision = span("0123456789").substr(0, 3);
      if (precision.empty()) precision = "0";
    }
    span("hlLqjzt");  // length modifiers: every argument is 64 bits already
    if (j >= format.size()) {
      out += format.substr(i);
      break;
    }
    const char conv = format[j];
    if (conv == '%') {
      out += '%';
    } else if (conv == 'v') {
      out += '[';
      for (bool first = true; next < nregs + nvalues && out.size() < kMaxOutput; first = false) {
        Arg a;
        if (!take(&a)) break;
        if (!first) out += ", ";
        out += a.is_float ? fmt::format("{}", a.d) : fmt::format("{}", a.i);
      }
      out += ']';
    } else if (std::string_view("diuxXfFeEgG").find(conv) != std::string_view::npos) {
      Arg a;
      out += take(&a) ? formatted(a, conv, flags, width, precision) : "<missing>";
    } else {
      out += format.substr(i, j + 1 - i);
    }
    i = j;
  }
  if (out.size() > kMaxOutput) out.resize(kMaxOutput);
  return out;
}

}  // namespace spyre::common
