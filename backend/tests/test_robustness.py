"""A program that never ends, and a host that stops waiting for one: the card's watchdog stops the
program and fails only its queue; a host wait ends at its timeout or at Ctrl-C with a clear Python
error, and the card's work goes on. Each runs in a fresh interpreter with its own config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from conftest import ROOT, run_python

# A one-core program whose first instruction branches to itself, for ever: the layouts are
# ProgramHeader and Instr in hw/include/spyre/hw/isa.h, the launch descriptor LaunchArgs in
# hw/include/spyre/hw/commands.h.
SPIN = """
import struct, sys, time, torch, torch_spyre
from torch_spyre.debug import device_address, submit_raw_descriptor

header = struct.pack("<IHHIIII2I", 0x50595053, 2, 1, 2, 64, 0, 0, 0, 0)  # magic, ISA 2, 1 entry, 2 instrs at 64
table = struct.pack("<I", 0).ljust(32, b"\\0")  # rank 0 starts at instruction 0
branch = struct.pack("<BBBBIQQII", 0x06, 0, 0, 0, 0, 0, 0, 0, 0)  # BRANCH always, to instruction 0
end = bytes(32)
program = torch.frombuffer(bytearray(header + table + branch + end), dtype=torch.uint8).to("spyre")
torch.spyre.synchronize()
LAUNCH = struct.pack("<BBHIQ6Q", 2, 0, 0, 0, 0, device_address(program), program.numel(), 0, 0, 1, 0)

def device_works():
    x = torch.arange(12.0).reshape(3, 4)
    torch.testing.assert_close((x.to("spyre") @ x.t().to("spyre")).cpu(), x @ x.t())
    print("device works", flush=True)
"""


def _config(tmp_path, watchdog_cycles: int) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"chip": {"fp16_format": "ieee"}, "firmware": {"watchdog_cycles": watchdog_cycles}}))
    return str(path)


def test_the_watchdog_stops_a_program_that_never_ends_and_fails_only_its_queue(tmp_path):
    code = SPIN + (
        "r = submit_raw_descriptor(LAUNCH)\n"
        "print(r['error'], '|', r['message'], '|', r['cycles'], flush=True)\n"
        "device_works()\n"
    )
    proc = run_python(code, env={"SPYRE_CONFIG": _config(tmp_path, 2_000_000)})
    assert proc.returncode == 0, proc.stderr
    error, message, cycles = proc.stdout.splitlines()[0].split(" | ")
    assert error.startswith("watchdog")
    assert "core 0 at instruction 0" in message
    assert 2_000_000 <= int(cycles) <= 2_000_000 + 10_000  # stopped within its look interval
    assert "device works" in proc.stdout


def test_a_wait_times_out_with_the_command_named_and_the_work_goes_on(tmp_path):
    # The watchdog (on a 40 M-cycle budget) ends the spin a while after the 0.2 s timeout.
    code = SPIN + (
        "assert torch_spyre.get_wait_timeout() == 0.2\n"
        "t = time.monotonic()\n"
        "try:\n"
        "    submit_raw_descriptor(LAUNCH)\n"
        "except RuntimeError as e:\n"
        "    print('timed out after', round(time.monotonic() - t, 1), '|', e, flush=True)\n"
        "torch_spyre.set_wait_timeout(None)\n"
        "assert torch_spyre.get_wait_timeout() is None\n"
        "device_works()\n"
    )
    proc = run_python(code, env={"SPYRE_CONFIG": _config(tmp_path, 40_000_000), "TORCH_SPYRE_WAIT_TIMEOUT": "0.2"})
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    took, message = first.split(" | ")
    assert float(took.split()[-1]) < 1.0
    assert "queue" in message and "wait for command 1 timed out after 0.200 s" in message
    assert "still queued or running on the card" in message
    assert "device works" in proc.stdout


def test_ctrl_c_ends_a_wait_with_keyboard_interrupt(tmp_path):
    # No watchdog: only Ctrl-C can end this wait.
    code = SPIN + (
        "print('waiting', flush=True)\n"
        "t = time.monotonic()\n"
        "try:\n"
        "    submit_raw_descriptor(LAUNCH)\n"
        "except KeyboardInterrupt:\n"
        "    print('KeyboardInterrupt after', round(time.monotonic() - t, 2), flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
    env["SPYRE_CONFIG"] = _config(tmp_path, 0)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        assert proc.stdout.readline().strip() == "waiting"
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        gone = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.startswith("KeyboardInterrupt after")
    assert gone < 5  # the interrupt ended the wait; the process then exited cleanly


def test_a_bad_wait_timeout_is_named():
    proc = run_python("import torch, torch_spyre\n", env={"TORCH_SPYRE_WAIT_TIMEOUT": "soon"})
    assert proc.returncode != 0
    assert "TORCH_SPYRE_WAIT_TIMEOUT must be a number of seconds" in proc.stderr
    proc = run_python("import torch_spyre\ntorch_spyre.set_wait_timeout(-1)\n")
    assert proc.returncode != 0
    assert "ValueError" in proc.stderr and "a wait timeout is a number of seconds" in proc.stderr


def test_the_default_watchdog_lets_a_long_memory_bound_kernel_finish():
    """The watchdog's default budget was 300 M cycles (0.2 s): an amax over a large unfolded view
    (7.5e9 elements read, about 440 M cycles of LPDDR5 traffic) was stopped as a hung program (fuzz
    seed 700). Now 15 G cycles (10 s of device time)."""
    import torch
    import torch_spyre

    v = torch.arange(1, 1048579, 3)
    u = v.to("spyre").unfold(0, 50000, 2)
    torch.spyre.synchronize()
    start = torch_spyre.device_cycles()
    got = torch.amax(u, 1).cpu()
    assert torch_spyre.device_cycles() - start > 300_000_000  # past the old budget
    assert torch.equal(got, torch.amax(v.unfold(0, 50000, 2), 1))


# An index past the table's end faults on the card (the host cannot see the index without a sync).
FAULTING_GATHER = """
import traceback, torch, torch_spyre.debug
table = torch.randn(8, 4, device="spyre")
idx = torch.tensor([0, 9, 2], device="spyre")
try:
    rows = torch.index_select(table, 0, idx)  # the faulting op: line 6
    after = rows + 1
    torch.spyre.synchronize()
except RuntimeError as e:
    print("raised at line", traceback.extract_tb(e.__traceback__)[-1].lineno)
    message = str(e).splitlines()[0]
    print(message)
    # The error's instruction index is a line of the kernel's listing.
    index = int(message.split("(core 0 at instruction ")[1].split(")")[0])
    listing = torch_spyre.debug.listing("aten::index_select").splitlines()
    print(listing[0])
    print(next(line for line in listing if line.split()[0] == str(index)))
x = torch.arange(6.0, device="spyre")
print("device works", (x * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0])
"""


def _faulting_gather(env: dict[str, str]) -> tuple[int, str]:
    proc = run_python(FAULTING_GATHER, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[4] == "device works True", proc.stdout
    message, head, listed = lines[1], lines[2], lines[3]
    assert head.startswith("; kernel 'gather ") and head.endswith("' launched by aten::index_select")
    # The instruction the error decodes is the listing's line of that index.
    index, decoded = listed.split(maxsplit=1)
    assert f"(core 0 at instruction {index})" in message and f"; instruction {index} is {decoded}" in message
    return int(lines[0].removeprefix("raised at line ")), message


def test_a_device_fault_names_the_op_and_kernel_that_faulted():
    # Asynchronous by default: the fault surfaces at a later call, naming the op that caused it.
    line, message = _faulting_gather({})
    assert line != 6
    assert "core fault" in message and "(core 0 at instruction " in message
    assert "in aten::index_select (kernel 'gather " in message
    # The faulting instruction, decoded: a GATHER whose index bound is a register.
    index = message.split("(core 0 at instruction ")[1].split(")")[0]
    assert f"; instruction {index} is GATHER " in message and ", index < r" in message


def test_launch_blocking_raises_at_the_line_of_the_faulting_op_and_the_trace_keeps_its_name(tmp_path):
    trace = tmp_path / "trace.json"
    line, message = _faulting_gather({"TORCH_SPYRE_LAUNCH_BLOCKING": "1", "SPYRE_TRACE": str(trace)})
    assert line == 6
    assert "(core 0 at instruction " in message and "in aten::index_select (kernel 'gather " in message
    assert "later command(s)" not in message  # nothing was queued behind it
    assert "is GATHER " in message
    events = json.loads(trace.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    failed = [e for e in events if "(failed: " in str(e.get("name", ""))]
    assert len(failed) == 1, failed
    assert failed[0]["name"].startswith("gather ") and failed[0]["name"].endswith("(failed: core fault)")
    assert failed[0]["args"]["op"] == "aten::index_select"


def test_a_listing_names_each_op_kernel_and_refuses_an_op_never_launched():
    code = """
import torch, torch_spyre
from torch_spyre.debug import listing
a = torch.arange(12.0, device="spyre").reshape(3, 4)
(a @ a.t()).cpu()
print(listing("aten::mm").splitlines()[0])
print(any(" MATMUL " in line for line in listing("aten::mm").splitlines()))
print(listing().splitlines()[0])  # the last launch: the copy to the host needs none, mm was last
try:
    listing("aten::lgamma")
except ValueError as e:
    print(e)
"""
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    head, has_matmul, last, refused = proc.stdout.splitlines()[:4]
    assert head.startswith("; kernel 'mm f32 3x4x3") and head.endswith("launched by aten::mm")
    assert has_matmul == "True"
    assert last.startswith("; kernel 'mm f32 3x4x3")
    assert "no loaded program of a launch of aten::lgamma" in refused and "aten::mm" in refused
