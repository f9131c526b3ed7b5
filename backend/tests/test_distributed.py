"""The ``spyre`` backend of torch.distributed, in several processes launched by torchrun.

distributed_checks.py runs every collective on spyre tensors and on CPU tensors through Gloo, the
reference, with the same inputs; examples/distributed/ddp_llama.py trains a small Llama with
DistributedDataParallel, whose losses must be those of one process training on the whole batch
on the CPU.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
from conftest import clean_env, simd_daemon, stop_simd

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHECKS = ROOT / "backend" / "tests" / "distributed_checks.py"
DDP = ROOT / "examples" / "distributed" / "ddp_llama.py"
TP = ROOT / "examples" / "distributed" / "tp_llama.py"
SERVER4 = ROOT / "configs" / "server4.json"


def torchrun(nproc: int, script: pathlib.Path, *args: str, env: dict[str, str] | None = None, timeout: int = 600):
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", str(script)]
    full = {**os.environ, "TORCH_SPYRE_CPU_FALLBACK": "error", **(env or {})}
    return subprocess.run([*argv, *args], capture_output=True, text=True, env=full, timeout=timeout, cwd=ROOT)


def cpu_losses(tmp_path: pathlib.Path) -> list[float]:
    """The DDP example's losses in one process on the whole batch, on the CPU."""
    out = tmp_path / "cpu.json"
    argv = [sys.executable, str(DDP), "--single", "--device", "cpu", "--steps", "3", "--json", str(out)]
    cpu = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert cpu.returncode == 0, cpu.stderr[-4000:]
    return json.loads(out.read_text())["losses"]


@pytest.mark.parametrize("backend", ["cpu:gloo,spyre:spyre", "spyre"])
def test_every_collective_and_its_async_form_matches_gloo(tmp_path, backend):
    # Three ranks: odd, so that uneven splits and a ring of more than two are exercised.
    p = torchrun(3, CHECKS, str(tmp_path), env={"CHECKS_BACKEND": backend})
    assert p.returncode == 0, p.stderr[-4000:]
    for rank in range(3):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert report["failures"] == [], report["failures"][:10]
        # 3 dtypes x (2 forms x 26 collectives + 4 point-to-point) + the future check
        assert report["checks"] == 217


def test_ddp_over_four_processes_gives_the_losses_of_one_cpu_process(tmp_path):
    out = tmp_path / "ddp.json"
    p = torchrun(4, DDP, "--steps", "3", "--json", str(out))
    assert p.returncode == 0, p.stderr[-4000:]
    spyre = json.loads(out.read_text())
    assert spyre["world"] == 4
    assert spyre["losses"] == pytest.approx(cpu_losses(tmp_path), rel=1e-5)
    assert spyre["losses"][-1] < spyre["losses"][0]  # it trains


def test_tensor_parallel_llama_over_four_cards_gives_the_cpu_logits_and_tokens(tmp_path):
    # A server of four cards (configs/server4.json): each process takes the one its LOCAL_RANK
    # names, through the DeviceMesh.
    out = tmp_path / "tp.json"
    p = torchrun(4, TP, "--new-tokens", "8", "--json", str(out), env={"SPYRE_CONFIG": str(SERVER4)})
    assert p.returncode == 0, p.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["world"] == 4
    assert report["max_logit_diff"] < 1e-4
    assert report["tokens_equal"]


@pytest.fixture
def server(tmp_path, request):
    """One spyre-simd simulating a server of four cards, each process of a torchrun its client
    (its own card by LOCAL_RANK): yields the clients' environment, the stats file, and a call
    that stops the daemon, which writes the stats as it exits. An indirect parameter sets the
    cards' hardware queues (firmware.queues) and the daemon's slots per card, which share them:
    (16, 1) by default, each rank's card whole."""
    sock, stats = tmp_path / "simd.sock", tmp_path / "server_stats.json"
    config = tmp_path / "server4.json"
    queues, slots = getattr(request, "param", (16, 1))
    cfg = {"sim": {"devices": 4}, "firmware": {"queues": queues}, "output": {"stats_path": str(stats)}}
    config.write_text(json.dumps(cfg))
    env = {**clean_env(), "SPYRE_CONFIG": str(config), "SPYRE_SIMD_SOCKET": str(sock)}
    with simd_daemon(dict(env), sock, tmp_path / "simd.log", slots=slots) as daemon:
        yield {**env, "SPYRE_TRANSPORT": "socket"}, stats, lambda: stop_simd(daemon)


# Four slots per card: 4 queues per client: the collective's two streams and the caller's are
# queues of their own; 2: the two collective streams are one queue (one semaphore: the 8-rank
# benchmark once summed wrongly when its schedule counted two); 1: every stream is the one queue.
@pytest.mark.parametrize("server", [(16, 4), (8, 4), (4, 4)], indirect=True, ids=["4 queues", "2 queues", "1 queue"])
def test_collectives_on_the_cards_of_one_server_match_gloo(tmp_path, server):
    # Three ranks, each a client of one spyre-simd driving its own card: the collectives run as
    # peer-to-peer DMA and the cards' adds (ring, tree, and direct copies); send and recv, and
    # what the cards cannot take (a view that is not contiguous, empty tensors), through Gloo.
    env, stats, stop = server
    env = {**env, "CHECKS_BACKEND": "spyre", "CHECKS_ON_CARDS": "1"}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=3",
            str(CHECKS),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env={**env, "TORCH_SPYRE_CPU_FALLBACK": "error"},
        timeout=900,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    for rank in range(3):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert report["failures"] == [], report["failures"][:10]
        # The ring's sizes, in 3 dtypes x 2 forms: all_reduce and reduce x 5 ops, broadcast, and
        # the 4 forms of all_gather and reduce_scatter.
        assert report["checks"] == 217 + 3 * 2 * (5 + 5 + 1 + 4)
        # On the cards, in 3 dtypes x 2 forms, of contiguous non-empty tensors: all_reduce and
        # reduce (2 sizes x 5 ops, but avg of int64), broadcast and the 4 forms of all_gather and
        # reduce_scatter (2 sizes each), all_to_all in both forms, gather and scatter, and the
        # coalesced all_reduce, all_gather_single and reduce_scatter_single (2 tensors each); and
        # the future check. (Point to point goes through Gloo.)
        assert report["on_cards"] == 3 * 2 * (2 * 5 + 2 * 5 + 2 + 4 * 2 + 4 + 3 * 2) - 2 * 2 * 2 + 1
    # The daemon's stats, written as it stops: the rings' bytes crossed the switch, card to card (a
    # ring of 3 sends 2 x 2/3 of the buffer from each card; 10 rings of 140000 elements). (A client
    # asking for them instead once waited out its timeout behind the ranks' slots being scrubbed.)
    stop()
    switch = json.loads(stats.read_text())["server"]["switch"]["bytes"]
    assert switch > 3 * 2 * 2 / 3 * 140_000 * (4 + 2 + 8) * 2 + 2 * 140_000 * (4 + 2 + 8) * 2


def test_ddp_on_the_cards_of_one_server_gives_the_losses_of_one_cpu_process(tmp_path, server):
    env, _, _ = server
    out = tmp_path / "ddp.json"
    p = torchrun(4, DDP, "--steps", "3", "--json", str(out), env=env)
    assert p.returncode == 0, p.stderr[-4000:]
    spyre = json.loads(out.read_text())
    assert spyre["world"] == 4 and spyre["on_cards"] > 0
    assert spyre["losses"] == pytest.approx(cpu_losses(tmp_path), rel=1e-5)


def test_tensor_parallel_llama_on_the_cards_of_one_server_gives_the_cpu_logits_and_tokens(tmp_path, server):
    # The row-parallel projections' all-reduces (DTensor's functional collectives) run on the cards.
    env, _, _ = server
    out = tmp_path / "tp.json"
    p = torchrun(4, TP, "--new-tokens", "8", "--json", str(out), env=env)
    assert p.returncode == 0, p.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["world"] == 4 and report["on_cards"] > 0
    assert report["max_logit_diff"] < 1e-4
    assert report["tokens_equal"]


def _sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60)


@pytest.fixture
def two_hosts():
    """Two network namespaces joined by a veth pair, standing for two hosts: (name, address,
    interface) of each. Skips where namespaces cannot be made (not root, no iproute2)."""
    tag = f"sp{os.getpid() % 100000}"
    hosts = [(f"{tag}a", "10.77.0.1", f"{tag}va"), (f"{tag}b", "10.77.0.2", f"{tag}vb")]
    try:
        for name, _, _ in hosts:
            _sh("ip", "netns", "add", name)
    except (OSError, subprocess.CalledProcessError) as e:
        for name, _, _ in hosts:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        pytest.skip(f"cannot make network namespaces here: {getattr(e, 'stderr', e)}")
    try:
        _sh("ip", "link", "add", hosts[0][2], "type", "veth", "peer", "name", hosts[1][2])
        for name, address, interface in hosts:
            _sh("ip", "link", "set", interface, "netns", name)
            _sh("ip", "-n", name, "addr", "add", f"{address}/24", "dev", interface)
            _sh("ip", "-n", name, "link", "set", interface, "up")
            _sh("ip", "-n", name, "link", "set", "lo", "up")
        yield hosts
    finally:
        for name, _, _ in hosts:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_ddp_split_over_two_hosts_gives_the_same_losses(tmp_path, two_hosts):
    # Two processes in each of two network namespaces; Gloo carries the bytes between them.
    out = tmp_path / "ddp.json"
    a_address = two_hosts[0][1]
    runs = []
    for node, (name, _, interface) in enumerate(two_hosts):
        argv = ["ip", "netns", "exec", name, "env", f"GLOO_SOCKET_IFNAME={interface}", "TORCH_SPYRE_CPU_FALLBACK=error"]
        argv += [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}"]
        argv += ["--nproc-per-node=2", f"--master-addr={a_address}", "--master-port=29611", str(DDP)]
        argv += ["--steps", "3", "--json", str(out)]
        runs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT))
    for p in runs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-4000:]
    split = json.loads(out.read_text())
    assert split["world"] == 4
    assert split["losses"] == pytest.approx(cpu_losses(tmp_path), rel=1e-5)
