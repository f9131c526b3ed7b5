"""How the host's cost of running on spyre grows with the work, beside CPU torch.

A Llama-style decoder (HuggingFace's LlamaForCausalLM: head dim 64, half as many key heads, an MLP
of 8/3 the width, 2 layers, vocabulary 512) at each width and sequence length (batch 1), eager on
both devices: the wall time of its forward (no grad) and of a training step (forward, loss,
backward, AdamW), medians of --repeat calls after a warm-up, on spyre and on CPU, and their ratio.
The ratio is what a CI user pays per test over running it on the CPU. Printed as a table
(Markdown), and plotted (ratio against tokens, a line per width) with --plot.

Run it alone on the machine (no build, no other job): the simulator's speed depends on the host.

    .venv/bin/python benchmarks/scaling.py [--widths 256 512 1024 2048] [--seqs 128 256 512 1024 2048]
"""

from __future__ import annotations

import argparse
import copy
import os

import torch
import torch_spyre  # noqa: F401  (the spyre device)
from compute_figures import llama_calls
from timing import median_seconds

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def llama(width: int, seq: int):
    """The decoder at `width` (seeded, on the CPU) and one sequence of seq + 1 tokens."""
    import transformers

    heads = max(width // 64, 2)
    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=width,
        intermediate_size=(8 * width // 3 + 7) // 8 * 8,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        max_position_embeddings=seq,
    )
    torch.manual_seed(0)
    data = torch.randint(0, config.vocab_size, (1, seq + 1), generator=torch.Generator().manual_seed(0))
    return transformers.LlamaForCausalLM(config), data


def measure(width: int, seq: int, repeat: int) -> dict:
    """Median seconds of the forward and the training step on each device."""
    base, data = llama(width, seq)
    out = {}
    for device in ("cpu", "spyre"):
        step, forward = llama_calls(copy.deepcopy(base), data, device)
        out[device] = (median_seconds(forward, repeat), median_seconds(step, repeat))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 512, 1024, 2048])
    parser.add_argument("--seqs", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    parser.add_argument("--repeat", type=int, default=2, help="timed calls per figure after a warm-up")
    parser.add_argument("--plot", help="write the ratio's plot to this file (PNG, SVG or PDF)")
    args = parser.parse_args()
    rows = []
    print("| width | tokens | forward spyre / CPU | ratio | training step spyre / CPU | ratio |")
    print("|---|---|---|---|---|---|")
    for width in args.widths:
        for seq in args.seqs:
            m = measure(width, seq, args.repeat)
            (cf, cs), (sf, ss) = m["cpu"], m["spyre"]
            rows.append((width, seq, sf / cf, ss / cs))
            print(
                f"| {width} | {seq} | {sf * 1e3:,.0f} / {cf * 1e3:,.0f} ms | {sf / cf:.2f}x "
                f"| {ss * 1e3:,.0f} / {cs * 1e3:,.0f} ms | {ss / cs:.2f}x |",
                flush=True,
            )
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        for ax, column, title in ((axes[0], 2, "forward"), (axes[1], 3, "training step")):
            for width in args.widths:
                points = [(r[1], r[column]) for r in rows if r[0] == width]
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"width {width}")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("tokens")
            ax.set_title(title)
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel("host wall time, spyre / CPU")
        axes[1].legend()
        fig.tight_layout()
        fig.savefig(args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
