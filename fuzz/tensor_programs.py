"""A differential fuzzer of tensor programs: random programs of ordinary tensor ops (broadcasting,
type promotion, views, in-place and out= forms, indexing, zero-size and odd shapes, autograd), each
line run on spyre and on CPU, and every live value compared after every line: values, dtype,
shape, the strides of views, and aliasing (two values share memory on spyre exactly when they do
on CPU, so a write through a view reaches its base). Where CPU raises, spyre must raise.

A program is Python source, one assignment per line, so a mismatch minimises by deleting lines
and prints as a regression test body.

    .venv/bin/python fuzz/tensor_programs.py --programs 2000 --seed 1
    .venv/bin/python fuzz/tensor_programs.py --programs 200 --seed 1 --front-door compile
    .venv/bin/python fuzz/tensor_programs.py --replay 'seed 1 program 17'

`--front-door compile` runs each line through torch.compile (tensor_programs_run.through_compile):
the spyre backend against AOTAutograd over CPU's kernels.

Programs run in a worker process; a program that kills its worker is a crash, and is minimised the
same way (each candidate in a fresh process). The programs come from tensor_programs_gen.py and run
and compare in tensor_programs_run.py; this script is the driver.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from tensor_programs_gen import program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def minimise(lines: list, fails) -> list:
    """Drops lines while `fails(lines)` still reports a difference (a failure on another line, or a
    line the others need, keeps the line)."""
    want = fails(lines)
    changed = True
    while changed:
        changed = False
        for i in range(len(lines) - 1, -1, -1):
            trial = lines[:i] + lines[i + 1 :]
            got = fails(trial)
            if got is not None and got.split(":", 1)[-1] == want.split(":", 1)[-1]:
                lines, changed = trial, True
    return lines


def as_test(lines: list, finding: str) -> str:
    body = "\n".join(f"    {line}" for line in lines)
    return f"# {finding}\ndef program(dev):\n{body}\n"


# ---- the worker and the driver ------------------------------------------------------------------------

WORKER = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({address_space}, {address_space}))
sys.path.insert(0, {root!r} + "/fuzz")
import torch, torch_spyre, tensor_programs_gen as gen, tensor_programs_run as tp
torch_spyre.set_cpu_fallback({mode!r})
for line in sys.stdin:
    req = json.loads(line)
    lines = req["lines"] if "lines" in req else gen.program(req["seed"], req["index"], req["length"])
    try:
        finding = tp.run(lines, {front_door!r})
    except Exception as e:  # an error the line did not raise: a device error read back while comparing
        finding = None if tp._simulator_out_of_memory(e) else f"comparing raises {{type(e).__name__}}: {{str(e)[:160]}}"
    print(json.dumps({{"id": req.get("id"), "finding": finding, "lines": lines}}), flush=True)
"""


class Worker:
    def __init__(self, mode: str, front_door: str = "eager"):
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        env.setdefault("SPYRE_CONFIG", os.path.join(ROOT, "configs", "ieee_fp16.json"))
        code = WORKER.format(root=ROOT, mode=mode, address_space=WORKER_ADDRESS_SPACE, front_door=front_door)
        self.p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)  # fmt: skip

    def ask(self, req: dict) -> dict | None:
        """The worker's answer, or None when it died (a crash)."""
        try:
            self.p.stdin.write(json.dumps(req) + "\n")
            self.p.stdin.flush()
            line = self.p.stdout.readline()
        except (BrokenPipeError, OSError):
            return None
        return json.loads(line) if line else None

    def close(self):
        self.p.kill()
        self.p.wait()  # reaped: no zombie per replaced worker

    def rss(self) -> int:
        """The worker's resident memory in bytes."""
        try:
            with open(f"/proc/{self.p.pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return 0


# Device memory a program touched stays backed by the simulator's host memory until the process ends
# (the card does not yet give freed memory back: issue 19), so a worker that ran a program of tens of
# GB is replaced before the next one, lest programs fail for want of host memory rather than by an op.
HOST_MEMORY = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
WORKER_MEMORY = HOST_MEMORY // 4

# A line may ask for more memory than the host has (an index_select of an unfold: 49 GB for seed 101
# program 185). Without a bound, the CPU reference's allocation was granted and the kernel's OOM
# killer ended the worker, or the fuzzer, or another job on the machine. Bounding each worker's
# address space to half the host's memory makes such an allocation fail at once, as a Python
# exception on both sides, which compares like any other error.
WORKER_ADDRESS_SPACE = max(HOST_MEMORY // 2, 8 << 30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--length", type=int, default=12)
    parser.add_argument(
        "--mode",
        default="allow",
        choices=["allow", "error"],
        help="the CPU fallback: allowed (is every answer right?) or forbidden (what runs natively?)",
    )
    parser.add_argument(
        "--front-door",
        default="eager",
        choices=["eager", "compile"],
        help="how spyre runs each line: eagerly, or through torch.compile (CPU: aot_eager)",
    )
    parser.add_argument("--replay", help="'seed S program I': that program alone, printed")
    parser.add_argument("--out", help="write the minimised findings here (JSON)")
    args = parser.parse_args()
    if args.replay:
        _, s, _, i = args.replay.split()
        lines = program(int(s), int(i), args.length)
        print("\n".join(lines))
        return
    worker, findings, native, t0 = Worker(args.mode, args.front_door), [], 0, time.time()
    for i in range(args.programs):
        res = worker.ask({"seed": args.seed, "index": i, "length": args.length, "id": i})
        if res is None:  # the program killed the worker
            worker.close()
            worker = Worker(args.mode, args.front_door)
            lines = program(args.seed, i, args.length)
            findings.append(_minimise_crash(lines, args.mode, args.front_door, f"seed {args.seed} program {i}"))
            continue
        if worker.rss() > WORKER_MEMORY:
            worker.close()
            worker = Worker(args.mode, args.front_door)
        if res["finding"] is None:
            native += 1
            continue
        if args.mode == "error" and "needs the CPU fallback" in res["finding"]:
            continue
        lines = minimise(res["lines"], lambda ls, w=worker: (w.ask({"lines": ls}) or {"finding": "crash"})["finding"])
        findings.append({"program": f"seed {args.seed} program {i}", "finding": res["finding"], "lines": lines})
        print(as_test(lines, f"seed {args.seed} program {i}: {res['finding']}"), flush=True)
    worker.close()
    kinds = {"crash": sum("crash" in f["finding"] for f in findings), "mismatch": len(findings)}
    kinds["mismatch"] -= kinds["crash"]
    print(f"{args.programs} programs (seed {args.seed}, {args.length} lines, fallback={args.mode}, "
          f"front door {args.front_door}) in "
          f"{time.time() - t0:.0f} s: {kinds['mismatch']} mismatches, {kinds['crash']} crashes"
          + (f"; {native} ran with no fallback" if args.mode == "error" else ""))  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(findings, f, indent=1)
    sys.exit(1 if findings else 0)


def _minimise_crash(lines: list, mode: str, front_door: str, where: str) -> dict:
    def fails(ls):
        w = Worker(mode, front_door)
        try:
            res = w.ask({"lines": ls})
        finally:
            w.close()
        return "crash: the process died" if res is None else res["finding"]

    lines = minimise(lines, fails)
    print(as_test(lines, f"{where}: crash"), flush=True)
    return {"program": where, "finding": "crash: the process died", "lines": lines}


if __name__ == "__main__":
    main()
