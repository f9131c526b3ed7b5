"""PyTorch's own op and module databases on spyre, against CPU (the driver: conformance.py).

The reviewed file conformance_ops.json says how each op of op_db runs in its primary dtype (float32,
or for ops without it the first dtype of conformance.DTYPES they have): "native" (every check
passes with TORCH_SPYRE_CPU_FALLBACK=error), "fallback" (it needs the CPU fallback, and is right
with it), or a known defect ("mismatch", "error", "crash"), which is expected to stay so until it is
fixed (then the test fails, and the file must say "native" or "fallback"). The default run takes a
fixed spread of the ops and their first samples; --slow takes every op and every sample.
scripts/conformance.py regenerates the file from a full run.
"""

from __future__ import annotations

import json
from pathlib import Path

import conformance as c
import pytest
import torch

CLASSIFICATION = json.loads((Path(__file__).with_name("conformance_ops.json")).read_text())
DEFAULT_SPREAD = 4  # every fourth op of the file in the default run
DEFAULT_SAMPLES = 2
OPS = {c.full_name(op): op for op in c.ops()}


def _chosen(slow: bool, spread: int = DEFAULT_SPREAD) -> list:
    names = sorted(CLASSIFICATION)
    return names if slow else names[::spread]


def pytest_generate_tests(metafunc):
    slow = metafunc.config.getoption("--slow")
    if "compiled_module" in metafunc.fixturenames:
        metafunc.parametrize("compiled_module", MODULES if slow else MODULES[::COMPILED_MODULE_SPREAD])
    if "op_name" in metafunc.fixturenames:
        metafunc.parametrize("op_name", _chosen(slow))
    if "compiled_op" in metafunc.fixturenames:
        metafunc.parametrize("compiled_op", _chosen(slow, COMPILED_SPREAD))


def _bad(results: dict, allowed: tuple) -> list:
    return [f"{check}: {outcome} {detail}" for check, rs in results.items() for outcome, detail in rs
            if outcome not in allowed]  # fmt: skip


def test_every_op_of_op_db_is_classified():
    OPS_WITH_A_DTYPE = {n for n, op in OPS.items() if c.primary_dtype(op)}
    missing = sorted(OPS_WITH_A_DTYPE - set(CLASSIFICATION))
    stale = sorted(set(CLASSIFICATION) - set(OPS))
    assert not missing and not stale, f"unclassified: {missing}; no longer in op_db: {stale}"


def test_an_op_runs_as_classified(op_name, request):
    kind = CLASSIFICATION[op_name]
    if kind == "crash":
        pytest.skip("kills the process: run scripts/conformance.py, which isolates it")
    limit = None if request.config.getoption("--slow") else DEFAULT_SAMPLES
    op = OPS[op_name]
    dtype = c.primary_dtype(op)
    native = c.run_op(op, dtype, limit, "error")
    if kind == "native":
        bad = _bad(native, ("pass", "skip"))
        assert not bad, f"{op_name} is classified native: " + "; ".join(bad[:4])
        return
    allowed = c.run_op(op, dtype, limit, "allow")
    if kind == "fallback":
        bad = _bad(allowed, ("pass", "skip"))
        assert not bad, f"{op_name} is wrong even with the CPU fallback: " + "; ".join(bad[:4])
        if c.summarise(native) in ("pass", "skip") and request.config.getoption("--slow"):
            pytest.fail(f"{op_name} now runs natively: classify it 'native' in conformance_ops.json")
        return
    # A known defect: it must still show, so that a fix updates the file (and cannot regress unseen).
    worst = c.summarise(allowed)
    if worst in ("pass", "skip", "fallback"):
        pytest.fail(f"{op_name} (classified '{kind}') is right now: reclassify it in conformance_ops.json")
    pytest.xfail(f"known {kind}: " + "; ".join(_bad(allowed, ("pass", "skip", "fallback"))[:2]))


# The compile front door: an op's samples compiled by the spyre backend against aot_eager on CPU
# (AOTAutograd over CPU's own kernels), in its primary dtype and in bfloat16. What differs for a
# reason that is not a defect of the compiled path: op -> why.
COMPILED_SPREAD = 3
COMPILED_KNOWN = {
    "sort": "the order of equal keys of an unstable sort (eager alike)",
    "argsort": "the order of equal keys of an unstable sort (eager alike)",
    "topk": "the order of equal keys (eager alike)",
    "matrix_exp": "its squarings amplify fp32 rounding: within 4e-4 of CPU",
    "softmax.with_dtype": "float64 results within 2e-16",
    "log_softmax.with_dtype": "float64 results within 1e-15",
    "nn.functional.softmin.with_dtype": "float64 results within 2e-16",
}


# Known defects of the compiled path, seen only in the samples --slow adds (it fails when one is
# fixed, so that this list shrinks): op -> what goes wrong.
COMPILED_DEFECTS: dict[str, str] = {}


@pytest.mark.parametrize("dtype_name", ["primary", "bfloat16"])
def test_an_op_compiled_matches_cpu(compiled_op, dtype_name, request):
    if compiled_op in COMPILED_KNOWN:
        pytest.skip(COMPILED_KNOWN[compiled_op])
    if compiled_op in COMPILED_DEFECTS and dtype_name == "primary" and request.config.getoption("--slow"):
        request.applymarker(pytest.mark.xfail(reason=COMPILED_DEFECTS[compiled_op], strict=True))
    op = OPS[compiled_op]
    name = c.primary_dtype(op) if dtype_name == "primary" else dtype_name
    if name is None or c.DTYPES[name] not in op.supported_dtypes("cpu") or compiled_op.startswith(c.UNDEFINED):
        pytest.skip(f"no {dtype_name} samples")
    torch.manual_seed(0)
    limit = 2 if request.config.getoption("--slow") else 1
    compared = 0
    for sample in c.samples(op, c.DTYPES[name], limit):
        if c.random_sample(sample):
            continue

        def fn(inp, *args, _op=op.op, **kwargs):
            return _op(inp, *args, **kwargs)

        torch._dynamo.reset()
        try:
            want = torch.compile(fn, backend="aot_eager", dynamic=False)(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - CPU refusing a sample leaves nothing to compare
            continue
        dev = c.on(sample, c.S, compiled_op)
        got = torch.compile(fn, backend="spyre", dynamic=False)(dev.input, *dev.args, **dev.kwargs)
        process = sample.output_process_fn_grad
        exact = c._gauge_free(fn, sample)
        c.compare_or_closer(process(got), process(want), compiled_op, exact, sample)
        compared += 1
    if compared == 0:
        pytest.skip("CPU refuses every sample compiled")


MODULES = [m.name for m in c.modules()]


@pytest.mark.parametrize("module", MODULES)
def test_a_module_of_module_db_matches_cpu_forward_and_backward(module):
    info = next(m for m in c.modules({module}))
    results = c.run_module(info, "allow")
    bad = [f"{o}: {d}" for o, d in results if o not in ("pass", "skip")]
    assert not bad, f"{module}: " + "; ".join(bad[:3])
    assert any(o == "pass" for o, _ in results), f"{module}: no input was compared: " + "; ".join(
        sorted({d for _, d in results})
    )


# The compile front door over module_db: every third module and its first input in training and in
# evaluation by default, every module and its first two inputs with --slow.
COMPILED_MODULE_SPREAD = 3


def test_a_module_of_module_db_compiled_matches_cpu(compiled_module, request):
    info = next(m for m in c.modules({compiled_module}))
    results = c.run_module(info, "allow", 2 if request.config.getoption("--slow") else 1, compiled=True)
    bad = [f"{o}: {d}" for o, d in results if o not in ("pass", "skip")]
    assert not bad, f"{compiled_module} compiled: " + "; ".join(bad[:3])
    if not any(o == "pass" for o, _ in results):
        pytest.skip("no input was compared: " + "; ".join(sorted({d for _, d in results}))[:200])
