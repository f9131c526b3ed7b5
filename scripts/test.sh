#!/usr/bin/env bash
# Runs every test: C++ unit tests and SystemC testbenches (CTest), the same under AddressSanitizer,
# UndefinedBehaviorSanitizer and (driver and daemon) ThreadSanitizer, the firmware's RISC-V
# cross-compile and a brief fuzzing run, then the PyTorch tests (pytest; and a part of them again
# over the socket transport), then the linters. Expects scripts/bootstrap.sh to have run.
# Arguments go to pytest: `--slow` adds the long tiers (every OpInfo sample, and the whole PyTorch
# suite again over the socket transport).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

echo "== C++ tests and SystemC testbenches (ctest)"
ctest --test-dir build --output-on-failure

echo "== sanitizers (ASan + UBSan, TSan)"
bash scripts/sanitizers.sh

echo "== firmware for RISC-V (cross-compile)"
bash scripts/firmware_riscv.sh

echo "== fuzzing (brief)"
bash scripts/fuzz.sh

echo "== PyTorch device tests (pytest)"
.venv/bin/python -m pytest -q "$@"

# The card in spyre-simd instead of in the test process, shared with the tests' subprocesses. The
# default run takes the files that exercise the command path most; --slow takes the whole suite.
echo "== PyTorch device tests over the socket transport (spyre-simd)"
if [[ " $* " == *" --slow "* ]]; then
  SPYRE_TRANSPORT=socket .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
else
  SPYRE_TRANSPORT=socket .venv/bin/python -m pytest -q -p no:cacheprovider backend/tests/test_streams.py \
    backend/tests/test_errors.py backend/tests/test_models.py backend/tests/test_views.py \
    backend/tests/test_graphs.py backend/tests/test_threads.py backend/tests/test_autocast.py \
    backend/tests/test_attention.py backend/tests/test_robustness.py backend/tests/test_faults.py \
    backend/tests/test_device.py
fi

echo "== lint (ruff)"
.venv/bin/ruff check backend scripts benchmarks fuzz
.venv/bin/ruff format --check backend scripts benchmarks fuzz

echo "== format (clang-format, pinned in .venv)"
find common hw firmware sim simd driver backend testbenches tools fuzz \( -name '*.h' -o -name '*.cpp' \) -print0 |
  xargs -0 .venv/bin/clang-format --dry-run --Werror
echo "format: all C++ files clean"
