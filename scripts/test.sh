#!/usr/bin/env bash
# Runs every test: C++ unit tests and SystemC testbenches (CTest), the same under AddressSanitizer,
# UndefinedBehaviorSanitizer and (driver and daemon) ThreadSanitizer, the firmware's RISC-V
# cross-compile and a brief fuzzing run, then the PyTorch tests (pytest; and a part of them again
# over the socket transport), then the linters (clang-tidy, ruff, clang-format). Expects
# scripts/bootstrap.sh to have run. Each stage prints its wall time, and the run ends with a table
# of them: the default tier is kept under 30 minutes on the 2-core CI machine.
# Arguments go to pytest: `--slow` adds the long tiers (every OpInfo sample, the whole PyTorch
# suite again over the socket transport, and again under the device sanitizer).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# `stage NAME` ends the stage before it (printing its time) and starts NAME; `stage` alone ends the
# last one and prints every stage's time.
STAGE=""
STAGE_START=$SECONDS
TIMES=()
stage() {
  if [[ -n $STAGE ]]; then
    local took=$((SECONDS - STAGE_START))
    TIMES+=("$(printf '%5d s  %s' "$took" "$STAGE")")
    echo "   ($STAGE: $took s)"
  fi
  STAGE=${1:-}
  STAGE_START=$SECONDS
  if [[ -n $STAGE ]]; then
    echo "== $STAGE"
  else
    echo "== stage times"
    printf '%s\n' "${TIMES[@]}"
  fi
}

stage "C++ tests and SystemC testbenches (ctest)"
ctest --test-dir build --output-on-failure

stage "sanitizers (ASan + UBSan, TSan)"
bash scripts/sanitizers.sh

stage "firmware for RISC-V (cross-compile)"
bash scripts/firmware_riscv.sh

stage "fuzzing (brief)"
bash scripts/fuzz.sh

stage "PyTorch device tests (pytest)"
.venv/bin/python -m pytest -q "$@"

# The card in spyre-simd instead of in the test process, shared with the tests' subprocesses. The
# default run takes the files that exercise the command path most; --slow takes the whole suite.
stage "PyTorch device tests over the socket transport (spyre-simd)"
if [[ " $* " == *" --slow "* ]]; then
  SPYRE_TRANSPORT=socket .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
else
  SPYRE_TRANSPORT=socket .venv/bin/python -m pytest -q -p no:cacheprovider backend/tests/test_streams.py \
    backend/tests/test_errors.py backend/tests/test_models.py backend/tests/test_views.py \
    backend/tests/test_graphs.py backend/tests/test_threads.py backend/tests/test_autocast.py \
    backend/tests/test_attention.py backend/tests/test_robustness.py backend/tests/test_faults.py \
    backend/tests/test_device.py
fi

# The device sanitizer over the whole suite: our own kernels must give no report (--slow only).
if [[ " $* " == *" --slow "* ]]; then
  stage "PyTorch device tests under the device sanitizer (SPYRE_SANITIZE)"
  SPYRE_SANITIZE=memcheck,racecheck,initcheck .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
fi

stage "clang-tidy"
bash scripts/tidy.sh

stage "lint (ruff)"
.venv/bin/ruff check backend scripts benchmarks fuzz
.venv/bin/ruff format --check backend scripts benchmarks fuzz

stage "format (clang-format, pinned in .venv)"
find common hw firmware sim simd driver backend testbenches tools fuzz \( -name '*.h' -o -name '*.cpp' \) -print0 |
  xargs -0 .venv/bin/clang-format --dry-run --Werror
echo "format: all C++ files clean"
stage
