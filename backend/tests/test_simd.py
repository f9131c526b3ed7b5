"""spyre-simd, the simulator daemon behind SPYRE_TRANSPORT=socket: a client killed mid-run leaves
the daemon serving and its card usable by the next client; a second client while one holds the
card, and a client asking for another config, are refused with clear reasons. Each test starts its
own daemon on a private socket and stops it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import IEEE_FP16, ROOT

SPYRE_SIMD = ROOT / "build" / "simd" / "spyre-simd"

WORK = """
import sys, torch, torch_spyre
x = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
print("ready", flush=True)
for i in range(int(sys.argv[1])):
    y = (x.to("spyre") @ x.to("spyre")).cpu()
torch.testing.assert_close(y, x @ x, rtol=1e-4, atol=1e-4)
print("ok", flush=True)
"""


@pytest.fixture()
def daemon(tmp_path):
    """A spyre-simd serving the tests' config on a private socket; yields the environment that
    reaches it."""
    sock = tmp_path / "simd.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    env.update(SPYRE_CONFIG=str(IEEE_FP16), SPYRE_SIMD_SOCKET=str(sock), SPYRE_LOG_LEVEL="info")
    log = open(tmp_path / "simd.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([str(SPYRE_SIMD), "--socket", str(sock)], env=env, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(500):
        if sock.exists():
            break
        time.sleep(0.02)
    assert sock.exists(), (tmp_path / "simd.log").read_text()
    env["SPYRE_TRANSPORT"] = "socket"
    env["SPYRE_LOG_LEVEL"] = "warn"
    try:
        yield env, tmp_path / "simd.log"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        log.close()


def _client(env, loops: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WORK, str(loops)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_client_killed_mid_run_leaves_the_card_to_the_next(daemon):
    env, log = daemon
    victim = _client(env, 10_000)
    assert victim.stdout.readline().strip() == "ready"
    time.sleep(1.0)  # well inside its matmuls
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    survivor = _client(env, 3)
    out, err = survivor.communicate(timeout=120)
    assert survivor.returncode == 0, err
    assert out.split() == ["ready", "ok"]
    text = log.read_text()
    assert "client 1 gone" in text and "client 2 connected" in text


def test_a_second_client_and_another_config_are_refused_by_name(daemon, tmp_path):
    env, _ = daemon
    holder = _client(env, 10_000)
    try:
        assert holder.stdout.readline().strip() == "ready"
        second = subprocess.run(
            [sys.executable, "-c", WORK, "1"], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert second.returncode != 0
        assert f"in use by pid {holder.pid}" in second.stderr
    finally:
        holder.kill()
        holder.wait()
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"chip": {"fp16_format": "ieee", "cores": 8}}))
    mismatch = subprocess.run(
        [sys.executable, "-c", WORK, "1"],
        env={**env, "SPYRE_CONFIG": str(other)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert mismatch.returncode != 0
    assert "simulates config" in mismatch.stderr and "$SPYRE_SIMD_SOCKET" in mismatch.stderr
