"""Shared fixtures for the PyTorch device tests. Every test runs against the simulated card.

The card of the test session keeps fp16 as IEEE half (configs/ieee_fp16.json), so that fp16
kernels compare with CPU torch's fp16; the silicon's default, DLFloat16, has tests of its own
(test_dlfloat16.py) that run in processes with the default config. A SPYRE_CONFIG set by the
caller wins.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

ROOT = pathlib.Path(__file__).resolve().parents[2]
IEEE_FP16 = ROOT / "configs" / "ieee_fp16.json"
os.environ.setdefault("SPYRE_CONFIG", str(IEEE_FP16))  # before the card starts (on first use)

import pytest  # noqa: E402
import torch  # noqa: E402
import torch_spyre  # noqa: E402
import torch_spyre.debug  # noqa: E402
from torch_spyre import _C  # noqa: E402


@pytest.fixture(autouse=True)
def _fallback_warn():
    """Each test starts in the default fallback mode and cannot leak another one."""
    torch_spyre.set_cpu_fallback("warn")
    yield
    torch_spyre.set_cpu_fallback("warn")


# Under SPYRE_SANITIZE (the --slow tier runs the suite so), the tests whose findings are known and
# not in our kernel library run with that check suppressed (torch_spyre.debug.sanitize): test name
# -> (check, why). docs/debugging-guide.md, "The device sanitizer".
_PYTORCH_CIRCULAR_PAD = (
    "initcheck",
    "PyTorch's own aten::_pad_circular fills the wrap-around borders by copies out of the output it "
    "is writing, the first of which read border bytes a later copy writes",
)
SANITIZER_KNOWN = {
    "test_a_module_of_module_db_matches_cpu_forward_and_backward[nn.CircularPad1d]": _PYTORCH_CIRCULAR_PAD,
    "test_a_module_of_module_db_matches_cpu_forward_and_backward[nn.CircularPad2d]": _PYTORCH_CIRCULAR_PAD,
    "test_a_module_of_module_db_matches_cpu_forward_and_backward[nn.CircularPad3d]": _PYTORCH_CIRCULAR_PAD,
}


@pytest.fixture(autouse=True)
def _sanitizer_known(request):
    known = SANITIZER_KNOWN.get(request.node.name)
    checks = _C._sanitize_env().split(",") if known else []
    if not known or known[0] not in checks:
        yield
        return
    with torch_spyre.debug.sanitize(",".join(c for c in checks if c != known[0])):
        yield


@pytest.fixture
def cpu_gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


def card_share(memory: int, queues: int, clients: int = 4) -> tuple[int, int]:
    """The memory and queues this process sees of a card that has `memory` bytes and `queues`
    queues: all of it in-process; through spyre-simd, its slot (the daemon's default of four)."""
    if os.environ.get("SPYRE_TRANSPORT") != "socket":
        return memory, queues
    mib = 1 << 20
    return memory // clients // mib * mib, queues // clients


SPYRE_SIMD = ROOT / "build" / "simd" / "spyre-simd"


def clean_env() -> dict[str, str]:
    """This process's environment without any SPYRE_ or TORCH_SPYRE_ setting."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}


@contextlib.contextmanager
def simd_daemon(env: dict[str, str], sock: pathlib.Path, log: pathlib.Path, slots: int):
    """A spyre-simd cutting each card into `slots` slots (processes per card) on `sock` with `env`
    (its SPYRE_CONFIG), logging to `log`, for the block (yields its process); it must stop cleanly
    on SIGTERM at the end."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(SPYRE_SIMD), "--socket", str(sock), "--slots", str(slots)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            for _ in range(500):
                if sock.exists():
                    break
                time.sleep(0.02)
            assert sock.exists(), log.read_text()
            yield proc
        finally:
            stop_simd(proc)


def stop_simd(proc: subprocess.Popen) -> None:
    """Stops a spyre-simd of simd_daemon (it writes its configured reports as it exits); it must
    exit cleanly. Stopping it twice is harmless."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0


def run_python(code: str, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (a fresh simulator) and returns the finished process."""
    return _run([sys.executable, "-c", code], env, timeout)


def run_with_stats(
    code: str, tmp_path: pathlib.Path, env: dict[str, str] | None = None
) -> tuple[dict, subprocess.CompletedProcess]:
    """Runs `code` like run_python, with its stats file in `tmp_path`; asserts it succeeded and
    returns the stats (docs/architect-guide.md, "Stats") and the finished process."""
    stats = tmp_path / "stats.json"
    proc = run_python(code, env={**(env or {}), "SPYRE_STATS": str(stats)})
    assert proc.returncode == 0, proc.stderr
    return json.loads(stats.read_text()), proc


def run_script(
    path: pathlib.Path, env: dict[str, str] | None = None, timeout: int = 300, args: Sequence[str] = ()
) -> subprocess.CompletedProcess:
    """Runs a script file (with command-line `args`) in a fresh interpreter; returns the finished process."""
    return _run([sys.executable, str(path), *args], env, timeout)


def _run(argv: list[str], env: dict[str, str] | None, timeout: int) -> subprocess.CompletedProcess:
    # A fresh process for each test's own settings; the transport (and the daemon's binary) carry over,
    # so that the whole suite can run over the socket transport.
    keep = ("SPYRE_TRANSPORT", "SPYRE_SIMD")
    full_env = {k: v for k, v in os.environ.items() if k in keep or not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    full_env["SPYRE_CONFIG"] = str(IEEE_FP16)  # as this process's card, unless the test says otherwise
    full_env.update(env or {})
    # A run measured by its own stats, trace or capture simulates in its own process: a shared
    # daemon's card (and its reports) hold every client's work (docs/design-daemon.md).
    if any(k in full_env for k in ("SPYRE_STATS", "SPYRE_TRACE", "SPYRE_CAPTURE")):
        full_env["SPYRE_TRANSPORT"] = "inproc"
    return subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)


def pytest_configure(config):
    config.addinivalue_line("markers", "simd_env(fn): test_simd's daemon gets fn(tmp_path)'s environment")


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="run the long tiers: every OpInfo sample, long soaks")
