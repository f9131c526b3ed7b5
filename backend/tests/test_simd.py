"""spyre-simd, the simulator daemon behind SPYRE_TRANSPORT=socket: clients share its card, each in
its own slot (queues, device-memory window, IOMMU domain); a client that reaches for another's
memory gets an error and the other's data is untouched; a client killed mid-run leaves the others
running, and its slot comes back scrubbed (spyre-smi shows it); each injected fault (ECC, hung
core, DMA error, link down) and each malformed descriptor field fails the work it hits while the
other client goes on; a client past the slots, and one asking for another config, are refused
with clear reasons. Each test starts its own daemon on a
private socket (two client slots) and stops it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from conftest import IEEE_FP16, SPYRE_SIMD, clean_env, simd_daemon

WORK = """
import sys, torch, torch_spyre
x = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
print("ready", flush=True)
for i in range(int(sys.argv[1])):
    y = (x.to("spyre") @ x.to("spyre")).cpu()
torch.testing.assert_close(y, x @ x, rtol=1e-4, atol=1e-4)
print("ok", flush=True)
"""


def _auto_start_env(config, sock) -> dict:
    """An environment whose first client starts spyre-simd on its own on `sock`, for `config`."""
    env = clean_env()
    env.update(
        SPYRE_CONFIG=str(config), SPYRE_TRANSPORT="socket", SPYRE_SIMD=str(SPYRE_SIMD), SPYRE_SIMD_SOCKET=str(sock)
    )
    return env


@pytest.fixture()
def daemon(tmp_path, request):
    """A spyre-simd serving the tests' config (or the config and faults of the test's `simd_env`
    mark) on a private socket; yields the environment that reaches it."""
    sock = tmp_path / "simd.sock"
    env = clean_env()
    env.update(SPYRE_CONFIG=str(IEEE_FP16), SPYRE_SIMD_SOCKET=str(sock), SPYRE_LOG_LEVEL="info")
    if (mark := request.node.get_closest_marker("simd_env")) is not None:
        env.update(mark.args[0](tmp_path))
    with simd_daemon(dict(env), sock, tmp_path / "simd.log", slots=2):
        env["SPYRE_TRANSPORT"] = "socket"
        env["SPYRE_LOG_LEVEL"] = "warn"
        yield env, tmp_path / "simd.log"


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


def test_a_client_past_the_slots_and_another_config_are_refused_by_name(daemon, tmp_path):
    env, _ = daemon
    holders = [_client(env, 10_000) for _ in range(2)]
    try:
        for h in holders:
            assert h.stdout.readline().strip() == "ready"
        third = subprocess.run(
            [sys.executable, "-c", WORK, "1"], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert third.returncode != 0
        assert "all 2 slot(s) of card 0 are in use" in third.stderr
        assert str(holders[0].pid) in third.stderr and str(holders[1].pid) in third.stderr
    finally:
        for h in holders:
            h.kill()
            h.wait()

    def client_with(config: dict | str) -> subprocess.CompletedProcess:
        path = tmp_path / f"config{len(list(tmp_path.glob('config*.json')))}.json"
        path.write_text(config if isinstance(config, str) else json.dumps(config))
        return subprocess.run(
            [sys.executable, "-c", WORK, "1"],
            env={**env, "SPYRE_CONFIG": str(path)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    mismatch = client_with({"chip": {"fp16_format": "ieee", "cores": 8}})
    assert mismatch.returncode != 0
    assert "simulates config" in mismatch.stderr and "$SPYRE_SIMD_SOCKET" in mismatch.stderr
    # The driver reads no config: the daemon parses the client's. The same config written
    # otherwise (another file, keys reordered, spaced out) is the same card ...
    alike = client_with(json.dumps(dict(reversed(json.loads(IEEE_FP16.read_text()).items())), indent=4))
    assert alike.returncode == 0, alike.stderr
    # ... and one that does not load is refused with the config's own reason.
    refused = client_with({"chip": {"cores": 15.5}})
    assert refused.returncode != 0
    assert "chip.cores" in refused.stderr and "15.5" in refused.stderr and "config2.json" in refused.stderr


def test_clients_that_start_the_daemon_at_once_share_one(tmp_path):
    """Three clients find no daemon at the same moment and each starts one; one daemon wins the
    socket's lock, the others give way (exit 0), and every client is served by the winner, even
    while it is still starting."""
    env = _auto_start_env(IEEE_FP16, tmp_path / "race.sock")
    clients = [_client(env, 1) for _ in range(3)]
    for c in clients:
        out, err = c.communicate(timeout=180)
        assert c.returncode == 0, err
        assert out.split() == ["ready", "ok"]


def test_a_daemon_that_refuses_its_config_at_start_is_reported_at_once(tmp_path):
    """The first client starts spyre-simd on its own; when the daemon stops at its start (here: a
    config it refuses), the client says why from the daemon's log instead of waiting 30 s."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"chip": {"cores": 4294967297}}))
    env = _auto_start_env(bad, tmp_path / "auto.sock")
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-c", "import torch, torch_spyre; torch.zeros(1, device='spyre')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode != 0
    assert "spyre-simd stopped at its start" in r.stderr and "chip.cores" in r.stderr, r.stderr
    assert time.monotonic() - start < 20


# A client that keeps a tensor of 7s and says where it is; on "check" it verifies the tensor and
# runs a matmul, on "quit" it exits. The layouts of the raw descriptors and the program below are
# Descriptor (hw/include/spyre/hw/commands.h) and ProgramHeader and Instr (hw/include/spyre/hw/isa.h).
OWNER = """
import json, os, sys, torch, torch_spyre
from torch_spyre.debug import device_address
x = torch.full((4096,), 7.0, device="spyre")
torch.spyre.synchronize()
mine = [c for c in torch_spyre.smi.daemon_status()["clients"] if c["pid"] == os.getpid()][0]
print(json.dumps({"addr": device_address(x), "client": mine["client"], "base": mine["memory_base"],
                  "bytes": mine["memory_bytes"]}), flush=True)
for line in sys.stdin:
    if line.strip() == "check":
        ok = bool((x.cpu() == 7).all())
        a = torch.arange(12.0).reshape(3, 4)
        torch.testing.assert_close((a.to("spyre") @ a.t().to("spyre")).cpu(), a @ a.t())
        print("intact" if ok else "CHANGED", flush=True)
    elif line.strip() == "quit":
        break
"""

INTRUDER = """
import json, struct, sys, torch, torch_spyre
from torch_spyre.debug import device_address, submit_raw_descriptor
victim = json.loads(sys.argv[1])
mine = torch.zeros(4096, device="spyre")
torch.spyre.synchronize()
own = device_address(mine)

def copy(src, dst, size, flags=0):
    return struct.pack("<BBHIQ6Q", 1, flags, 0, 0, 0, src, dst, size, 0, 0, 0)

def report(what, r):
    print(what, "|", r["ok"], "|", r["error"], "|", r["field"], flush=True)

report("read", submit_raw_descriptor(copy(victim["addr"], own, 64)))
report("write", submit_raw_descriptor(copy(own, victim["addr"], 64)))
report("read host", submit_raw_descriptor(copy((victim["client"] << 44) + 0x1000, own, 64, flags=1)))
# A program in this client's memory that loads 64 bytes from the victim's tensor.
header = struct.pack("<IHHIIII2I", 0x50595053, 2, 1, 2, 64, 0, 0, 0, 0)
table = struct.pack("<I", 0).ljust(32, b"\\0")
load = struct.pack("<BBBBIQQII", 0x10, 0, 0, 0, 0, victim["addr"], 64, 1, 64)
program = torch.frombuffer(bytearray(header + table + load + bytes(32)), dtype=torch.uint8).to("spyre")
torch.spyre.synchronize()
launch = struct.pack("<BBHIQ6Q", 2, 0, 0, 0, 0, device_address(program), program.numel(), 0, 0, 1, 0)
report("load", submit_raw_descriptor(launch))
launch_theirs = struct.pack("<BBHIQ6Q", 2, 0, 0, 0, 0, victim["addr"] & ~63, 4096, 0, 0, 1, 0)
report("launch theirs", submit_raw_descriptor(launch_theirs))
a = torch.arange(12.0).reshape(3, 4)
torch.testing.assert_close((a.to("spyre") @ a.t().to("spyre")).cpu(), a @ a.t())
print("own work ok", flush=True)
"""


def _interactive(env, code: str, *args: str) -> subprocess.Popen:
    """A client running `code` that reads its orders from stdin and answers on stdout."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _owner(env) -> tuple[subprocess.Popen, dict]:
    proc = _interactive(env, OWNER)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, json.loads(line)


def test_a_client_that_reaches_for_another_clients_memory_gets_an_error(daemon):
    env, _ = daemon
    owner, where = _owner(env)
    try:
        assert where["base"] <= where["addr"] < where["base"] + where["bytes"]
        proc = subprocess.run(
            [sys.executable, "-c", INTRUDER, json.dumps(where)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        seen = {line.split(" | ")[0]: line.split(" | ")[1:] for line in proc.stdout.splitlines() if " | " in line}
        # Device ranges outside its window are out of range for its queues; another client's
        # IOVAs are outside its IOMMU domain; its cores fault on a load from the other window.
        assert seen["read"] == ["False", "address out of device memory", "copy.src"]
        assert seen["write"] == ["False", "address out of device memory", "copy.dst"]
        assert seen["read host"] == ["False", "address not mapped for the queue (DMA fault)", "copy.src"]
        assert seen["load"] == ["False", "address not mapped for the queue (DMA fault)", "launch.program"]
        assert seen["launch theirs"] == ["False", "address out of device memory", "launch.program"]
        assert "own work ok" in proc.stdout
        owner.stdin.write("check\n")
        owner.stdin.flush()
        assert owner.stdout.readline().strip() == "intact"
    finally:
        owner.stdin.write("quit\n")
        owner.stdin.flush()
        owner.wait(timeout=60)


def test_a_client_killed_mid_run_leaves_the_other_intact_and_its_slot_scrubbed(daemon):
    env, log = daemon
    from torch_spyre import smi

    keeper, where_keeper = _owner(env)
    victim, where_victim = _owner(env)
    try:
        socket = env["SPYRE_SIMD_SOCKET"]
        before = smi.daemon_status(socket)
        pids = {c["pid"] for c in before["clients"]}
        assert {keeper.pid, victim.pid} <= pids
        # The victim is killed while it works (it keeps its tensor; a matmul is in flight).
        victim.stdin.write("check\n" * 50)
        victim.stdin.flush()
        time.sleep(0.5)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        for _ in range(200):
            after = smi.daemon_status(socket)
            if victim.pid not in {c["pid"] for c in after["clients"]}:
                break
            time.sleep(0.05)
        freed = [c for c in after["clients"] if c["memory_base"] == where_victim["base"]][0]
        assert freed["client"] == 0 and freed["pid"] == 0  # its slot and memory window are free
        assert after["scrubs"] == before["scrubs"] + 1
        assert "free" in smi.daemon_report(socket)
        keeper.stdin.write("check\n")
        keeper.stdin.flush()
        assert keeper.stdout.readline().strip() == "intact"
        # The next client gets the dead one's window, and finds it scrubbed: where the victim kept
        # its 7s, it reads zeros.
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import torch\n"
                "from torch_spyre.debug import device_address\n"
                "x = torch.empty(4096, device='spyre')\n"
                "print(device_address(x), int((x.cpu() == 0).sum()))",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert probe.returncode == 0, probe.stderr
        addr, zeros = (int(v) for v in probe.stdout.split())
        assert addr == where_victim["addr"]
        assert zeros == 4096
    finally:
        keeper.stdin.write("quit\n")
        keeper.stdin.flush()
        keeper.wait(timeout=60)
    assert "client" in log.read_text()


# Runs small matmuls until told to stop, checking each; then says how many it ran.
BYSTANDER = """
import sys, threading, torch
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
a = torch.arange(12.0).reshape(3, 4)
want = a @ a.t()
n = 0
while True:
    torch.testing.assert_close((a.to("spyre") @ a.t().to("spyre")).cpu(), want)
    n += 1
    if n == 1:
        print("ready", flush=True)
    if stop.is_set():
        break
print("ran", n, flush=True)
"""

# The client that meets the fault: a copy back from the card (an ECC error when its window is
# poisoned), a kernel over a big tensor (the watchdog when a core hangs), and a malformed
# descriptor of each kind; each prints its error. Layouts: Descriptor, hw/include/spyre/hw/commands.h.
VICTIM = """
import os, struct, torch, torch_spyre
from torch_spyre.debug import submit_raw_descriptor
x = torch.arange(1 << 20, dtype=torch.float32)
for what, work in [("copy", lambda t: t.cpu()), ("kernel", lambda t: (t * 2).cpu())]:
    try:
        work(x.to("spyre"))
        print(what, "| ok", flush=True)
    except RuntimeError as e:
        print(what, "|", str(e).splitlines()[0], flush=True)
def d(opcode, flags=0, operands=(0, 0, 0, 0, 0, 0), reserved=0):
    return struct.pack("<BBHIQ6Q", opcode, flags, 0, reserved, 0, *operands)
# Device addresses in this client's own window, which starts at `base`.
base = [c for c in torch_spyre.smi.daemon_status()["clients"] if c["pid"] == os.getpid()][0]["memory_base"]
p = base + 65536  # a launch's program address in the window (what lies there is never run)
for raw in [d(99), d(1, operands=(base, base + (1 << 40), 64, 0, 0, 0)), d(1, operands=(base, base, 0, 0, 0, 0)),
            d(1, 1, (0xDEAD000, base + 4096, 64, 0, 0, 0)), d(1, operands=(base, base, 64, 0, 0, 0), reserved=5),
            d(2, operands=(p, 4096, 0, 0, 0, 0)), d(0, flags=4),
            d(1, operands=(base - 4096, base, 64, 0, 0, 0)), d(2, operands=(p + 8, 4096, 0, 0, 1, 0)),
            d(2, operands=(p, 4097, 0, 0, 1, 0)), d(2, operands=(p, 4096, p + 4, 8, 1, 0)),
            d(2, operands=(p, 4096, p, 12, 1, 0)), d(2, operands=(p, 4096, 0, 0, 1, 1 << 50)),
            d(3, operands=(0x1004, 0, 0, 0, 0, 0)), d(4, operands=(base + 4, 1, 0, 0, 0, 0)),
            d(4, operands=(base - 8, 1, 0, 0, 0, 0))]:
    r = submit_raw_descriptor(raw)
    print("descriptor |", r["error"], "|", r["field"], flush=True)
"""


# A client that shares its window of card 1 (an IPC handle, as torch.distributed's collectives on
# the cards do), keeps a tensor of 7s there, and on "check" prints its first values.
SHARER = """
import json, sys, torch, torch_spyre
from torch_spyre import _C
from torch_spyre.debug import device_address
x = torch.full((4096,), 7.0, device="spyre:1")
torch.spyre.synchronize(1)
print(json.dumps({"handle": _C._ipc_export(1), "addr": device_address(x)}), flush=True)
for line in sys.stdin:
    if line.strip() == "check":
        print(" ".join(str(v) for v in x[62:66].cpu().tolist()), flush=True)
    elif line.strip() == "quit":
        break
"""

# A client of card 0 that opens the sharer's handle and copies 64 floats of 3s into its tensor,
# once per "copy", printing what happened.
OPENER = """
import json, sys, torch, torch_spyre
from torch_spyre import _C
theirs = json.loads(sys.argv[1])
def attempt(what, fn):
    try:
        fn()
        print(what, "| ok", flush=True)
    except Exception as e:
        print(what, "|", type(e).__name__, "|", str(e).splitlines()[0], flush=True)
attempt("bogus handle", lambda: _C._ipc_open(0, 12345))
attempt("same card", lambda: _C._ipc_open(1, theirs["handle"]))
iova, card, base, size = _C._ipc_open(0, theirs["handle"])
print("window", card, base <= theirs["addr"] < base + size, flush=True)
y = torch.full((64,), 3.0, device="spyre:0")
attempt("past the window", lambda: _C._copy_to_iova_async(iova + size, y[:1]))
def copy():
    _C._copy_to_iova_async(iova + theirs["addr"] - base, y)
    torch.spyre.synchronize(0)
for line in sys.stdin:
    if line.strip() == "copy":
        attempt("copy", copy)
        a = torch.arange(12.0).reshape(3, 4)
        torch.testing.assert_close((a.to("spyre:0") @ a.t().to("spyre:0")).cpu(), a @ a.t())
        print("own work ok", flush=True)
    elif line.strip() == "quit":
        break
"""


def _two_cards(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"chip": {"fp16_format": "ieee"}, "sim": {"devices": 2}}))
    return {"SPYRE_CONFIG": str(config)}


def _order(proc: subprocess.Popen, line: str, answers: int = 1) -> list[str]:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    return [proc.stdout.readline().strip() for _ in range(answers)]


@pytest.mark.simd_env.with_args(_two_cards)
def test_memory_one_client_shares_is_reached_by_the_handle_only_until_it_leaves(daemon):
    env, _ = daemon
    sharer = _interactive(env, SHARER)
    line = sharer.stdout.readline()
    assert line, sharer.stderr.read()
    theirs = json.loads(line)
    opener = _interactive(env, OPENER, line)
    try:
        said = [opener.stdout.readline().strip() for _ in range(4)]
        assert said[0].startswith("bogus handle | IndexError | ") and "no shared memory has handle" in said[0]
        assert said[1].startswith("same card | IndexError | ") and "is on card 1 itself" in said[1]
        assert said[2] == "window 1 True"
        assert said[3].startswith("past the window | ValueError | ") and "outside every window" in said[3]
        # The copy lands in the other client's tensor, card 0 to card 1 across the switch.
        assert _order(opener, "copy", 2) == ["copy | ok", "own work ok"]
        assert _order(sharer, "check") == ["3.0 3.0 7.0 7.0"]
        # Once the sharer has left, its window is no longer reachable: the next copy faults, and
        # the opener's own work goes on.
        _order(sharer, "quit", 0)
        assert sharer.wait(timeout=60) == 0
        again = _order(opener, "copy", 2)
        assert again[0].startswith("copy | RuntimeError") and "DMA fault" in again[0], again
        assert again[1] == "own work ok"
        del theirs
    finally:
        for p in (sharer, opener):
            if p.poll() is None:
                p.stdin.write("quit\n")
                p.stdin.flush()
                p.wait(timeout=60)


# A client of card argv[1]: says what it sees of that card, works on it, and quits on "quit".
CARD_HOLDER = """
import json, sys, torch, torch_spyre
card = int(sys.argv[1])
info = torch_spyre.sim.device_info(card)
a = torch.arange(12.0).reshape(3, 4)
torch.testing.assert_close((a.to(card) @ a.t().to(card)).cpu(), a @ a.t())
print(json.dumps({"queues": info["queues"], "memory_bytes": info["memory_bytes"], "memory_base": info["memory_base"]}),
      flush=True)
for line in sys.stdin:
    if line.strip() == "quit":
        break
"""


def test_with_one_slot_per_card_each_process_holds_a_whole_card_and_a_taken_card_is_refused(tmp_path):
    # torchrun's ranks on one server, one card each: `--slots 1` gives each process that opens a
    # card all its queues and memory; the cards it does not open stay free for the others. A
    # process that opens a card another holds is refused, naming the card and the holder.
    sock = tmp_path / "simd.sock"
    env = {**clean_env(), **_two_cards(tmp_path), "SPYRE_SIMD_SOCKET": str(sock)}
    with simd_daemon(dict(env), sock, tmp_path / "simd.log", slots=1):
        env["SPYRE_TRANSPORT"] = "socket"
        card = torch_spyre_status(env)["cards"][0]
        whole = {"queues": len(card["queues"]), "memory_bytes": card["memory_bytes"], "memory_base": 0}
        assert whole["queues"] == 16
        holders = [_interactive(env, CARD_HOLDER, str(card)) for card in (0, 1)]
        try:
            for h in holders:
                line = h.stdout.readline()
                assert line, h.stderr.read()
                assert json.loads(line) == whole
            status = torch_spyre_status(env)
            held = {(c["card"], c["pid"]) for c in status["clients"]}
            assert held == {(0, holders[0].pid), (1, holders[1].pid)}
            third = subprocess.run(
                [sys.executable, "-c", CARD_HOLDER, "1"], env=env, capture_output=True, text=True, timeout=120
            )
            assert third.returncode != 0
            assert "all 1 slot(s) of card 1 are in use" in third.stderr and str(holders[1].pid) in third.stderr
            # Card 1 comes back whole once its holder leaves.
            _order(holders[1], "quit", 0)
            assert holders[1].wait(timeout=60) == 0
            again = subprocess.run(
                [sys.executable, "-c", CARD_HOLDER, "1"],
                env=env,
                input="quit\n",
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert again.returncode == 0, again.stderr
            assert json.loads(again.stdout) == whole
        finally:
            for h in holders:
                if h.poll() is None:
                    _order(h, "quit", 0)
                    h.wait(timeout=60)


def torch_spyre_status(env: dict) -> dict:
    """The daemon's state as spyre-smi reads it, from a process of `env`."""
    code = "import json, torch_spyre; print(json.dumps(torch_spyre.smi.daemon_status()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def _ecc_in_the_second_slot(tmp_path):
    # Two slots of 56 GiB: the second client's window starts at 56 GiB; its first 256 MiB read as
    # uncorrectable.
    return {"SPYRE_FAULTS": json.dumps({"ecc_addr": 56 << 30, "ecc_bytes": 256 << 20})}


def _a_hung_core(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"chip": {"fp16_format": "ieee"}, "firmware": {"watchdog_cycles": 1_000_000}}))
    return {"SPYRE_CONFIG": str(config), "SPYRE_FAULTS": json.dumps({"hang_core": 5})}


def _fault_and_bystander(env):
    bystander = _interactive(env, BYSTANDER)
    try:
        assert bystander.stdout.readline().strip() == "ready", bystander.stderr.read()
        victim = subprocess.run(
            [sys.executable, "-c", VICTIM], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert victim.returncode == 0, victim.stderr
        bystander.stdin.write("stop\n")
        bystander.stdin.flush()
        out, err = bystander.communicate(timeout=120)
    finally:
        bystander.kill()
    assert bystander.returncode == 0, err
    ran = int(out.split()[-1])
    lines = [line.split(" | ") for line in victim.stdout.splitlines()]
    return {kind: [rest for k, *rest in lines if k == kind] for kind in ("copy", "kernel", "descriptor")}, ran


EXPECTED_DESCRIPTOR_ERRORS = [
    ["bad opcode", "opcode"],
    ["address out of device memory", "copy.dst"],
    ["bad size", "copy.size"],
    ["address not mapped for the queue (DMA fault)", "copy.src"],
    ["reserved field not zero", "reserved"],
    ["no such core", "launch.core_mask"],
    ["bad flags", "flags"],
    ["address out of device memory", "copy.src"],  # below the client's window
    ["bad alignment", "launch.program"],
    ["bad size", "launch.program_size"],
    ["bad alignment", "launch.args"],
    ["bad size", "launch.args_size"],
    ["address out of device memory", "launch.label"],
    ["bad alignment", "timestamp.dst"],
    ["bad alignment", "semaphore.addr"],
    ["address out of device memory", "semaphore.addr"],  # another client's memory
]


@pytest.mark.simd_env.with_args(_ecc_in_the_second_slot)
def test_an_ecc_error_in_one_clients_window_fails_its_reads_only(daemon):
    env, _ = daemon
    seen, ran = _fault_and_bystander(env)
    assert "uncorrectable ECC error in device memory in field copy.src" in seen["copy"][0][0]
    assert "uncorrectable ECC error" in seen["kernel"][0][0]
    assert seen["descriptor"] == EXPECTED_DESCRIPTOR_ERRORS
    assert ran >= 2  # the other client worked on, and every result it checked was right


@pytest.mark.simd_env.with_args(_a_hung_core)
def test_a_hung_core_fails_the_launch_that_meets_it_and_the_other_client_goes_on(daemon):
    env, _ = daemon
    seen, ran = _fault_and_bystander(env)
    assert seen["copy"] == [["ok"]]
    assert "watchdog: program ran past its cycle budget" in seen["kernel"][0][0]
    assert "(core 5 at instruction " in seen["kernel"][0][0]
    assert seen["descriptor"] == EXPECTED_DESCRIPTOR_ERRORS
    assert ran >= 2


# Both clients run this: copies to card `dev` and back until `rounds` are done, counting the ones
# that fail; then a last round that must succeed on card 0.
COPIER = """
import sys, torch
dev, rounds = sys.argv[1], int(sys.argv[2])
x = torch.arange(1 << 16, dtype=torch.float32)
print("ready", flush=True)
sys.stdin.readline()
errors = []
for _ in range(rounds):
    try:
        assert torch.equal((x.to(dev) * 2).cpu(), x * 2)
    except RuntimeError as e:
        errors.append(str(e).splitlines()[0])
print(len(errors), "|", errors[0] if errors else "-", flush=True)
assert torch.equal((x.to("spyre:0") + 1).cpu(), x + 1)
print("after ok", flush=True)
"""


def _two_copiers(env, dev: str, rounds: int) -> list[tuple[int, str]]:
    procs = [_interactive(env, COPIER, dev, str(rounds)) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:  # both start at once: their copies interleave on the card
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    seen = []
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert out.splitlines()[-1] == "after ok"
        count, first = out.splitlines()[0].split(" | ")
        seen.append((int(count), first))
    return seen


def _dma_error(tmp_path):
    return {"SPYRE_FAULTS": json.dumps({"dma_error_copy": 60})}


def _link_down(tmp_path):
    config = tmp_path / "two.json"
    config.write_text(json.dumps({"chip": {"fp16_format": "ieee"}, "sim": {"devices": 2}}))
    return {"SPYRE_CONFIG": str(config), "SPYRE_FAULTS": json.dumps({"card": 1, "link_down_cycle": 400_000})}


@pytest.mark.simd_env.with_args(_dma_error)
def test_a_dma_error_fails_one_copy_of_one_client_and_both_go_on(daemon):
    env, _ = daemon
    seen = _two_copiers(env, "spyre:0", 40)
    # The card's 60th copy fails: it belongs to one client, which sees it; the other sees nothing.
    assert sorted(count for count, _ in seen) == [0, 1]
    hit = [first for count, first in seen if count == 1][0]
    assert "(copy) failed: DMA transfer error in field copy." in hit


@pytest.mark.simd_env.with_args(_link_down)
def test_a_link_down_loses_the_card_for_every_client_and_only_that_card(daemon):
    env, _ = daemon
    seen = _two_copiers(env, "spyre:1", 30)
    # Both clients' work on card 1 fails from the moment its link goes down, naming why; card 0
    # goes on for both ("after ok").
    for count, first in seen:
        assert 1 <= count <= 30
        assert "PCIe link down" in first or "does not answer" in first
