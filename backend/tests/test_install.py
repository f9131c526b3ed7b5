"""torch_spyre as an installed package behaves as a PyTorch backend should: its commands are on
PATH with --help and --version, `import torch` survives an extension that does not load (one
warning, the device unavailable), and torch.profiler prints nothing the user did not ask for."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, clean_env

BIN = pathlib.Path(sys.executable).parent
COMMANDS = ("spyre-sim", "spyre-simd", "spyre-smi", "spyre-sweep", "spyre-plot", "spyre-trace")


def _version() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_is_on_path_with_help_and_version(command):
    help_ = subprocess.run([BIN / command, "--help"], capture_output=True, text=True, timeout=120, env=clean_env())
    assert help_.returncode == 0, help_.stderr
    assert "usage" in help_.stdout.lower() and "--version" in help_.stdout
    version = subprocess.run([BIN / command, "--version"], capture_output=True, text=True, timeout=120, env=clean_env())
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith(f"{command} {_version()}")


def test_the_simulators_commands_name_their_interfaces():
    out = subprocess.run([BIN / "spyre-simd", "--version"], capture_output=True, text=True, timeout=60).stdout
    assert re.fullmatch(r"spyre-simd \S+ \(hardware interface v\d+, protocol v\d+\)\n", out), out
    import torch_spyre

    assert torch_spyre.__version__ == _version()


@pytest.mark.parametrize("broken", ["removed", "corrupt"])
def test_import_torch_survives_an_extension_that_does_not_load(tmp_path, broken):
    # The package as a partial install leaves it: everything but the compiled extension, or an
    # extension that is not a library.
    shutil.copytree(
        ROOT / "backend" / "torch_spyre", tmp_path / "torch_spyre", ignore=shutil.ignore_patterns("*.so", "bin")
    )
    if broken == "corrupt":
        (tmp_path / "torch_spyre" / next((ROOT / "backend" / "torch_spyre").glob("_C*.so")).name).write_bytes(b"x")
    # The copy is found first on PYTHONPATH; the checkout's editable install, which would find the
    # checkout's extension for it, is taken out, as a plain install has none.
    code = (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in type(f).__module__]\n"
        "import torch; print(torch.spyre.is_available(), torch.spyre.device_count())\n"
        "import torch_spyre; print(torch_spyre.__file__)"
    )
    env = {**clean_env(), "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    first, where = r.stdout.splitlines()
    assert first == "False 0" and where.startswith(str(tmp_path))
    assert r.stderr.count("the spyre device is unavailable") == 1, r.stderr
    assert "its extension does not load" in r.stderr and "scripts/bootstrap.sh" in r.stderr


def test_the_profiler_prints_nothing_the_user_did_not_ask_for():
    code = (
        "import torch\n"
        "from torch.profiler import profile\n"
        "with profile() as p:\n"
        "    (torch.ones(2, device='spyre') + 1).cpu()\n"
        "assert any(e.key for e in p.key_averages())\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=clean_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""
