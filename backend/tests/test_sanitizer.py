"""The device sanitizer (SPYRE_SANITIZE): small hand-written kernels each plant one class of bug
(a read past a tensor into its neighbour, a write through a freed tensor, two cores writing the
same bytes with no barrier, a read of memory nothing wrote) and the device error must name the
check, the kernel, the op, the core, the instruction and the allocation, with the tensor's own
address range. The same kernels without the bug, or without the sanitizer, run silently.

Each case runs in a fresh interpreter: the sanitizer is switched on as the device opens."""

from __future__ import annotations

import json
import re

from conftest import run_python

# A tiny assembler for the tile ISA (ProgramHeader and Instr in hw/include/spyre/hw/isa.h) and a
# launcher that hands tensors to the program as its arguments (the torch.compile path's launch).
PRELUDE = r"""
import json, struct, sys, torch, torch_spyre
from torch_spyre import _C
from torch_spyre.debug import device_address

ARG, LI, ADD, BARRIER, LOAD, STORE, END = 0x02, 0x01, 0x04, 0x07, 0x10, 0x11, 0x00

def ins(op, a=0, b=0, d=0, e=0, rd=0):
    return struct.pack("<BBBBIQQII", op, 0, 0, rd, a, b % 2**64, 0, d, e)

def program(entries, code):
    off = (32 + 4 * len(entries) + 31) // 32 * 32
    body = b"".join(code)
    header = struct.pack("<IHHIIII2I", 0x50595053, 2, len(entries), len(code), off, off + len(body), 7, 0, 0)
    table = b"".join(struct.pack("<I", e) for e in entries)
    return (header + table).ljust(off, b"\0") + body + b"planted".ljust(32, b"\0")

def run(case, entries, code, tensors):
    prog = _C._program("sanitizer-" + case, "planted", program(entries, code), (1 << len(entries)) - 1, len(tensors))
    try:
        _C._launch_graphs([(prog, list(tensors), "planted::" + case)])
        torch.spyre.synchronize()
        return "no report"
    except RuntimeError as e:
        return str(e)

def span(t):
    a = device_address(t)
    return f"{t.numel() * t.element_size()} bytes at {a:#x}..{a + t.numel() * t.element_size():#x}"

out = {}
a = torch.zeros(16, device="spyre")
b = torch.ones(16, device="spyre")
# A LOAD of 1 KiB from a 64-byte tensor: it runs on into the next one.
out["oob"] = run("oob", [0], [ins(ARG, a=1), ins(LOAD, d=1, e=1024, rd=1), ins(END)], [a])
out["oob_spans"] = [span(a), span(b)]
# The same copy within bounds: a to b.
out["in_bounds"] = run("in_bounds", [0], [ins(ARG, a=1), ins(ARG, a=2, b=1), ins(LOAD, d=1, e=64, rd=1),
                                          ins(STORE, d=1, e=64, rd=2), ins(END)], [a, b])
out["b_after_copy"] = b.cpu().tolist()
# Two cores store the same 64 bytes before their barrier: a race. Ordered by the barrier: none.
c = torch.zeros(16, device="spyre")
out["race"] = run("race", [0, 0], [ins(ARG, a=1), ins(STORE, d=1, e=64, rd=1), ins(BARRIER), ins(END)], [c])
out["race_span"] = span(c)
out["ordered"] = run("ordered", [0, 4], [ins(ARG, a=1), ins(STORE, d=1, e=64, rd=1), ins(BARRIER), ins(END),
                                          ins(ARG, a=1), ins(BARRIER), ins(STORE, d=1, e=64, rd=1), ins(END)], [c])
# A read of a tensor nothing wrote (torch.empty).
u = torch.empty(16, device="spyre")
out["uninit"] = run("uninit", [0], [ins(ARG, a=1), ins(LOAD, d=1, e=64, rd=1), ins(END)], [u])
out["uninit_span"] = span(u)
u.fill_(1.0)
out["init"] = run("init", [0], [ins(ARG, a=1), ins(LOAD, d=1, e=64, rd=1), ins(END)], [u])
# A store through the address of a tensor that was freed (its block stays cached, unused).
x = torch.zeros(16, device="spyre")
f = torch.zeros(16, device="spyre")
out["freed_span"] = span(f)
delta = device_address(f) - device_address(x)
del f
out["freed"] = run("freed", [0], [ins(ARG, a=1), ins(LI, a=2, b=delta), ins(ADD, a=1, d=1, e=2),
                                  ins(STORE, d=1, e=64, rd=1), ins(END)], [x])
print(json.dumps(out))
"""


def _run(env: dict[str, str]) -> dict:
    proc = run_python(PRELUDE, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


ALL = {"SPYRE_SANITIZE": "memcheck,racecheck,initcheck", "TORCH_SPYRE_LAUNCH_BLOCKING": "1"}


def _names_the_launch(message: str, case: str, instruction: int) -> None:
    assert "device sanitizer report" in message, message
    assert f"in planted::{case} (kernel 'planted')" in message, message
    assert f"at instruction {instruction})" in message, message
    assert re.search(rf"instruction {instruction} is (LOAD|STORE) ", message), message


def test_each_planted_bug_is_reported_with_its_kernel_core_instruction_and_tensor():
    out = _run(ALL)

    oob = out["oob"]
    _names_the_launch(oob, "oob", 1)
    a_span, b_span = out["oob_spans"]
    assert "sanitizer (memcheck): a read of 1024 bytes" in oob, oob
    assert f"runs 960 bytes past the end of allocation #1 ({a_span})" in oob, oob
    assert f"into allocation #2 ({b_span})" in oob, oob
    assert "(core 0 at instruction 1)" in oob

    race = out["race"]
    _names_the_launch(race, "race", 1)
    assert "sanitizer (racecheck): a write of 64 bytes" in race, race
    assert f"({out['race_span']})" in race, race
    # The two cores are 0 and 1; each names the other.
    assert re.search(r"core (\d) at instruction 1\).*races with core (?!\1)\d at instruction 1", race), race

    uninit = out["uninit"]
    _names_the_launch(uninit, "uninit", 1)
    assert "sanitizer (initcheck): a read of 64 bytes" in uninit, uninit
    assert f"({out['uninit_span']}) that nothing wrote since it was allocated" in uninit, uninit

    freed = out["freed"]
    _names_the_launch(freed, "freed", 3)
    assert "sanitizer (memcheck): a write of 64 bytes" in freed, freed
    assert f"({out['freed_span']}, freed) after its tensor was freed" in freed, freed

    # The same kernels without their bug run, and compute what they should.
    for case in ("in_bounds", "ordered", "init"):
        assert out[case] == "no report", (case, out[case])
    assert out["b_after_copy"] == [0.0] * 16


def test_without_the_sanitizer_the_planted_bugs_run_silently():
    # What the sanitizer is for: none of these kernels faults on its own.
    out = _run({"SPYRE_SANITIZE": "", "TORCH_SPYRE_LAUNCH_BLOCKING": "1"})
    for case in ("oob", "race", "uninit", "freed", "in_bounds", "ordered", "init"):
        assert out[case] == "no report", (case, out[case])


def test_each_check_runs_alone():
    out = _run({"SPYRE_SANITIZE": "initcheck", "TORCH_SPYRE_LAUNCH_BLOCKING": "1"})
    assert "sanitizer (initcheck)" in out["uninit"]
    for case in ("oob", "race", "freed", "ordered", "init"):
        assert out[case] == "no report", (case, out[case])
    out = _run({"SPYRE_SANITIZE": "racecheck", "TORCH_SPYRE_LAUNCH_BLOCKING": "1"})
    assert "sanitizer (racecheck)" in out["race"]
    for case in ("oob", "uninit", "freed", "ordered"):
        assert out[case] == "no report", (case, out[case])


def test_an_unknown_check_is_a_clear_error():
    proc = run_python(
        "import torch, torch_spyre\ntorch.zeros(1, device='spyre')\n", env={"SPYRE_SANITIZE": "memcheck,bounds"}
    )
    assert proc.returncode != 0
    assert "SPYRE_SANITIZE: unknown check 'bounds'" in proc.stderr
    assert "memcheck, racecheck and initcheck" in proc.stderr


def test_our_kernels_run_clean_under_every_check():
    # A sample of the kernel library, including those that read what they write (topk selects each
    # round's index into one column of its output, which once read its other columns before any
    # round wrote them: an initcheck finding, mended by zeroing the output first) and accumulate
    # from several cores (index_add_).
    code = r"""
import torch, torch_spyre
torch.manual_seed(0)
x = torch.randn(50, 40)
d = x.to("spyre")
checks = {
    "topk": lambda t: torch.topk(t, 3, dim=1)[0],
    "topk_smallest": lambda t: torch.topk(t, 5, dim=0, largest=False)[0],
    "matmul": lambda t: t @ t.t(),
    "softmax": lambda t: torch.softmax(t, dim=-1),
    "layer_norm": lambda t: torch.nn.functional.layer_norm(t, (40,)),
    "index_select": lambda t: t.index_select(0, torch.tensor([3, 1, 49], device=t.device)),
    "index_add": lambda t: torch.zeros(5, 40, device=t.device).index_add_(
        0, torch.tensor([0, 1, 0, 4] * 12 + [2, 2], device=t.device), t),
    "cumsum": lambda t: t.cumsum(1),
    "sort": lambda t: t.sort(dim=1)[0],
}
for name, f in checks.items():
    torch.testing.assert_close(f(d).cpu(), f(x), msg=name, atol=1e-4, rtol=1e-4)
torch.spyre.synchronize()
print("clean")
"""
    proc = run_python(code, env=ALL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("clean")


def test_a_watchpoint_stops_the_first_kernel_that_writes_into_it():
    # No SPYRE_SANITIZE: a watchpoint works alone. Writes elsewhere pass; the first kernel whose
    # store reaches the watched bytes stops before it moves a byte, named with its core and
    # instruction; after the block the tensor is free again.
    code = r"""
import torch, torch_spyre
from torch_spyre.debug import device_address, watch
x = torch.zeros(64, device="spyre")
y = torch.ones(64, device="spyre")
with watch(x[8:16]):
    print("watched", hex(device_address(x) + 32))
    y.add_(1)
    x[:8].fill_(2)
    x[16:].fill_(5)
    torch.spyre.synchronize()
    print("outside passes")
    try:
        x.mul_(3)
    except RuntimeError as e:
        print("ERROR", e)
print("values", x[:9].cpu().tolist(), y[0].item())
x.mul_(3)
print("after", x[:9].cpu().tolist())
"""
    proc = run_python(code, env={"SPYRE_SANITIZE": "", "TORCH_SPYRE_LAUNCH_BLOCKING": "1"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    watched = lines[0].split()[1]
    assert lines[1] == "outside passes"
    err = lines[2]
    assert err.startswith("ERROR ") and "watchpoint (a write of 256 bytes" in err, err
    assert "in aten::mul_.Tensor (kernel 'mul (pointwise f32 [64])')" in err, err
    assert re.search(r"\(core \d+ at instruction \d+\).*instruction \d+ is STORE", err), err
    assert f"watchpoint #1 (32 bytes at {watched})" in err and "reaches byte 0 of the watched range" in err, err
    assert lines[3] == "values [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 0.0] 2.0"  # the mul stored nothing
    assert lines[4] == "after [6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 6.0, 0.0]"


def test_a_breakpoint_returns_the_cores_registers_and_scratchpad():
    # Stop an add kernel right after its BINARY (found in its listing): the registers hold its
    # arguments (the input's device address), the scratchpad the loaded input and the sums, as
    # CPU computes them. A rank the launch does not have never stops; the device goes on.
    code = r"""
import re, torch, torch_spyre
from torch_spyre.debug import break_at, device_address, listing
x = torch.arange(16.0, device="spyre") * 0.5
(x + 1).cpu()
lines = listing("aten::add.Tensor").splitlines()[2:]
binary = next(l for l in lines if " BINARY " in l)
at = int(binary.split()[0]) + 1
dst, src = (int(v, 16) for v in re.findall(r"lx\[r15\+(0x[0-9a-f]+)\]", binary))
arg = next(l for l in lines if " ARG " in l and "arg[0]" in l)
reg = int(re.search(r"ARG\s+r(\d+)", arg).group(1))
snap = break_at(lambda: x + 1, instruction=at)
print(snap.registers[reg] == device_address(x))
print(snap.view(torch.float32, src, (16,)).tolist() == (torch.arange(16.0) * 0.5).tolist())
print(snap.view(torch.float32, dst, (16,)).tolist() == (torch.arange(16.0) * 0.5 + 1).tolist())
print("breakpoint: the core stopped before instruction %d" % at in snap.error, "aten::add.Tensor" in snap.error)
try:
    break_at(lambda: x + 1, instruction=at, rank=5)
except ValueError as e:
    print(e)
print((x + 2).cpu()[:2].tolist())
"""
    proc = run_python(code, env={"SPYRE_SANITIZE": ""})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "True",
        "True",
        "True",
        "True True",
        "break_at: the core of rank 5 never reached instruction " + proc.stdout.splitlines()[4].split()[-1],
        "[2.0, 2.5]",
    ]
