"""Runs PyTorch's OpInfo database on spyre against CPU (backend/tests/conformance.py) and writes what
it observes: for each op and dtype, the worst outcome of its checks with the CPU fallback forbidden
("error" mode: does it run natively?) and allowed ("allow": is what runs right?), and the counts.

    .venv/bin/python scripts/conformance.py                     # primary dtype, 6 samples per op
    .venv/bin/python scripts/conformance.py --dtypes all --samples 0 --out report.json
    .venv/bin/python scripts/conformance.py --write-classification   # rewrite the reviewed file

Ops run in worker processes, a few at a time: an op that kills its worker is recorded as "crash"
and the sweep goes on. `--write-classification` turns the primary-dtype results into
backend/tests/conformance_ops.json, the file test_conformance.py holds the device to; review
its diff like code.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASSIFICATION = ROOT / "backend" / "tests" / "conformance_ops.json"
WORKER = """
import json, sys
sys.path.insert(0, {tests!r})
import conformance as c
names, dtypes, limit, modes = json.loads(sys.argv[1])
for op in c.ops(set(names)):
    for dt in dtypes:
        if dt == "primary":
            dt = c.primary_dtype(op)
        if dt is None or c.DTYPES[dt] not in op.supported_dtypes("cpu"):
            continue
        row = {{"op": c.full_name(op), "dtype": dt}}
        for mode in modes:
            r = c.run_op(op, dt, limit, mode)
            row[mode] = {{"summary": c.summarise(r), "checks": r}}
        print(json.dumps(row), flush=True)
"""


def _env() -> dict:
    env = dict(os.environ)
    env.setdefault("SPYRE_CONFIG", str(ROOT / "configs" / "ieee_fp16.json"))  # fp16 compares with CPU's
    env["PYTHONWARNINGS"] = "ignore"
    return env


def _run(names: list, dtypes: list, limit, modes: list, timeout: int) -> tuple[list, set]:
    """Rows for `names` from one worker, and the names it did not finish (it died or hung)."""
    code = WORKER.format(tests=str(ROOT / "backend" / "tests"))
    arg = json.dumps([names, dtypes, limit, modes])
    try:
        p = subprocess.run(
            [sys.executable, "-c", code, arg], capture_output=True, text=True, env=_env(), timeout=timeout
        )
        stdout, died = p.stdout, p.returncode != 0
    except subprocess.TimeoutExpired as e:
        stdout, died = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), True
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    done = {r["op"] for r in rows}
    return rows, (set(names) - done) if died else set()


def sweep(names: list, dtypes: list, limit, modes: list, chunk: int, timeout: int, progress) -> list:
    rows, queue = [], [names[i : i + chunk] for i in range(0, len(names), chunk)]
    while queue:
        part = queue.pop(0)
        got, unfinished = _run(part, dtypes, limit, modes, timeout)
        rows.extend(got)
        progress(len(got))
        if unfinished:
            if len(part) == 1:  # this op takes its worker down
                rows.extend({"op": part[0], "dtype": dt, **{m: {"summary": "crash"} for m in modes}} for dt in dtypes)
                progress(1)
            else:  # one of them did: each alone, to find which
                queue[:0] = [[n] for n in sorted(unfinished)]
    return rows


def counts(rows: list, mode: str) -> dict:
    """Samples per outcome in `mode`, over every check."""
    c = collections.Counter()
    for r in rows:
        for results in r.get(mode, {}).get("checks", {}).values():
            c.update(outcome for outcome, _ in results)
        if r.get(mode, {}).get("summary") == "crash":
            c["crash"] += 1
    return dict(c)


def classification(rows: list, primary: dict) -> dict:
    """In each op's primary dtype: native (passes with the fallback forbidden), fallback (needs it,
    and is right with it), or what is wrong (mismatch, error, crash)."""
    out = {}
    for r in rows:
        if r["dtype"] != primary.get(r["op"]):
            continue
        native, allowed = r["error"]["summary"], r["allow"]["summary"]
        if native in ("pass", "skip"):
            kind = "native"
        elif native == "fallback" and allowed in ("pass", "skip"):
            kind = "fallback"
        else:
            kind = allowed if allowed in ("mismatch", "error", "crash") else native
        out[r["op"]] = kind
    return dict(sorted(out.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default="primary",
                        help="comma-separated, 'all', or 'primary' (float32, else the first dtype of "
                             "conformance.DTYPES the op has: what the classification holds)")  # fmt: skip
    parser.add_argument("--samples", type=int, default=6, help="samples per op and dtype (0: all)")
    parser.add_argument("--ops", help="comma-separated op names (default: every op of op_db)")
    parser.add_argument("--chunk", type=int, default=12, help="ops per worker process")
    parser.add_argument("--timeout", type=int, default=900, help="seconds a worker may take")
    parser.add_argument("--out", type=Path, help="write every row here (JSON)")
    parser.add_argument("--write-classification", action="store_true", help=f"rewrite {CLASSIFICATION.name}")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "backend" / "tests"))
    os.environ.update(_env())
    import conformance

    names = args.ops.split(",") if args.ops else [conformance.full_name(op) for op in conformance.ops()]
    dtypes = [d for d in conformance.DTYPES if d != "complex64"] if args.dtypes == "all" else args.dtypes.split(",")
    limit = args.samples or None
    from tqdm import tqdm

    t0 = time.time()
    with tqdm(total=len(names), unit="op", file=sys.stderr) as bar:
        rows = sweep(names, dtypes, limit, ["error", "allow"], args.chunk, args.timeout,
                     lambda n: bar.update(n / max(1, len(dtypes))))  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")
    for mode in ("error", "allow"):
        c = counts(rows, mode)
        checked = sum(v for k, v in c.items() if k != "skip")
        print(f"fallback={mode:5}: {c.get('pass', 0)} of {checked} checked samples pass "
              f"({100 * c.get('pass', 0) / max(1, checked):.1f} %); {dict(sorted(c.items()))}")  # fmt: skip
    primary = {conformance.full_name(op): conformance.primary_dtype(op) for op in conformance.ops()}
    cls = classification(rows, primary)
    kinds = collections.Counter(cls.values())
    f32 = collections.Counter(k for n, k in cls.items() if primary.get(n) == "float32")
    print(f"ops in their primary dtype: {dict(sorted(kinds.items()))}; of them float32: "
          f"{dict(sorted(f32.items()))} ({time.time() - t0:.0f} s)")  # fmt: skip
    for name, kind in cls.items():
        if kind not in ("native", "fallback"):
            print(f"  {kind:8} {name}")
    if args.write_classification:
        CLASSIFICATION.write_text(json.dumps(cls, indent=1) + "\n")
        print(f"wrote {CLASSIFICATION}")


if __name__ == "__main__":
    main()
