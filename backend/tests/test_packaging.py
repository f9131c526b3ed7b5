"""torch_spyre as a user installs it: `pip install <checkout>` into an empty virtual environment
that has torch, and the wheel `pip wheel` builds installed into a second one. Both build every
layer through CMake (scikit-build-core) in pip's isolated build environment, as a user's pip
would, so this is the --slow tier: about 7 minutes per build on two cores.

In each environment the device answers, every command is on its PATH, and the packaged spyre-simd
serves the socket transport (the driver finds it beside the extension, with no build tree).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from conftest import ROOT, clean_env

ONE_LINER = "import torch; print(torch.ones(2, device='spyre') + 1)"
EXPECTED = "tensor([2., 2.], device='spyre:0')"


@pytest.fixture(autouse=True)
def _slow_only(request):
    if not request.config.getoption("--slow"):
        pytest.skip("builds every layer twice in fresh environments (--slow)")
    # The --slow run repeats the suite over the socket transport and under the device sanitizer;
    # this test sets up its environments from nothing, so once is enough.
    if os.environ.get("SPYRE_TRANSPORT") or os.environ.get("SPYRE_SANITIZE"):
        pytest.skip("runs once, in the plain pass of the suite")


def _env(tmp: pathlib.Path) -> dict[str, str]:
    """No trace of the checkout's environment: not its venv, not its build tree, not its PATH."""
    env = {k: v for k, v in clean_env().items() if not k.startswith(("SPYRE_", "VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env["HOME"] = str(tmp)  # no user-level pip or torch caches either
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(args, env, timeout=1800, cwd=None) -> str:
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    assert r.returncode == 0, f"{args} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def _venv_with_torch(where: pathlib.Path, env) -> pathlib.Path:
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", where], env)
    _run([where / "bin" / "python", "-m", "pip", "install", "-q", "torch==2.13.0"], env)
    return where / "bin"


def _works(bin_: pathlib.Path, env, cwd: pathlib.Path) -> None:
    assert _run([bin_ / "python", "-c", ONE_LINER], env, cwd=cwd).strip() == EXPECTED
    # The socket transport starts the packaged spyre-simd itself: nothing names its path.
    socket = {**env, "SPYRE_TRANSPORT": "socket", "SPYRE_SIMD_SOCKET": str(cwd / "simd.sock")}
    assert _run([bin_ / "python", "-c", ONE_LINER], socket, cwd=cwd).strip() == EXPECTED
    for command in ("spyre-sim", "spyre-simd", "spyre-smi", "spyre-sweep", "spyre-plot", "spyre-trace"):
        assert "usage" in _run([bin_ / command, "--help"], env, cwd=cwd).lower()
    assert "interface v" in _run([bin_ / "spyre-smi"], env, cwd=cwd)
    # The architect's tools need the arch extra for their work, and say so.
    sweep = subprocess.run([bin_ / "spyre-sweep", "--", "true"], capture_output=True, text=True, env=env, cwd=cwd)
    assert sweep.returncode == 2 and "pip install 'torch_spyre[arch]'" in sweep.stderr, sweep.stderr
    gemm = _run([bin_ / "spyre-sim", "gemm", "--m", "64", "--k", "64", "--n", "64", "--check"], env, cwd=cwd)
    assert "check       passed" in gemm, gemm
    # Nothing of the checkout is used: the package is the installed one.
    where = _run([bin_ / "python", "-c", "import torch_spyre._C as c; print(c.__file__)"], env, cwd=cwd)
    assert str(bin_.parent) in where and str(ROOT) not in where, where


def test_pip_install_of_the_checkout_and_of_its_wheel_into_fresh_environments(tmp_path):
    env = _env(tmp_path)
    first = _venv_with_torch(tmp_path / "installed", env)
    _run([first / "python", "-m", "pip", "install", "-q", ROOT], env, timeout=3600)
    _works(first, env, tmp_path)

    wheels = tmp_path / "wheels"
    _run([first / "python", "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, ROOT], env, timeout=3600)
    (wheel,) = wheels.glob("torch_spyre-*.whl")
    second = _venv_with_torch(tmp_path / "from_wheel", env)
    _run([second / "python", "-m", "pip", "install", "-q", wheel], env)
    _works(second, env, tmp_path)
    assert os.path.getsize(wheel) > 1 << 20, "the wheel carries no extension or programs"
