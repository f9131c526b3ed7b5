"""Where the host's time goes in a Llama-style training step (or its forward) on the spyre device.

Runs the step of benchmarks/compute_figures.py (HuggingFace LlamaForCausalLM, 4 layers of 256,
4 x 128 tokens, AdamW) in a child process. After a warm-up step, `perf record` samples the
process while it runs N more steps, and stops with the last one, before the process exits. The
samples are split two ways:
- by thread: the Python thread that runs PyTorch, the simulator's SystemC thread, and its worker
  for the cores' arithmetic;
- by kind of work: tile products, SFP arithmetic, the timing model, copies, spin-waits, ...

Needs `perf` (Debian's linux-perf) and permission to sample (root, or kernel.perf_event_paranoid
<= 1). Run it alone on the machine:

    .venv/bin/python benchmarks/host_profile.py [--what step|forward] [--steps 20]
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
HZ = 2000  # perf's samples per second of a running thread

# The child: builds the model, warms up, says it is ready (its pid in `ready`), then runs the steps.
CHILD = """
import os, sys, time
sys.path.insert(0, "benchmarks")
from compute_figures import llama_calls, llama_model
what, steps, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3]
step, forward = llama_calls(*llama_model(), "spyre")
fn = step if what == "step" else forward
fn()
open(ready, "w").write(str(os.getpid()))
time.sleep(1.0)  # perf attaches
start = time.perf_counter()
for _ in range(steps):
    fn()
print(f"{(time.perf_counter() - start) / steps * 1e3:.1f}", flush=True)
sys.stdin.read()  # the profiler stops before the interpreter's teardown
"""

# Kinds of work, by symbol (and library); the first that matches wins.
KINDS = [
    ("tile products", r"tile_matmul|chain_block|chain_strip|chain_columns|Eigen::internal::gebp"),
    ("SFP arithmetic", r"spyre::sim::sfp|spyre::sim::sfp_"),
    ("copies and page faults", r"memmove|memcpy|memset|clear_page|page_fault|do_anonymous|handle_mm_fault"),
    ("spin-waits (clock polls)", r"clock_gettime|steady_clock|\[vdso\]"),
    ("timing model (SystemC, fabric, cores)", r"spyre::sim::|sc_core::|sc_cor|tlm::|libsystemc"),
    ("Python garbage collector", r"gc_collect|visit_reachable|visit_decref|subtract_refs|move_unreachable"),
    ("malloc", r"malloc|_int_free|cfree|operator new|operator delete|malloc_consolidate"),
    ("locks, threads, scheduler", r"mutex|lll_|futex|spin_unlock|finish_task|schedule|pthread|syscall"),
    ("PyTorch, Python, the extension", r"python|torch|c10|spyre::"),
]


def kind_of(dso: str, symbol: str) -> str:
    text = f"{dso} {symbol}"
    for name, pattern in KINDS:
        if re.search(pattern, text):
            return name
    return "other"


def thread_role(kinds: collections.Counter) -> str:
    """Which of the process's threads this is, by what it spends its time on."""
    top = kinds.most_common(1)[0][0] if kinds else ""
    if top == "tile products":
        return "simulator worker (cores' arithmetic)"
    if top in ("timing model (SystemC, fabric, cores)", "SFP arithmetic"):
        return "simulator SystemC thread"
    return "Python thread (PyTorch, the driver)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=["step", "forward"], default="step")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if not shutil.which("perf"):
        sys.exit("host_profile: needs perf (apt install linux-perf)")
    with tempfile.TemporaryDirectory() as tmp:
        ready, data = pathlib.Path(tmp) / "ready", pathlib.Path(tmp) / "perf.data"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPYRE_", "TORCH_SPYRE_"))}
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, args.what, str(args.steps), str(ready)],
            env=env,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        while not ready.exists() and child.poll() is None:
            time.sleep(0.05)
        if child.poll() is not None:
            sys.exit("host_profile: the workload ended before it was ready")
        perf = subprocess.Popen(
            ["perf", "record", "-F", str(HZ), "-p", str(child.pid), "-o", str(data)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        ms = float(child.stdout.readline().strip())
        perf.send_signal(signal.SIGINT)
        perf.wait()
        child.communicate("")
        script = subprocess.run(
            ["perf", "script", "-i", str(data), "-F", "comm,tid,time,ip,sym,dso"], capture_output=True, text=True
        ).stdout
    by_thread: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    names: dict[int, str] = {}
    first = last = None
    total = 0
    for line in script.splitlines():
        m = re.match(r"\s*(\S+)\s+(\d+)\s+([\d.]+):\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
        if not m:
            continue
        comm, tid, t, symbol, dso = m.group(1), int(m.group(2)), float(m.group(3)), m.group(4), m.group(5)
        names[tid] = comm
        first = t if first is None else first
        last = t
        by_thread[tid][kind_of(dso, symbol)] += 1
        total += 1
    if not total:
        sys.exit("host_profile: perf recorded no samples (perf_event_paranoid?)")
    print(f"llama {args.what} (4 x 128 tokens, 4 layers of 256): {ms:.1f} ms wall per {args.what} while sampled")
    print(f"{total} samples over {last - first:.2f} s; CPU per {args.what}, by thread:")
    for tid, kinds in sorted(by_thread.items(), key=lambda kv: -sum(kv[1].values())):
        n = sum(kinds.values())
        role = "PyTorch's autograd thread" if names[tid].startswith("pt_autograd") else thread_role(kinds)
        if n / total >= 0.01:
            print(f"  {n / HZ * 1e3 / args.steps:7.1f} ms  {role}")
    overall = collections.Counter()
    for kinds in by_thread.values():
        overall.update(kinds)
    print("by kind of work (share of all samples):")
    for name, n in overall.most_common():
        print(f"  {100 * n / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
