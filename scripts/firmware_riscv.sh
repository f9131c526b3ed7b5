#!/usr/bin/env bash
# Proves that the firmware is freestanding C++: compiles firmware/src/firmware.cpp for the control
# processor (bare-metal RISC-V, Debian's gcc-riscv64-unknown-elf) with -Werror, checks that the
# object needs nothing from a hosted library, and prints its size.
#   bash scripts/firmware_riscv.sh [--march rv64imac|rv32imac|...]
# The default is rv64imac (lp64): the firmware's device addresses, sizes and sequence numbers are
# 64 bits (112 GB of device memory), which a 64-bit core handles in single instructions. rv32imac
# (ilp32) also builds; it needs libgcc's 64-bit shift helpers.
# Only the compiler's own freestanding C headers are on the include path, plus a <cstdint> written
# here (the Debian toolchain ships no C++ library at all, not even libstdc++'s freestanding
# headers): any other library header fails the compile, and any symbol the object needs beyond
# memcpy/memmove/memset/memcmp (which GCC may emit for a freestanding program and the firmware
# image provides) and libgcc's integer helpers fails the check.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

MARCH=rv64imac
while (($#)); do
  case "$1" in
    --march)
      MARCH="${2:?--march needs a value, e.g. rv64imac}"
      shift 2
      ;;
    *)
      echo "firmware-riscv: unknown argument ($1); usage: $0 [--march rv64imac|rv32imac]" >&2
      exit 2
      ;;
  esac
done
case "$MARCH" in
  rv64*) MABI=(-mabi=lp64 -mcmodel=medany) ;;
  rv32*) MABI=(-mabi=ilp32) ;;
  *)
    echo "firmware-riscv: --march must start with rv32 or rv64 (got $MARCH)" >&2
    exit 2
    ;;
esac

PREFIX=riscv64-unknown-elf
CXX="$PREFIX-g++"
if ! command -v "$CXX" >/dev/null; then
  echo "firmware-riscv: $CXX not found: install Debian's gcc-riscv64-unknown-elf (scripts/bootstrap.sh does)" >&2
  exit 1
fi

OUT="$ROOT/build/firmware-riscv/$MARCH"
mkdir -p "$OUT/include"
# <cstdint> is a freestanding C++ header; this one maps it onto the compiler's own <stdint.h>.
cat >"$OUT/include/cstdint" <<'EOF'
// Written by scripts/firmware_riscv.sh: freestanding <cstdint> over the compiler's <stdint.h>.
#pragma once
#include <stdint.h>
namespace std {
using ::int8_t;
using ::int16_t;
using ::int32_t;
using ::int64_t;
using ::uint8_t;
using ::uint16_t;
using ::uint32_t;
using ::uint64_t;
using ::intptr_t;
using ::uintptr_t;
using ::intmax_t;
using ::uintmax_t;
}  // namespace std
EOF

OBJ="$OUT/firmware.o"
FLAGS=(-march="$MARCH" "${MABI[@]}" -std=c++17 -Os -Wall -Wextra -Werror
  -ffreestanding -fno-exceptions -fno-rtti -fno-threadsafe-statics -fno-asynchronous-unwind-tables
  -nostdinc -nostdinc++ -isystem "$OUT/include")
for dir in include include-fixed; do  # the compiler's own headers: <stdint.h>, <stddef.h>, <limits.h>
  dir="$("$CXX" -print-file-name="$dir")"
  [[ -d "$dir" ]] && FLAGS+=(-isystem "$dir")
done
FLAGS+=(-I firmware/include -I hw/include)
if ! "$CXX" "${FLAGS[@]}" -c firmware/src/firmware.cpp -o "$OBJ"; then
  echo "firmware-riscv: firmware/src/firmware.cpp does not build freestanding for $MARCH (above). Only" \
    "<cstdint> and the compiler's own C headers (<stdint.h>, <stddef.h>, <limits.h>, ...) exist on" \
    "the control processor: no <cstring>, <algorithm>, exceptions, RTTI or heap." >&2
  exit 1
fi

# What the object needs from outside. A hosted library shows up here (operator new, __cxa_*,
# _Unwind_*, std::, printf, abort, ...).
bad=()
while read -r sym; do
  case "$sym" in
    memcpy | memmove | memset | memcmp) ;;
    __*[sdt]i[0-9]) ;;  # libgcc integer helpers, e.g. __popcountdi2, __ashldi3
    *) bad+=("$sym") ;;
  esac
done < <("$PREFIX-nm" -u "$OBJ" | awk '{print $NF}')
if ((${#bad[@]})); then
  echo "firmware-riscv: the firmware needs symbols that a freestanding image does not have:" \
    "${bad[*]} (demangled: $(printf '%s\n' "${bad[@]}" | "$PREFIX-c++filt" | paste -sd, -))" >&2
  exit 1
fi
# Static constructors, thread-locals and exception tables need a runtime the firmware has not got.
sections="$("$PREFIX-objdump" -h "$OBJ" | awk '$1 ~ /^[0-9]+$/ {print $2}')"
for s in .init_array .ctors .fini_array .dtors .tdata .tbss .gcc_except_table; do
  if grep -qx -- "$s" <<<"$sections"; then
    echo "firmware-riscv: the firmware object has a $s section, which needs a C++ runtime" >&2
    exit 1
  fi
done

echo "firmware-riscv: firmware.cpp builds freestanding for $MARCH ($($CXX -dumpversion), -Os -Werror);" \
  "external symbols: $("$PREFIX-nm" -u "$OBJ" | awk '{print $NF}' | paste -sd' ' -)"
"$PREFIX-size" "$OBJ"
