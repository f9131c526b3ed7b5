"""The architect's view of a run: where each core's time went (stall attribution per core and per
launch), the bytes and utilisation of every memory channel, ring link and PCIe direction, the
energy estimate, the functional mode, and the validation of the timing keys. Checked against the
work the program did (flops, bytes), identities that must hold cycle for cycle, and the energy
figures of the config."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import run_python, run_with_stats

CATEGORIES = ("compute", "memory", "sync", "issue")

WORKLOAD = (
    "import torch, torch_spyre\n"
    "torch_spyre.set_cpu_fallback('error')\n"
    "torch.manual_seed(0)\n"
    "a = torch.randn(1024, 1024).to('spyre')\n"
    "b = torch.randn(1024, 1024).to('spyre')\n"
    "c = a @ b\n"  # compute-bound
    "d = a + b\n"  # memory-bound
    "torch.spyre.synchronize()\n"
    "print(float(c.sum().cpu()), float(d.sum().cpu()))\n"
)


def _stats(tmp_path, code=WORKLOAD, config=None):
    env = {}
    if config is not None:
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps(config))
        env["SPYRE_CONFIG"] = str(cfg)
    stats, proc = run_with_stats(code, tmp_path, env=env)
    return stats, proc.stdout


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    return _stats(tmp_path_factory.mktemp("timed"), config={"chip": {"fp16_format": "ieee"}})


def test_every_cycle_of_a_core_is_attributed_once(timed):
    s, _ = timed
    card = s["cards"][0]
    total = {k: 0 for k in CATEGORIES}
    for core in card["cores"].values():
        stall = core["stall"]
        assert sum(stall[k] for k in CATEGORIES) == core["busy_cycles"]
        assert stall["idle"] == card["cycles"] - core["busy_cycles"]
        for k in CATEGORIES:
            total[k] += stall[k]
    for k in CATEGORIES:
        assert card["stall"][k] == total[k]
    # Cores that ran nothing are idle for the whole run.
    ncores = s["config"]["chip"]["cores"]
    busy = sum(c["busy_cycles"] for c in card["cores"].values())
    assert card["stall"]["idle"] == ncores * card["cycles"] - busy


def test_launches_carry_their_names_ops_and_where_their_time_went(timed):
    s, _ = timed
    card = s["cards"][0]
    launches = card["launches"]
    assert len(launches) == card["commands"]["launch"]
    assert sum(launch["flops"] for launch in launches) == card["flops"]
    by_op = {launch["op"]: launch for launch in launches}
    mm, add = by_op["aten::mm"], by_op["aten::add.Tensor"]
    assert mm["flops"] == 2 * 1024**3
    for launch in launches:
        span = launch["cores"] * (launch["end"] - launch["start"])
        stall = launch["stall"]
        assert sum(stall[k] for k in CATEGORIES) + stall["idle"] == span
        assert launch["queue"] == 0
    # A 1024-cube fp32 GEMM spends most of its core time computing; an elementwise add of two
    # 4 MiB tensors is mostly waiting for memory.
    assert max(CATEGORIES, key=lambda k: mm["stall"][k]) == "compute"
    assert max(CATEGORIES, key=lambda k: add["stall"][k]) == "memory"
    assert add["bytes_loaded"] == 2 * 1024 * 1024 * 4 and add["bytes_stored"] == 1024 * 1024 * 4


def test_channels_links_and_pcie_account_for_the_bytes(timed):
    s, _ = timed
    card = s["cards"][0]
    channels, links = card["memory_channels"], card["ring_links"]
    cfg = s["config"]
    assert len(channels) == cfg["memory"]["channels"]
    stops = 1 + cfg["chip"]["cores"] + cfg["memory"]["controllers"]
    assert len(links) == 2 * stops
    moved = sum(c["bytes_loaded"] + c["bytes_stored"] for c in card["cores"].values())
    dma = card["bytes"]["h2d"] + card["bytes"]["d2h"] + 2 * card["bytes"]["d2d"]
    memory_bytes = sum(c["bytes"] for c in channels)
    # Everything the cores and the DMA engine moved, plus program fetches (a few KiB per launch).
    assert moved + dma <= memory_bytes <= moved + dma + 64 * 1024 * card["commands"]["launch"]
    # Hashed interleaving spreads these big contiguous tensors evenly over the channels.
    assert max(c["bytes"] for c in channels) <= 1.05 * min(c["bytes"] for c in channels)
    for server in channels + links:
        assert 0 <= server["utilisation"] <= 1
    # Each link joins neighbouring stops, once per direction.
    assert {(link["from"], link["to"]) for link in links if link["direction"] == "cw"} == {
        (i, (i + 1) % stops) for i in range(stops)
    }
    # Every byte into or out of a core crossed at least one link.
    assert sum(link["bytes"] for link in links) >= moved
    # Host to card: the data in 256-byte packets with 24 bytes of overhead each, plus the
    # descriptors the firmware fetched.
    payload, overhead = cfg["pcie"]["max_payload_bytes"], cfg["pcie"]["packet_overhead_bytes"]
    h2d = card["bytes"]["h2d"]
    assert card["pcie"]["from_host"]["bytes"] >= h2d + h2d // payload * overhead


def test_energy_is_the_configured_cost_of_the_counted_work(timed):
    s, _ = timed
    card, e = s["cards"][0], s["config"]["energy"]
    energy = card["energy_j"]
    assert energy["pt"] == pytest.approx(card["flops"] * e["pt_pj_per_flop"] * 1e-12)
    assert energy["static"] == pytest.approx(e["static_watts"] * card["seconds"])
    memory_bytes = sum(c["bytes"] for c in card["memory_channels"])
    assert energy["memory"] == pytest.approx(memory_bytes * e["memory_pj_per_byte"] * 1e-12)
    parts = ("pt", "sfp", "memory", "ring", "pcie", "static")
    assert energy["total"] == pytest.approx(sum(energy[k] for k in parts))
    # The card is a 75 W part: averaged over the run, the estimate must stay below that.
    assert energy["total"] / card["seconds"] < 75


def test_stats_are_identical_run_to_run(tmp_path, timed):
    again, _ = _stats(tmp_path, config={"chip": {"fp16_format": "ieee"}})
    assert again == timed[0]


def test_functional_mode_gives_the_same_results_without_timing(tmp_path, timed):
    s_timed, out_timed = timed
    s, out = _stats(tmp_path, config={"chip": {"fp16_format": "ieee"}, "sim": {"mode": "functional"}})
    assert out == out_timed  # the same sums, to the last digit
    card, ref = s["cards"][0], s_timed["cards"][0]
    assert card["flops"] == ref["flops"]
    assert card["commands"] == ref["commands"]
    # No bookings on the fabric: one cycle per instruction, so far fewer cycles.
    assert card["cycles"] < ref["cycles"] / 5
    assert sum(c["bytes"] for c in card["memory_channels"]) == 0


@pytest.mark.parametrize(
    "config, message",
    [
        ({"sim": {"mode": "fast"}}, "sim.mode"),
        ({"sim": {"host_memory_bytes": 4096}}, "sim.host_memory_bytes"),
        ({"memory": {"channels": 12}}, "memory.channel_hash"),
        ({"memory": {"interleave_bytes": 100}}, "memory.interleave_bytes"),
        ({"memory": {"controllers": 32}}, "memory.controllers"),
        ({"energy": {"pt_pj_per_flop": -1}}, "energy"),
        ({"pcie": {"max_payload_bytes": 16}}, "pcie.max_payload_bytes"),
        ({"ring": {"latency_cycles": 16}}, "unknown key 'ring.latency_cycles'"),
    ],
)
def test_bad_timing_keys_are_named(tmp_path, config, message):
    cfg = tmp_path / "bad.json"
    cfg.write_text(json.dumps(config))
    proc = run_python("import torch, torch_spyre\ntorch.ones(1).to('spyre')\n", env={"SPYRE_CONFIG": str(cfg)})
    assert proc.returncode != 0
    assert message in proc.stderr


@pytest.mark.parametrize("cores", [1, 3])
def test_a_card_with_fewer_cores_than_memory_controllers_works(tmp_path, cores):
    code = (
        "import torch, torch_spyre\n"
        "a = torch.arange(64.0).reshape(8, 8)\n"
        "assert torch.equal((a.to('spyre') @ a.to('spyre')).cpu(), a @ a)\n"
    )
    s, _ = _stats(tmp_path, code=code, config={"chip": {"cores": cores}})
    controllers = s["config"]["memory"]["controllers"]
    assert len(s["cards"][0]["ring_links"]) == 2 * (1 + cores + controllers)


# Two streams, a training step and host work between submits: the host decides when commands
# arrive, so this is where a card whose time ran with the wall clock would drift.
PACED = (
    "import os, random, time, torch, torch_spyre\n"
    "torch_spyre.set_cpu_fallback('error')\n"
    "torch.manual_seed(0)\n"
    "jitter = random.Random(int(os.environ.get('JITTER', '0')))\n"
    "def think():\n"
    "    if os.environ.get('JITTER'): time.sleep(jitter.random() * 0.004)\n"
    "side = torch.spyre.Stream()\n"
    "model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64)).to('spyre')\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.05)\n"
    "x = torch.randn(128, 256).to('spyre')\n"
    "for step in range(3):\n"
    "    with torch.spyre.stream(side):\n"
    "        noise = torch.randn(64, 64, device='spyre') @ torch.randn(64, 64, device='spyre')\n"
    "        think()\n"
    "    loss = model(x).square().mean()\n"
    "    think()\n"
    "    loss.backward()\n"
    "    think()\n"
    "    opt.step()\n"
    "    opt.zero_grad()\n"
    "    torch.spyre.current_stream().wait_stream(side)\n"
    "    print(float(loss.cpu()), float(noise.sum().cpu()))\n"
)


def test_cycles_stats_and_trace_do_not_depend_on_the_host(tmp_path):
    """A host-paced card (`sim.host_paced`, the default) advances time only while the host waits:
    host think time, sleeps and other processes loading the machine change no cycle, stat or
    trace event."""
    runs = []
    for name, env, load in (("quiet", {}, 0), ("jittered", {"JITTER": "1"}, 2), ("loaded", {"JITTER": "2"}, 3)):
        stats, trace = tmp_path / f"{name}.json", tmp_path / f"{name}.trace.json"
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
        try:
            proc = run_python(PACED, env={"SPYRE_STATS": str(stats), "SPYRE_TRACE": str(trace), **env})
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        assert proc.returncode == 0, proc.stderr
        runs.append((proc.stdout, json.loads(stats.read_text()), trace.read_bytes()))
    quiet = runs[0]
    assert quiet[1]["cards"][0]["commands"]["launch"] > 20
    for other in runs[1:]:
        assert other[0] == quiet[0]
        assert other[1] == quiet[1]
        assert other[2] == quiet[2]
