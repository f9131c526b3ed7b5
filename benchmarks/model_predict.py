"""Full-size models on the card without weights: Llama-3-8B and Mixtral-8x7B, prefill and decode.

Runs `spyre_arch.model.predict` (what `spyre-sim model` runs) on the two public configs below,
prefill 2048 tokens and 128 decode steps at batch 1 and 8 on one card, and prints per run the
simulated figures beside the independent roofline and what the host paid (CPU seconds, peak
memory of the run's process). The goals (issue 20): at most 10 minutes of host CPU and 2 GiB per
run. Run it alone on the machine:

    .venv/bin/python benchmarks/model_predict.py [--models llama3-8b] [--batch 1] [--decode 128]
"""

from __future__ import annotations

import argparse

from spyre_arch import model
from spyre_arch.model_cli import format_result
from spyre_arch.model_configs import CONFIGS

MODELS = {name: CONFIGS[name] for name in ("llama3-8b", "mixtral-8x7b")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prefill", type=int, default=2048)
    parser.add_argument("--decode", type=int, default=128)
    args = parser.parse_args()
    rows = []
    for name in args.models:
        for batch in args.batch:
            r = model.predict(MODELS[name], prefill=args.prefill, decode=args.decode, batch=batch)
            print(f"== {name}")
            print(format_result(r), flush=True)
            rows.append((name, batch, r))
    head = (
        "| model | batch | first token | roofline | per token | roofline | tokens/s (decode) | host CPU | host memory |"
    )
    print("\n" + head)
    print("|---|---|---|---|---|---|---|---|---|")
    for name, batch, r in rows:
        p, d = r["phases"]["prefill"], r["phases"].get("decode")
        decode = f"{d['seconds'] * 1e3:.1f} ms | {d['roofline']['seconds'] * 1e3:.1f} ms" if d else "- | -"
        tps = f"{r['figures']['decode_tokens_per_s']:.1f}" if d else "-"
        print(
            f"| {name} | {batch} | {p['seconds'] * 1e3:.1f} ms | {p['roofline']['seconds'] * 1e3:.1f} ms | {decode} | "
            f"{tps} | {r['host']['cpu_seconds']:.0f} s | {r['host']['peak_rss_bytes'] / 2**20:.0f} MiB |"
        )


if __name__ == "__main__":
    main()
