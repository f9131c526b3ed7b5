"""`spyre-sim model`: a HuggingFace LLM's inference on the card, without its weights.

spyre-sim hands its `model` subcommand to this module (it needs Python, torch and transformers);
`python -m spyre_arch.model_cli` is the same command. The work is in spyre_arch.model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from spyre_arch import model
from spyre_arch.grid import GridError, parse_value, set_dotted
from spyre_arch.stats import load_json

_EPILOG = """\
MODEL is a config.json, a model folder, a model id whose config is in the local HuggingFace cache
(nothing is downloaded), or one of the public configs built in: llama3-8b, llama3-70b,
mixtral-8x7b. The card runs in timing mode: every instruction and transfer is
timed, no floating-point value is computed, and no weight exists (docs/architect-guide.md,
"Full-size models without weights").

example:
  spyre-sim model llama3-8b --prefill 2048 --decode 128 --batch 1 8
  spyre-sim model mixtral.json --set memory.bandwidth_gbps=409.6 --json
"""


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="spyre-sim model",
        description="Simulate a full-size LLM's prefill and decode on the card without its weights.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", help="the model's HuggingFace config (see below)")
    p.add_argument("--prefill", type=int, default=2048, help="prompt tokens per sequence (default: 2048)")
    p.add_argument("--decode", type=int, default=128, help="decode steps after the prompt (default: 128)")
    p.add_argument("--batch", type=int, nargs="+", default=[1], help="batch sizes, one run each (default: 1)")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"), help="default: bfloat16")
    p.add_argument("--config", metavar="JSON", help="the card's config (default: $SPYRE_CONFIG, else the defaults)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a card config key on top")
    p.add_argument("--stats", metavar="FILE", help="write the run's stats here ({batch} in the name for several)")
    p.add_argument("--trace", metavar="FILE", help="write the run's Perfetto trace here (large for a full model)")
    p.add_argument("--timeout", type=float, metavar="SECONDS", help="stop a run after this much wall time")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    return p


def card_config(path: str | None, sets: Sequence[str]) -> dict[str, Any]:
    """The card config: a file (or $SPYRE_CONFIG's) with `--set key=value` on top."""
    path = path or os.environ.get("SPYRE_CONFIG")
    config = dict(load_json(path)) if path else {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise GridError(f"--set wants KEY=VALUE (got {item!r})")
        set_dotted(config, key, parse_value(value))
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command. Returns 0, 1 when a run failed or was refused, 2 on bad usage."""
    args = make_parser().parse_args(argv)
    try:
        card = card_config(args.config, args.set)
    except (OSError, ValueError) as e:
        print(f"spyre-sim model: {e}", file=sys.stderr)
        return 2
    results = []
    for batch in args.batch:
        try:
            result = model.predict(
                args.model,
                prefill=args.prefill,
                decode=args.decode,
                batch=batch,
                card=card,
                dtype=args.dtype,
                stats=_for_batch(args.stats, batch),
                trace=_for_batch(args.trace, batch),
                timeout=args.timeout,
                progress=True,
            )
        except model.ModelError as e:
            print(f"spyre-sim model: {e}", file=sys.stderr)
            return 1
        results.append(result)
        if not args.json:
            print(format_result(result))
            sys.stdout.flush()
    if args.json:
        print(json.dumps(results if len(results) > 1 else results[0], indent=2))
    return 0


def _for_batch(path: str | None, batch: int) -> str | None:
    """A report path with `{batch}` replaced by the batch size."""
    return path.replace("{batch}", str(batch)) if path else None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def format_result(r: dict[str, Any]) -> str:
    """The human-readable report of one workload."""
    w, card, mem, fig = r["workload"], r["card"], r["memory"], r["figures"]
    lines = [
        f"{r['model']}: {r['parameters'] / 1e9:.2f} B parameters in {r['dtype']}, batch {w['batch']}, "
        f"prefill {w['prefill']} tokens, {w['decode']} decode steps",
        f"  card        {card['cores']} cores at {card['clock_mhz']:g} MHz, PT peak {card['peak_tflops']:.1f} TFLOP/s, "
        f"LPDDR5 {card['memory_bandwidth_gbps']:g} GB/s",
        f"  memory      weights {mem['weight_bytes'] / 1e9:.2f} GB + KV cache {mem['kv_cache_bytes'] / 1e9:.2f} GB "
        f"of {card['memory_bytes'] / 1e9:.2f} GB",
    ]
    lines.append(_phase_line("first token", r["phases"]["prefill"]))
    if "decode" in r["phases"]:
        first, last = fig["decode_latency_first_last_s"]
        lines.append(_phase_line("per token", r["phases"]["decode"]) + f" (first {_ms(first)}, last {_ms(last)})")
        lines.append(
            f"  tokens/s    {fig['decode_tokens_per_s']:.1f} in decode, "
            f"{fig['tokens_per_s']:.1f} over the whole request"
        )
    lines.append(
        "  layer kind        prefill   share   util   roofline | decode/token   share   util"
        " | top stall (prefill, decode)"
    )
    kinds = sorted(
        set(r["phases"]["prefill"]["kinds"]) | set(r["phases"].get("decode", {}).get("kinds", {})),
        key=lambda k: -r["phases"]["prefill"]["kinds"].get(k, {}).get("seconds", 0),
    )
    for kind in kinds:
        p = r["phases"]["prefill"]["kinds"].get(kind, {})
        d = r["phases"].get("decode", {}).get("kinds", {}).get(kind, {})
        lines.append(
            f"  {kind:<14} {_cell(p.get('seconds'), _ms):>10} {_cell(p.get('share'), '{:.0%}'):>7} "
            f"{_cell(p.get('utilisation'), '{:.0%}'):>6} {_cell(p.get('roofline_seconds'), _ms):>10} | "
            f"{_cell(d.get('seconds'), _ms):>12} {_cell(d.get('share'), '{:.0%}'):>7} "
            f"{_cell(d.get('utilisation'), '{:.0%}'):>6} | "
            f"{_top_stall(p)}, {_top_stall(d)}"
        )
    if not r["stalls_attributed"]:
        lines.append(
            f"  stalls      not attributed: the stats file lists at most 100,000 launches, this run made "
            f"{r['launches']:,}"
        )
    host = r["host"]
    phases = ", ".join(f"{k} {v:.1f} s" for k, v in host["phase_cpu_seconds"].items())
    lines.append(
        f"  host        {host['cpu_seconds']:.1f} s CPU ({phases}), "
        f"{host['peak_rss_bytes'] / 2**20:.0f} MiB peak memory"
    )
    return "\n".join(lines)


def _phase_line(label: str, phase: dict[str, Any]) -> str:
    text = f"  {label:<11} {_ms(phase['seconds'])}"
    bound = phase.get("roofline")
    if bound:
        text += f", roofline {_ms(bound['seconds'])} ({bound['limit']}-bound), {phase['over_roofline']:.2f}x it"
        text += f", PT utilisation {phase['utilisation']:.0%}"
    return text


def _cell(value: float | None, fmt: Any) -> str:
    if value is None:
        return "-"
    return fmt(value) if callable(fmt) else fmt.format(value)


def _top_stall(row: dict[str, Any]) -> str:
    stall = row.get("stall")
    if not stall:
        return "-"
    category, share = max(stall.items(), key=lambda kv: kv[1])
    return f"{category} {share:.0%}"


if __name__ == "__main__":
    sys.exit(main())
