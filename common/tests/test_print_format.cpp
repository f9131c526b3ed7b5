// Device printf's formatting against what C's printf prints for the same conversions (the
// reference: snprintf, for the specs both define), and its refusals to read past its inputs.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "spyre/common/print_format.h"
#include "spyre/hw/dlfloat16.h"

using spyre::common::format_print;
using spyre::common::format_string;
using spyre::hw::DType;

namespace {

std::string c_printf(const char* spec, double x) {
  char buf[128];
  std::snprintf(buf, sizeof buf, spec, x);
  return buf;
}
std::string c_printf(const char* spec, long long x) {
  char buf[128];
  std::snprintf(buf, sizeof buf, spec, x);
  return buf;
}

}  // namespace

TEST_CASE("conversions print what C's printf prints") {
  const uint64_t regs[] = {static_cast<uint64_t>(-42), 255};
  for (const char* spec : {"%d", "%5d", "%-5d|", "%+d", "%05d"}) {
    CAPTURE(spec);
    CHECK(format_print(spec, regs, 1, DType::kF32, nullptr, 0, true) == c_printf(spec, -42LL));
  }
  for (const auto& [mine, c] : std::vector<std::pair<const char*, const char*>>{
           {"%x", "%llx"}, {"%X", "%llX"}, {"%#x", "%#llx"}, {"%u", "%llu"}, {"%8x", "%8llx"}}) {
    CAPTURE(mine);
    CHECK(format_print(std::string("%d ") + mine, regs, 2, DType::kF32, nullptr, 0, true) ==
          "-42 " + c_printf(c, 255LL));
  }
  const float values[] = {3.14159f, -0.000125f, 1234567.0f};
  for (const char* spec : {"%f", "%.2f", "%10.3f", "%e", "%.3e", "%g", "%G", "%+.1f", "%-9.2f|"}) {
    CAPTURE(spec);
    for (int i = 0; i < 3; ++i) {
      CHECK(format_print(spec, nullptr, 0, DType::kF32, &values[i], 1, true) == c_printf(spec, double{values[i]}));
    }
  }
  CHECK(format_print("%ld and %lld", regs, 2, DType::kF32, nullptr, 0, true) == "-42 and 255");  // lengths ignored
  CHECK(format_print("100%% %q", nullptr, 0, DType::kF32, nullptr, 0, true) == "100% %q");       // unknown: kept
}

TEST_CASE("registers come first, then the values; %v takes the rest as a list") {
  const uint64_t regs[] = {7};
  const int64_t ints[] = {1, -2, 3};
  CHECK(format_print("tile %d: %v", regs, 1, DType::kI64, ints, 3, true) == "tile 7: [1, -2, 3]");
  CHECK(format_print("%d %d %v", regs, 1, DType::kI64, ints, 3, true) == "7 1 [-2, 3]");
  CHECK(format_print("%d %d %d %d %d", regs, 1, DType::kI64, ints, 3, true) == "7 1 -2 3 <missing>");
  CHECK(format_print("%v", nullptr, 0, DType::kI64, nullptr, 0, true) == "[]");
  // 16-bit floats as the card keeps them: DLFloat16 or IEEE half, and bfloat16.
  const uint16_t dl[] = {spyre::hw::dlf16_from_float(1.5f), spyre::hw::dlf16_from_float(-2.0f)};
  CHECK(format_print("%v", nullptr, 0, DType::kF16, dl, 2, true) == "[1.5, -2]");
  const uint16_t ieee[] = {0x3e00, 0xc000};  // 1.5, -2 in binary16
  CHECK(format_print("%v", nullptr, 0, DType::kF16, ieee, 2, false) == "[1.5, -2]");
  const uint16_t bf[] = {0x3fc0};  // 1.5 in bfloat16
  CHECK(format_print("%.1f", nullptr, 0, DType::kBF16, bf, 1, true) == "1.5");
  const uint8_t flags[] = {1, 0};
  CHECK(format_print("%v", nullptr, 0, DType::kBool, flags, 2, true) == "[1, 0]");
}

TEST_CASE("a format ending mid-conversion and a huge width stay inside their inputs") {
  CHECK(format_print("x = %", nullptr, 0, DType::kF32, nullptr, 0, true) == "x = %");
  CHECK(format_print("%5.", nullptr, 0, DType::kF32, nullptr, 0, true) == "%5.");
  const uint64_t r[] = {1};
  CHECK(format_print("%999999999999d", r, 1, DType::kF32, nullptr, 0, true).size() <= 10000);
}

TEST_CASE("format strings are found by index in a NUL-separated table") {
  const char table[] = "first\0second %d\0third";  // the last without its NUL (sizeof counts one)
  CHECK(format_string(table, sizeof table, 0) == "first");
  CHECK(format_string(table, sizeof table, 1) == "second %d");
  CHECK(format_string(table, sizeof table, 2) == "third");
  CHECK_FALSE(format_string(table, sizeof table, 3).has_value());
  CHECK(format_string(table, sizeof table - 1, 2) == "third");  // no NUL at all: up to the end
  CHECK_FALSE(format_string(table, 0, 0).has_value());
}
