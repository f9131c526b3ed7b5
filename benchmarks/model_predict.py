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

# The public configs (the numbers that size the models), as their HuggingFace config.json has them.
LLAMA3_8B = {
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-05,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}
MIXTRAL_8X7B = {
    "model_type": "mixtral",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-05,
    "hidden_act": "silu",
    "sliding_window": None,
    "tie_word_embeddings": False,
}
MODELS = {"llama3-8b": LLAMA3_8B, "mixtral-8x7b": MIXTRAL_8X7B}


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
