#!/usr/bin/env bash
# Runs every test: C++ unit tests and SystemC testbenches (CTest), then the PyTorch tests (pytest),
# then the linters. Expects scripts/bootstrap.sh to have run. Arguments go to pytest: `--slow` adds
# the long tiers (every OpInfo sample).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

echo "== C++ tests and SystemC testbenches (ctest)"
ctest --test-dir build --output-on-failure

echo "== PyTorch device tests (pytest)"
.venv/bin/python -m pytest -q "$@"

echo "== lint (ruff)"
.venv/bin/ruff check backend scripts benchmarks
.venv/bin/ruff format --check backend scripts benchmarks

echo "== format (clang-format, pinned in .venv)"
find common hw firmware sim driver backend testbenches tools \( -name '*.h' -o -name '*.cpp' \) -print0 |
  xargs -0 .venv/bin/clang-format --dry-run --Werror
echo "format: all C++ files clean"
