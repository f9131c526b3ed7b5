"""A Llama-style decoder forward on the spyre device: the architect's reference workload.

Capture it once and replay it on any config with spyre-sim (docs/architect-guide.md, "Capture and
replay"):

    SPYRE_CAPTURE=llama.cap .venv/bin/python scripts/workloads/llama_forward.py
    build/tools/spyre_sim/spyre-sim replay llama.cap --set memory.bandwidth_gbps=102.4

HuggingFace's LlamaForCausalLM with a small config (4 layers of width 256, grouped-query
attention, SwiGLU), seeded weights and tokens; prints a checksum of the logits.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch_spyre
import transformers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--time", type=int, default=0, metavar="N", help="after one warm-up forward, time N more")
    args = parser.parse_args()
    torch_spyre.set_cpu_fallback("error")
    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 11 // 4,
        num_hidden_layers=args.layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=max(256, args.seq),
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval().to("spyre")
    tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq), generator=torch.Generator().manual_seed(0))
    tokens = tokens.to("spyre")
    with torch.no_grad():
        logits = model(tokens).logits
        print(f"logits checksum {logits.float().sum().item():.6f}")
        times = []
        for _ in range(args.time):
            start = time.perf_counter()
            model(tokens)
            torch.spyre.synchronize()
            times.append(time.perf_counter() - start)
    if times:
        print(f"forward ms {statistics.median(times) * 1e3:.1f} (median of {len(times)})")


if __name__ == "__main__":
    main()
