"""Injected hardware faults ($SPYRE_FAULTS, the `faults` config section): a DMA transfer error, an
uncorrectable ECC error in a device memory range, a hung core, and the PCIe link going down. Each
must surface as a clear Python error on the work it hits, and leave other work (later commands,
another card) going. Each case runs in a fresh interpreter with its own faults."""

from __future__ import annotations

import json
import os

import pytest
from conftest import run_python, run_script

# A tensor to the card and back through a kernel, then an unrelated small op: the second line
# shows whether the device still works after the first one's error.
WORK = """
import sys, torch, torch_spyre
from torch_spyre.debug import device_address
x = torch.arange(1 << 20, dtype=torch.float32)
if sys.argv[-1] == "address":  # from the start of this process's memory (a shared card's window)
    t = x.to("spyre")
    torch.spyre.synchronize()
    print(device_address(t) - torch_spyre.device_info(0)["memory_base"])
    sys.exit()
try:
    t = x.to("spyre")
    y = (t * 2).cpu() if sys.argv[-1] == "kernel" else t.cpu()
    print("ok", float(y.sum()))
except RuntimeError as e:
    print("error:", e)
z = (torch.ones(4).to("spyre") + 1).cpu()
print("after:", z.tolist())
"""


def _run(tmp_path, faults: dict, how: str = "kernel", config: dict | None = None):
    script = tmp_path / "work.py"
    script.write_text(WORK)
    env = {"SPYRE_FAULTS": json.dumps(faults)}
    if config is not None:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"chip": {"fp16_format": "ieee"}, **config}))
        env["SPYRE_CONFIG"] = str(path)

    proc = run_script(script, env=env, args=[how])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    return lines[0], lines[-1]


def _address_of_the_tensor(tmp_path) -> int:
    """Where WORK's tensor lands: the allocator is deterministic, so a run without faults tells.
    Over the socket transport, the faults' own daemon serves the run that meets them alone, in the
    first slot, whose window starts at 0; the offset in the window is what carries over."""
    first, _ = _run(tmp_path, {}, how="address")
    return int(first)


@pytest.mark.parametrize("how, blamed", [("kernel", "launch.program"), ("copy", "copy.src")])
def test_an_ecc_error_fails_the_read_that_hits_it(tmp_path, how, blamed):
    addr = _address_of_the_tensor(tmp_path)
    first, after = _run(tmp_path, {"ecc_addr": addr + 4096, "ecc_bytes": 64}, how=how)
    assert first.startswith("error:")
    assert f"uncorrectable ECC error in device memory in field {blamed}" in first
    if how == "kernel":
        assert "(core " in first and " at instruction " in first  # which core read it
    assert after == "after: [2.0, 2.0, 2.0, 2.0]"
    # The same range one page further on is never read: no error.
    first, _ = _run(tmp_path, {"ecc_addr": addr + (8 << 20), "ecc_bytes": 64}, how=how)
    assert first == f"ok {float(sum(range(1 << 20)) * (2 if how == 'kernel' else 1))}"


def test_a_dma_transfer_error_fails_its_copy_only(tmp_path):
    first, after = _run(tmp_path, {"dma_error_copy": 1})
    assert first.startswith("error:") and "command 1 (copy) failed: DMA transfer error in field copy.src" in first
    assert after == "after: [2.0, 2.0, 2.0, 2.0]"


def test_a_hung_core_is_stopped_by_the_watchdog_and_named(tmp_path):
    first, after = _run(tmp_path, {"hang_core": 3}, config={"firmware": {"watchdog_cycles": 1_000_000}})
    assert "watchdog: program ran past its cycle budget" in first
    assert "(core 3 at instruction " in first
    assert after == "after: [2.0, 2.0, 2.0, 2.0]"


def test_a_link_down_loses_its_card_and_only_that_card(tmp_path):
    code = """
import torch, torch_spyre
x = torch.arange(1 << 20, dtype=torch.float32)
for dev in ("spyre:1", "spyre:0", "spyre:1"):
    try:
        print(dev, "ok", float((x.to(dev) * 2).cpu().sum()))
    except RuntimeError as e:
        print(dev, "error:", e)
"""
    config = tmp_path / "two.json"
    config.write_text(json.dumps({"chip": {"fp16_format": "ieee"}, "sim": {"devices": 2}}))
    proc = run_python(
        code, env={"SPYRE_CONFIG": str(config), "SPYRE_FAULTS": json.dumps({"card": 1, "link_down_cycle": 30000})}
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    expected = float(sum(range(1 << 20)) * 2)
    assert lines[0].startswith("spyre:1 error:") and "the card does not answer" in lines[0]
    assert "PCIe link down" in lines[0]
    assert lines[1] == f"spyre:0 ok {expected}"
    assert lines[2].startswith("spyre:1 error:")  # lost for good, and says so again


# Writes more device memory than sim.host_memory_bytes lets the simulator back, by a copy or by a
# kernel, after a first round of the small work that follows it (so that its memory is backed).
HOST_MEMORY = """
import sys, torch, torch_spyre
def small():
    return (torch.ones(4).to("spyre") + 1).cpu().tolist()
print("before:", small())
try:
    if sys.argv[-1] == "copy":
        big = torch.ones(16 << 20).to("spyre")  # 64 MiB
    else:
        big = torch.empty(16 << 20, device="spyre")
        big.fill_(1.0)
    torch.spyre.synchronize()
    print("no error")
except torch.OutOfMemoryError as e:
    print("out of memory:", e)
big = None
print("after:", small())
"""


@pytest.mark.parametrize("how, blamed", [("copy", "copy.dst"), ("kernel", "launch.program")])
def test_device_memory_the_host_cannot_back_is_an_out_of_memory_error(tmp_path, how, blamed):
    """The card has 112 GB, the host may have less: a write the simulator cannot back raises
    torch.OutOfMemoryError naming why (the fuzzer found a 70 GB tensor that got the process killed),
    and the device goes on."""
    script = tmp_path / "work.py"
    script.write_text(HOST_MEMORY)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"chip": {"fp16_format": "ieee"}, "sim": {"host_memory_bytes": 32 << 20}}))
    proc = run_script(script, env={"SPYRE_CONFIG": str(config)}, args=[how])
    assert proc.returncode == 0, proc.stderr
    before, error, after = proc.stdout.splitlines()
    assert before == "before: [2.0, 2.0, 2.0, 2.0]"
    assert error.startswith("out of memory:")
    assert f"the simulator's host has no memory left to back device memory in field {blamed}" in error
    assert "sim.host_memory_bytes" in error
    assert after == "after: [2.0, 2.0, 2.0, 2.0]"
    # The same work with room for it: no error.
    config.write_text(json.dumps({"chip": {"fp16_format": "ieee"}, "sim": {"host_memory_bytes": 256 << 20}}))
    proc = run_script(script, env={"SPYRE_CONFIG": str(config)}, args=[how])
    assert proc.stdout.splitlines()[1] == "no error", proc.stderr


@pytest.mark.parametrize(
    "faults, message",
    [
        ('{"hang_core": 99}', "faults.hang_core"),
        ('{"card": 3}', "faults.card"),
        ('{"ecc_addr": 1, "ecc_bytes": 1e15}', "faults.ecc"),
        ('{"link_down": 5}', "unknown key 'faults.link_down'"),
        ("[1]", "SPYRE_FAULTS must be a JSON object"),
    ],
)
def test_bad_faults_are_named(faults, message):
    proc = run_python("import torch, torch_spyre\ntorch.ones(1).to('spyre')\n", env={"SPYRE_FAULTS": faults})
    assert proc.returncode != 0
    assert message in proc.stderr


def test_smi_shows_memory_queues_and_a_lost_card(tmp_path):
    code = """
import torch, torch_spyre, torch_spyre.smi as smi
from torch_spyre.debug import driver_memory_info
torch.ones(1, device="spyre:1").cpu()  # open card 1 before its link goes down
x = torch.ones(1 << 20, device="spyre")
torch.spyre.synchronize()
s = smi.status(0)
mem = driver_memory_info(0)
assert s["answers"] and s["firmware_ready"] and s["interface_version"] == 7
assert s["memory_used"] == mem["allocated"] > 4 << 20
assert s["memory_used"] + s["memory_free"] == s["memory_total"] == mem["total"]
open_queues = [q for q in s["queues"] if q["open"]]
assert open_queues and all(q["pending"] == 0 and not q["error"] for q in open_queues)
print(smi.report())
try:
    (x.to("spyre:1") * 2).cpu()
except RuntimeError:
    pass
lost = smi.status(1)
assert not lost["answers"] and lost["queues"] == []
print(smi.report([1]))
"""
    config = tmp_path / "two.json"
    config.write_text(json.dumps({"chip": {"fp16_format": "ieee"}, "sim": {"devices": 2}}))
    # Not the previous test's cycle: over the socket transport, another config's daemon, whose
    # card 1 has not gone down yet (a lost card stays lost for every client of its daemon).
    proc = run_python(
        code, env={"SPYRE_CONFIG": str(config), "SPYRE_FAULTS": json.dumps({"card": 1, "link_down_cycle": 30001})}
    )
    assert proc.returncode == 0, proc.stderr
    assert f"spyre:0  ok  transport {os.environ.get('SPYRE_TRANSPORT', 'inproc')}" in proc.stdout
    assert "spyre:1  not answering" in proc.stdout
