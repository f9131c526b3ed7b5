#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ (clang, with AddressSanitizer and UndefinedBehaviorSanitizer;
# the firmware, the daemon's message codec, the KTIR reader and lowering and the hardware headers; no SystemC) and runs each from its committed seed
# corpus, printing the executions of each target. Exits non-zero on any crash, with the crash file.
#   bash scripts/fuzz.sh                       the brief run of every CI run (--seconds 15 each)
#   bash scripts/fuzz.sh --runs 10000000       the long offline run (no time limit)
#   bash scripts/fuzz.sh --target fuzz_program --seconds 600
#   bash scripts/fuzz.sh --tensor-programs 100000 [--seed S] [--mode allow|error] [--front-door eager|compile]
#                                              the differential fuzzer of tensor programs instead
#                                              (fuzz/tensor_programs.py: spyre against CPU torch)
# --seconds and --runs both bound a run when both are given. Built in build/fuzz/; inputs that
# found new coverage collect in build/fuzz/corpus/<target>/ (the committed seeds stay as they are),
# crash files in build/fuzz/crashes/<target>/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TARGETS=(fuzz_descriptor fuzz_program fuzz_messages fuzz_ktir)
SECONDS_EACH=""
RUNS=""
ONLY=""
PROGRAMS=""
SEED=1
MODE=allow
FRONT_DOOR=eager
usage="usage: $0 [--seconds N] [--runs N] [--target fuzz_descriptor|fuzz_program|fuzz_messages|fuzz_ktir]
       $0 --tensor-programs N [--seed S] [--mode allow|error] [--front-door eager|compile]"
while (($#)); do
  case "$1" in
    --tensor-programs)
      PROGRAMS="${2:?--tensor-programs needs a value}"
      shift 2
      ;;
    --seed)
      SEED="${2:?--seed needs a value}"
      shift 2
      ;;
    --mode)
      MODE="${2:?--mode needs a value}"
      shift 2
      ;;
    --front-door)
      FRONT_DOOR="${2:?--front-door needs a value}"
      shift 2
      ;;
    --seconds)
      SECONDS_EACH="${2:?--seconds needs a value}"
      shift 2
      ;;
    --runs)
      RUNS="${2:?--runs needs a value}"
      shift 2
      ;;
    --target)
      ONLY="${2:?--target needs a value}"
      shift 2
      ;;
    *)
      echo "fuzz: unknown argument ($1); $usage" >&2
      exit 2
      ;;
  esac
done
if [[ -n "$PROGRAMS" ]]; then
  mkdir -p build/fuzz
  exec .venv/bin/python fuzz/tensor_programs.py --programs "$PROGRAMS" --seed "$SEED" --mode "$MODE" \
    --front-door "$FRONT_DOOR" --out "build/fuzz/tensor_programs-seed$SEED-$MODE-$FRONT_DOOR.json"
fi
[[ -z "$SECONDS_EACH" && -z "$RUNS" ]] && SECONDS_EACH=15
if [[ -n "$ONLY" ]]; then
  [[ " ${TARGETS[*]} " == *" $ONLY "* ]] || {
    echo "fuzz: no target $ONLY; $usage" >&2
    exit 2
  }
  TARGETS=("$ONLY")
fi

CXX="${FUZZ_CXX:-clang++}"
if ! command -v "$CXX" >/dev/null; then
  echo "fuzz: $CXX not found: install Debian's clang and libclang-rt-dev (scripts/bootstrap.sh does)" >&2
  exit 1
fi
OUT="$ROOT/build/fuzz"
mkdir -p "$OUT"
SAN=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
CXXFLAGS=(-std=c++17 -g -O1 -Wall -Wextra -Wno-unused-parameter -Werror "${SAN[@]}"
  -I firmware/include -I hw/include -I simd/include -I fuzz)

# The firmware once, instrumented for coverage, then each target linked against it.
build() {
  "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer-no-link -c firmware/src/firmware.cpp -o "$OUT/firmware.o"
  "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer-no-link -c simd/src/protocol.cpp -o "$OUT/protocol.o"
  local t f
  for t in "${TARGETS[@]}"; do
    if [[ "$t" == fuzz_ktir ]]; then  # the KTIR reader and lowering, with what they link of the compiler
      local objs=()
      for f in backend/compiler/src/ktir/*.cpp backend/compiler/src/assemble.cpp backend/compiler/src/listing.cpp; do
        "$CXX" "${CXXFLAGS[@]}" -I backend/compiler/include -fsanitize=fuzzer-no-link -c "$f" \
          -o "$OUT/ktir_$(basename "$f" .cpp).o" || return 1
        objs+=("$OUT/ktir_$(basename "$f" .cpp).o")
      done
      "$CXX" "${CXXFLAGS[@]}" -I backend/compiler/include -fsanitize=fuzzer "fuzz/$t.cpp" "${objs[@]}" -lfmt -o "$OUT/$t" || return 1
      continue
    fi
    "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer "fuzz/$t.cpp" "$OUT/firmware.o" "$OUT/protocol.o" -o "$OUT/$t"
  done
}
start=$(date +%s)
if ! build; then
  echo "fuzz: the fuzz targets do not build with $CXX (above); -fsanitize=fuzzer needs libclang-rt-dev" >&2
  exit 1
fi
echo "fuzz: built ${TARGETS[*]} with $("$CXX" --version | head -1) in $(($(date +%s) - start)) s"

max_len() {
  case "$1" in
    fuzz_program) echo 128 ;;
    fuzz_messages) echo 4200 ;;
    fuzz_ktir) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

status=0
for t in "${TARGETS[@]}"; do
  work="$OUT/corpus/$t"
  crashes="$OUT/crashes/$t"
  mkdir -p "$work" "$crashes"
  args=(-max_len="$(max_len "$t")" -timeout=10 -print_final_stats=1 -artifact_prefix="$crashes/")
  [[ -n "$SECONDS_EACH" ]] && args+=(-max_total_time="$SECONDS_EACH")
  [[ -n "$RUNS" ]] && args+=(-runs="$RUNS")
  log="$OUT/$t.log"
  t0=$(date +%s)
  set +e
  seeds=("fuzz/corpus/$t")
  [[ "$t" == fuzz_ktir ]] && seeds=(examples/ktir)  # the example kernels are its seeds
  "$OUT/$t" "${args[@]}" "$work" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  set -e
  wall=$(($(date +%s) - t0))
  execs=$(awk '/stat::number_of_executed_units/ {print $NF}' "$log" | tail -1)
  rate=$(awk '/stat::average_exec_per_sec/ {print $NF}' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}' || true)
  if ((rc != 0)); then
    status=1
    echo "fuzz: $t FAILED after ${execs:-?} executions in $wall s (exit $rc); the end of $log:" >&2
    tail -n 40 "$log" >&2
    echo "fuzz: crash files: $(ls "$crashes" | sed "s|^|$crashes/|" | paste -sd' ' -)" >&2
    echo "fuzz: reproduce with $OUT/$t CRASH_FILE (see docs/developer-guide.md, \"Firmware checks\")" >&2
  else
    echo "fuzz: $t: ${execs:-?} executions in $wall s (${rate:-?}/s), coverage ${cov:-?} edges," \
      "$(ls "$work" | wc -l) inputs in build/fuzz/corpus/$t, no crash"
  fi
done
exit "$status"
