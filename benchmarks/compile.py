"""torch.compile(backend="spyre") against eager spyre, on the decoders of the test suite.

Printed, never asserted (run it alone on the machine):
  compile     per model, a training step (forward and backward graphs) compiled in a fresh process
              with an empty program cache, then again in a second process on the same cache:
              graphs, programs, wall time of the first (compiling) step per graph, time the
              planner and the compiler took per graph, and the disk cache's hit rate
  forward     per model, the inference forward eager and compiled: simulated device cycles (median
              of --repeat calls after a warm-up, eager and compiled taking turns) and their ratio,
              launches per call, host wall time up to the card finishing (the simulation included)
  training    the same for a training step (forward, backward; no optimizer)
  large       a GPT block of width --width over --tokens bf16 tokens, compiled: the PT-array
              utilisation of each of its linear layers' matmuls (2MNK over the launch's cycles
              times the PT peak; each compiled alone, with its bias and its weight as the layer
              holds it, so that the launch holds nothing else) and of the compiled forward's
              launch (its FLOPs over its cycles and the peak), with where its core cycles went, and
              how far its output is from CPU's

    .venv/bin/python benchmarks/compile.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "backend" / "tests"))  # the decoders of test_models.py

COMPILE_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[-1])
import torch, torch_spyre
import torch.nn.functional as F
from torch_spyre._compile import compile_stats
from test_models import GPT, _llama_config
torch.manual_seed(0)
if sys.argv[1] == "gpt":
    model, vocab = GPT(), 96
else:
    transformers, config = _llama_config()
    model, vocab = transformers.LlamaForCausalLM(config), 128
model = torch.compile(model.to("spyre"), backend="spyre")
x = torch.randint(0, vocab, (2, 16)).to("spyre")
t = time.perf_counter()
out = model(x)
logits = out if isinstance(out, torch.Tensor) else out.logits
F.cross_entropy(logits.reshape(-1, vocab), x.reshape(-1)).backward()
torch.spyre.synchronize()
s = compile_stats()
s["first_step_seconds"] = time.perf_counter() - t
print(json.dumps(s))
"""


def _child(code: str, args: list, **env) -> object:
    """Runs `code` in a fresh process (the card in it, the test decoders importable); the JSON of
    its last line of output."""
    env = dict(os.environ, SPYRE_TRANSPORT="inproc", **env)
    argv = [sys.executable, "-c", code, *map(str, args), str(ROOT / "backend" / "tests")]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.exit(p.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def compile_figures(model: str) -> None:
    with tempfile.TemporaryDirectory() as cache:
        runs = [_child(COMPILE_CHILD, [model], TORCH_SPYRE_CACHE_DIR=cache) for _ in range(2)]
    for i, s in enumerate(runs, 1):
        graphs = s["graphs"]
        looked = s["disk_hits"] + s["disk_misses"]
        print(
            f"  {model} run {i}: {graphs} graphs, {s['segments']} programs, {s['eager_steps']} eager steps; "
            f"first step {s['first_step_seconds']:.2f} s = {s['first_step_seconds'] / graphs:.2f} s per graph "
            f"(planner and compiler {1e3 * s['compile_seconds'] / graphs:.1f} ms per graph, of which compiling "
            f"{1e3 * s['disk_compile_seconds'] / graphs:.1f} ms); disk cache {s['disk_hits']}/{looked} hits "
            f"({100 * s['disk_hits'] / max(looked, 1):.0f} %)"
        )


def _model(name: str):
    import torch
    from test_models import GPT, _llama_config

    torch.manual_seed(0)
    if name == "gpt":
        return GPT(), 96
    transformers, config = _llama_config()
    return transformers.LlamaForCausalLM(config), 128


def _measure(fns: list, repeat: int) -> list:
    """Median device cycles, launches and host wall time (to the card finishing) of each function,
    the functions taking turns so that drift on the host touches them alike."""
    import torch
    import torch_spyre
    from torch_spyre._compile import launch_count

    for fn in fns:
        fn()
    torch.spyre.synchronize()
    samples = [([], [], []) for _ in fns]
    for _ in range(repeat):
        for fn, (cycles, launches, walls) in zip(fns, samples, strict=True):
            c0, l0 = torch_spyre.device_cycles(), launch_count()
            t = time.perf_counter()
            fn()
            torch.spyre.synchronize()
            walls.append(time.perf_counter() - t)
            cycles.append(torch_spyre.device_cycles() - c0)
            launches.append(launch_count() - l0)
    return [tuple(statistics.median(x) for x in s) for s in samples]


def runtime_figures(name: str, repeat: int) -> None:
    import torch
    import torch.nn.functional as F

    model, vocab = _model(name)
    model = model.to("spyre")
    compiled = torch.compile(model, backend="spyre")
    x = torch.randint(0, vocab, (2, 16)).to("spyre")

    def forward(m):
        def run():
            with torch.no_grad():
                m(x)

        return run

    def step(m):
        def run():
            out = m(x)
            logits = out if isinstance(out, torch.Tensor) else out.logits
            F.cross_entropy(logits.reshape(-1, vocab), x.reshape(-1)).backward()

        return run

    for what, make in (("forward", forward), ("training", step)):
        e, c = _measure([make(model), make(compiled)], repeat)
        print(
            f"  {name} {what}: device {c[0]:.0f} cycles compiled / {e[0]:.0f} eager = {c[0] / e[0]:.2f}x; "
            f"launches {c[1]:.0f} / {e[1]:.0f}; host wall {1e3 * c[2]:.2f} ms / {1e3 * e[2]:.2f} ms"
        )


LARGE_CHILD = """
import copy, json, sys
import torch, torch_spyre
import torch.nn as nn
sys.path.insert(0, sys.argv[-1])
from test_models import GPTBlock
width, tokens = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
cpu_block = GPTBlock(width, width // 64).to(torch.bfloat16)
block = copy.deepcopy(cpu_block).to("spyre")
cpu_x = (torch.randn(tokens // 256, 256, width) * 0.5).to(torch.bfloat16)
x = cpu_x.to("spyre")
shapes = [(tokens, width, 3 * width), (tokens, width, width), (tokens, width, 4 * width), (tokens, 4 * width, width)]
linear = torch.compile(nn.functional.linear, backend="spyre", dynamic=False)
for m, k, n in shapes:  # as the block's layers run them: weight [n, k], a bias
    w, b = torch.randn(n, k, dtype=torch.bfloat16) * k**-0.5, torch.randn(n, dtype=torch.bfloat16)
    linear(torch.randn(m, k, dtype=torch.bfloat16).to("spyre"), w.to("spyre"), b.to("spyre"))
cb = torch.compile(block, backend="spyre")
with torch.no_grad():
    got = cb(x).cpu().float()
    want = cpu_block(cpu_x).float()
torch_spyre.write_reports()
print(json.dumps({"shapes": shapes, "max_abs_diff": (got - want).abs().max().item(),
                  "max_abs_want": want.abs().max().item()}))
"""


def large_figures(width: int, tokens: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stats = os.path.join(tmp, "stats.json")
        result = _child(LARGE_CHILD, [width, tokens], SPYRE_STATS=stats, TORCH_SPYRE_CACHE_DIR=tmp)
        doc = json.loads(Path(stats).read_text())
    shapes = result["shapes"]
    cfg = doc["config"]["chip"]
    peak = cfg["cores"] * cfg["corelets_per_core"] * cfg["pt_rows"] * cfg["pt_cols"] * cfg["pt_simd"] * 2
    launches = doc["cards"][0]["launches"]
    alone, block = launches[: len(shapes)], launches[len(shapes) :]
    for (m, k, n), launch in zip(shapes, alone, strict=True):
        cycles = launch["end"] - launch["start"]
        print(
            f"  linear {m}x{k}x{n} bf16 (weight [n, k], bias) alone: {cycles} cycles, "
            f"PT utilisation {2 * m * n * k / cycles / peak:.1%}"
        )
    for launch in block:
        cycles = launch["end"] - launch["start"]
        stall = launch["stall"]
        busy = sum(stall.get(k, 0) for k in ("compute", "memory", "sync", "issue"))
        where = ", ".join(f"{k} {stall.get(k, 0) / max(busy, 1):.0%}" for k in ("compute", "memory", "sync", "issue"))
        print(
            f"  block launch '{launch['op']}': {cycles} cycles, {launch['flops'] / 1e9:.2f} GFLOP, "
            f"PT utilisation {launch['flops'] / cycles / peak:.1%}; core cycles: {where}"
        )
    print(
        f"  the block's output against CPU's (bf16): largest difference {result['max_abs_diff']:.4g} "
        f"where the largest value is {result['max_abs_want']:.4g}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per figure (medians are printed)")
    parser.add_argument("--width", type=int, default=2048, help="model width of the large block")
    parser.add_argument("--tokens", type=int, default=2048, help="tokens of the large block (a multiple of 256)")
    parser.add_argument("--skip-large", action="store_true", help="leave out the large block")
    args = parser.parse_args()
    os.environ.setdefault("SPYRE_TRANSPORT", "inproc")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print("compile (a training step; fresh process, empty cache, then a second process)")
    for name in ("gpt", "llama"):
        compile_figures(name)
    os.environ["TORCH_SPYRE_CACHE_DIR"] = tempfile.mkdtemp()
    print("runtime (batch 2 x 16 tokens; medians)")
    for name in ("gpt", "llama"):
        runtime_figures(name, args.repeat)
    if not args.skip_large:
        print(f"large (a GPT block, width {args.width}, {args.tokens} bf16 tokens)")
        large_figures(args.width, args.tokens)


if __name__ == "__main__":
    main()
