#!/usr/bin/env bash
# Sets up everything from a fresh Debian 12 or 13 machine and builds every layer. Idempotent:
# installs only what is missing and rebuilds only what changed.
#   Debian packages: compilers, CMake, Ninja, SystemC, {fmt}, doctest, Eigen, nlohmann-json, CLI11;
#   the bare-metal RISC-V cross compiler (the firmware check) and clang with its sanitizer and
#   libFuzzer runtimes (the fuzz targets); ccache (a build in a fresh clone reuses earlier ones).
#   .venv at the repository root: torch==2.13.0 (CPU), numpy, pytest, pytest-xdist (the pytest
#   plugin's run with workers), expecttest (for PyTorch's OpInfo test inputs), transformers (the
#   Llama model tests build a tiny model, no download), accelerate and peft (the LoRA example with
#   Trainer), ruff; pandas, pyarrow, matplotlib, tqdm,
#   ray, perfetto (the architect's tools, spyre_arch; perfetto writes spyre-trace's protobuf
#   traces); scikit-build-core (the build backend); torch_spyre and spyre_arch (editable, with
#   every command: spyre-sim, spyre-simd, spyre-smi, spyre-sweep, spyre-plot, spyre-trace, and the
#   pytest plugin).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

APT_PACKAGES=(build-essential binutils cmake ninja-build pkg-config git
  libsystemc-dev libfmt-dev libspdlog-dev doctest-dev libeigen3-dev nlohmann-json3-dev libcli11-dev
  python3 python3-dev python3-venv
  gcc-riscv64-unknown-elf clang libclang-rt-dev ccache linux-perf iproute2)
PY_PACKAGES=("torch==2.13.0" numpy pytest "pytest-xdist==3.8.0" "expecttest==0.3.0" "transformers==5.24.0" "accelerate==1.16.0" "peft==0.21.2" ruff "clang-format==18.1.8" "clang-tidy==18.1.8"
  "scikit-build-core==1.1.2" "setuptools>=64" pandas pyarrow matplotlib tqdm ray "perfetto==0.59.1")

say() { printf '\033[1mbootstrap:\033[0m %s\n' "$*"; }
# pip, quiet unless it fails (then its whole log is shown).
pip_quiet() {
  local log
  log="$(mktemp)"
  if ! .venv/bin/python -m pip --disable-pip-version-check "$@" >"$log" 2>&1; then
    cat "$log"
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  say "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
# pip is quick when everything is present; torch comes as the CPU build (see README).
say "checking Python packages"
pip_quiet install "${PY_PACKAGES[@]}"

# The same build as `pip install .` (pyproject.toml, scikit-build-core); installed editable, it is
# kept in build/ (pyproject.toml's editable override), where the C++ tests, clang-tidy and
# `cmake --build build` use it. Torch is this venv's, so no isolated build environment.
say "building every layer into build/ (CMake + Ninja through scikit-build-core; a first build takes a while)"
TORCH_DEVICE_BACKEND_AUTOLOAD=0 pip_quiet install --no-build-isolation --no-deps -e .
.venv/bin/python -c "import torch_spyre" || { say "torch_spyre does not import"; exit 1; }
say "ready: .venv/bin/python -c 'import torch; torch.ones(2).to(\"spyre\")'"
