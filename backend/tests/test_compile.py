"""torch.compile(backend="spyre"): whole graphs planned into fused programs (torch_spyre/_compile),
checked against CPU torch and against the same model run eagerly on spyre."""

from __future__ import annotations

import copy
import gc
import io
import json
import logging
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_spyre
from conftest import run_with_stats
from test_models import GPT, _batches, _llama_config, _train, moe_llama
from torch_spyre._compile import compile_stats, launch_count

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def _fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_SPYRE_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    torch_spyre.set_cpu_fallback("error")
    compile_stats(reset=True)
    yield
    torch_spyre.set_cpu_fallback("warn")
    torch._dynamo.reset()
    s = compile_stats()
    assert s["graphs_run_eagerly"] == 0 and s["programs_not_compiled"] == 0, s  # no planner or compiler gap


def _spyre(*ts):
    return [t.to("spyre") for t in ts]


def test_the_backend_is_listed_after_a_plain_import_torch():
    code = "import torch; print('spyre' in torch._dynamo.list_backends())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_a_fused_function_is_one_launch_and_matches_cpu():
    def f(x, w, b):
        y = F.gelu(x @ w + b) * 2.0
        return y.sum(-1), torch.softmax(y, -1), torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)

    args = [torch.randn(32, 64), torch.randn(64, 48), torch.randn(48)]
    cf = torch.compile(f, backend="spyre")
    cf(*_spyre(*args))  # compile
    before = launch_count()
    out = cf(*_spyre(*args))
    assert launch_count() - before == 1  # matmul, epilogue, reductions and softmax: one program
    for o, r in zip(out, f(*args), strict=True):
        torch.testing.assert_close(o.cpu(), r, rtol=1e-4, atol=1e-4)


def _compiled_training(make_model, vocab):
    torch.manual_seed(0)
    cpu = make_model()
    eager = copy.deepcopy(cpu).to("spyre")
    compiled = copy.deepcopy(cpu).to("spyre")
    batches = _batches(vocab, 16)
    x = batches[0][0]
    with torch.no_grad():
        ref = cpu(x)
        ref = ref if isinstance(ref, torch.Tensor) else ref.logits
        before = launch_count()
        e = eager(x.to("spyre"))
        eager_launches = launch_count() - before
    cm = torch.compile(compiled, backend="spyre")
    with torch.no_grad():
        cm(x.to("spyre"))  # the inference graph compiles here
        before = launch_count()
        c = cm(x.to("spyre"))
        compiled_launches = launch_count() - before
    c = c if isinstance(c, torch.Tensor) else c.logits
    e = e if isinstance(e, torch.Tensor) else e.logits
    torch.testing.assert_close(c.cpu(), ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(c.cpu(), e.cpu(), rtol=1e-5, atol=1e-5)
    want = _train(cpu, batches, "cpu")
    got = _train(cm, batches, "spyre")  # forward and backward graphs
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-4)
    assert want[-1] < want[0]
    return eager_launches, compiled_launches


def test_gpt_compiled_trains_like_cpu_in_a_few_launches():
    eager, compiled = _compiled_training(GPT, 96)
    assert compiled * 2 <= eager, (compiled, eager)  # 10 against 27 when written


def test_llama_compiled_trains_like_cpu_in_fewer_launches():
    transformers, config = _llama_config()
    eager, compiled = _compiled_training(lambda: transformers.LlamaForCausalLM(config), 128)
    assert compiled * 2 <= eager, (compiled, eager)


def test_a_mixture_of_experts_llama_compiled_trains_like_cpu():
    _compiled_training(moe_llama, 128)  # routing (topk, scatter, cumsum, index_add) runs as eager steps
    assert compile_stats()["eager_steps"] > 0


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


_ONE_OP = {  # each compiles to a one-node segment: its IR is the eager kernel's
    "add_alpha": (lambda x, y: torch.add(x, y, alpha=-0.5), ((8, 33), (33,))),
    "div_trunc_bf16": (lambda x, y: torch.div(x * 8, y, rounding_mode="trunc"), ((6, 40), (6, 40)), torch.bfloat16),
    "pow_2": (lambda x: x.pow(2), ((5, 17),)),
    "pow_tensor": (lambda x, y: x.abs().pow(y), ((5, 17), (5, 17))),
    "clamp_where": (lambda x, y: torch.where(x > 0, x.clamp(max=0.3), y), ((4, 9), (4, 9))),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), ((7, 65),)),
    "sum_mean_amax": (lambda x: (x.sum(1), x.mean((0, 2)), x.amax(-1)), ((3, 5, 7),)),
    "var": (lambda x: torch.var(x, dim=1, correction=0), ((6, 50),)),
    "addmm": (lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0), ((24,), (16, 40), (40, 24))),
    "embedding": (lambda w, i: F.embedding(i, w), ((50, 16), "idx")),
    "cat": (lambda x, y: torch.cat([x, y.t()], 0), ((3, 8), (8, 5))),
    "attention": (_sdpa, ((1, 4, 16, 8), (1, 2, 16, 8), (1, 2, 16, 8))),
}


def _one_op_inputs(shapes, dtype):
    g = torch.Generator().manual_seed(0)
    out = []
    for s in shapes:
        if s == "idx":
            out.append(torch.randint(0, 50, (3, 7), generator=g))
        else:
            out.append(torch.randn(s, generator=g).to(dtype))
    return out


@pytest.mark.parametrize("name", sorted(_ONE_OP))
def test_an_op_computes_the_same_compiled_as_eagerly(name):
    """One lowering per op: a compiled op gives the eager kernel's bits (both doors take their IR
    from the op library), and both match CPU."""
    fn, shapes, *dtype = _ONE_OP[name]
    dtype = dtype[0] if dtype else torch.float32
    args = _one_op_inputs(shapes, dtype)
    eager = fn(*_spyre(*args))
    compiled = torch.compile(fn, backend="spyre")(*_spyre(*args))
    want = fn(*args)
    eager, compiled, want = (x if isinstance(x, tuple) else (x,) for x in (eager, compiled, want))
    for e, c, w in zip(eager, compiled, want, strict=True):
        assert torch.equal(e.cpu(), c.cpu()), name
        torch.testing.assert_close(c.cpu(), w, rtol=2e-2 if dtype != torch.float32 else 1e-4, atol=1e-4)
    assert compile_stats()["eager_steps"] == 0


def test_graph_breaks_run_both_sides_compiled():
    def f(x):
        y = torch.tanh(x) * 3
        print("a graph break", end="")
        return (y + 1).sum(0)

    x = torch.randn(8, 8)
    out = torch.compile(f, backend="spyre")(x.to("spyre"))
    torch.testing.assert_close(out.cpu(), f(x), rtol=1e-5, atol=1e-5)
    assert compile_stats()["graphs"] == 2


def test_ops_the_planner_does_not_take_run_as_eager_kernels():
    def f(x):
        return torch.cumsum(torch.exp(x), dim=-1) * 2

    x = torch.randn(4, 16)
    out = torch.compile(f, backend="spyre")(x.to("spyre"))
    torch.testing.assert_close(out.cpu(), f(x), rtol=1e-4, atol=1e-4)
    s = compile_stats()
    assert s["eager_steps"] >= 1 and s["segments"] >= 1


def test_slice_scatter_and_fills_run_in_the_program():
    def f(x, y):
        base = torch.full_like(x, 0.5)
        return torch.slice_scatter(base, y, dim=1, start=-6, step=2) * x, torch.slice_scatter(x, y.exp(), 1, 1, 7, 2)

    x, y = torch.randn(4, 8), torch.randn(4, 3)
    out = torch.compile(f, backend="spyre")(x.to("spyre"), y.to("spyre"))
    for o, r in zip(out, f(x, y), strict=True):
        torch.testing.assert_close(o.cpu(), r, rtol=1e-5, atol=1e-5)
    assert compile_stats()["eager_steps"] == 0


def test_a_mutated_input_is_read_before_it_is_written():
    def f(x, buf):
        y = torch.exp(x) * buf
        buf.mul_(2)
        return y + buf

    x, buf = torch.randn(8, 8), torch.randn(8, 8)
    sx, sbuf = x.to("spyre"), buf.to("spyre")
    out = torch.compile(f, backend="spyre")(sx, sbuf)
    want = f(x, buf)
    torch.testing.assert_close(out.cpu(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sbuf.cpu(), buf, rtol=0, atol=0)


def test_the_device_interface_is_registered_for_dynamo():
    from torch._dynamo.device_interface import get_interface_for_device

    torch.compile(lambda x: torch.sin(x) + 1, backend="spyre")(torch.ones(4).to("spyre"))
    interface = get_interface_for_device("spyre")
    assert interface.device_count() == torch.spyre.device_count()
    assert interface.current_device() == torch.spyre.current_device()
    assert interface.is_available()


def test_guards_recompile_for_a_new_dtype_and_not_for_the_same_input():
    def f(x):
        return torch.sigmoid(x) + x

    cf = torch.compile(f, backend="spyre", dynamic=False)
    x = torch.randn(6, 5)
    cf(x.to("spyre"))
    cf((x + 1).to("spyre"))
    assert compile_stats()["graphs"] == 1
    out = cf(x.half().to("spyre"))
    assert compile_stats()["graphs"] == 2
    torch.testing.assert_close(out.cpu(), f(x.half()), rtol=1e-3, atol=1e-3)


def test_dynamic_shapes_plan_per_shape_up_to_the_limit(monkeypatch, caplog):
    monkeypatch.setenv("TORCH_SPYRE_RECOMPILE_LIMIT", "2")

    def f(x):
        return torch.relu(x) * x.sum(-1, keepdim=True)

    cf = torch.compile(f, backend="spyre", dynamic=True)
    with caplog.at_level(logging.WARNING, logger="torch_spyre"):
        for n in (3, 5, 7, 5, 9, 11):
            x = torch.randn(n, 4)
            torch.testing.assert_close(cf(x.to("spyre")).cpu(), f(x), rtol=1e-5, atol=1e-5)
    s = compile_stats()
    assert s["graphs"] == 1  # one symbolic graph from Dynamo
    assert s["plans"] == 2 and s["shape_recompiles"] == 1  # n = 3 and 5; then the limit
    assert s["shape_limit_hits"] == 3  # n = 7, 9 and 11 ran op by op...
    assert sum("more than 2 shapes" in r.getMessage() for r in caplog.records) == 1  # ...with one warning


def test_an_nn_module_under_autocast_matches_cpu_autocast():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16))
    x = torch.randn(8, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = model(x)
    sp = copy.deepcopy(model).to("spyre")
    cm = torch.compile(sp, backend="spyre")
    with torch.autocast("spyre", dtype=torch.bfloat16):
        out = cm(x.to("spyre"))
    assert out.dtype == torch.bfloat16 == ref.dtype
    torch.testing.assert_close(out.cpu().float(), ref.float(), rtol=2e-2, atol=2e-2)


_CACHE_SCRIPT = """
import json, torch, torch_spyre
from torch_spyre._compile import compile_stats
def f(x, w):
    return torch.softmax(x @ w, -1) * 2
cf = torch.compile(f, backend="spyre")
out = cf(torch.ones(16, 32).to("spyre"), torch.ones(32, 8).to("spyre"))
assert torch.allclose(out.cpu(), torch.full((16, 8), 0.25))
print(json.dumps(compile_stats()))
"""


def test_the_program_cache_works_across_processes(tmp_path):
    env = dict(os.environ, TORCH_SPYRE_CACHE_DIR=str(tmp_path / "shared"))
    env.pop("SPYRE_TRANSPORT", None)

    def run():
        out = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], capture_output=True, text=True, env=env, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["disk_misses"] >= 1 and first["disk_hits"] == 0
    assert second["disk_misses"] == 0 and second["disk_hits"] == first["disk_misses"]


def test_compiled_programs_are_held_by_their_graphs_and_the_recent_ones_are_bounded(monkeypatch):
    """A compiled graph holds its programs; the process keeps only the last few besides (once every
    program of every graph ever compiled stayed in a map for the life of the process)."""
    from torch_spyre._compile import cache

    monkeypatch.setattr(cache, "RECENT_PROGRAMS", 2)
    cache._recent.clear()
    f = torch.compile(lambda x: torch.exp(x) * 3, backend="spyre", dynamic=False)
    xs = [torch.randn(n, 8) for n in (8, 16, 24, 32, 40)]  # a graph and a program per shape
    for x in xs:
        torch.testing.assert_close(f(x.to("spyre")).cpu(), torch.exp(x) * 3, rtol=1e-5, atol=1e-5)
    assert len(cache._recent) == 2
    for x in xs:  # evicted from the recent ones, still launchable by their graphs
        torch.testing.assert_close(f(x.to("spyre")).cpu(), torch.exp(x) * 3, rtol=1e-5, atol=1e-5)


def test_a_damaged_cache_file_is_compiled_again(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_SPYRE_CACHE_DIR", str(tmp_path / "damaged"))
    from torch_spyre._compile import cache

    def f(x):
        return torch.exp(x) * 3

    x = torch.randn(64, 64)
    torch.compile(f, backend="spyre")(x.to("spyre"))
    (path,) = list((tmp_path / "damaged").rglob("*.prg"))
    good = path.read_bytes()
    for damaged in (good[:-7], good[:-40] + bytes(40), b"not a program"):
        path.write_bytes(damaged)
        cache._recent.clear()
        torch._dynamo.reset()
        compile_stats(reset=True)
        out = torch.compile(f, backend="spyre")(x.to("spyre"))
        torch.testing.assert_close(out.cpu(), f(x), rtol=1e-5, atol=1e-5)
        assert compile_stats()["disk_misses"] == 1 and path.read_bytes() == good  # compiled and rewritten


def test_compile_debug_dumps_the_graph_plan_and_programs(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_SPYRE_COMPILE_DEBUG", str(tmp_path / "dbg"))

    def f(a, b):
        return torch.exp(a @ b - 1)

    torch.compile(f, backend="spyre")(torch.randn(8, 8).to("spyre"), torch.randn(8, 8).to("spyre"))
    (d,) = list((tmp_path / "dbg").iterdir())
    assert "aten.mm" in (d / "graph.py").read_text()
    plan = (d / "plan.txt").read_text()
    assert "program s0" in plan and "fuses sub" in plan
    assert json.loads((d / "s0.json").read_text())["ops"][0]["matmul"]
    listing = (d / "s0.txt").read_text()
    assert "MATMUL" in listing and "UNARY" in listing


def test_unsupported_and_malformed_are_two_types():
    """The front door runs a segment's ops one by one only on Unsupported; a Malformed graph is a
    bug and raises (both were one std::invalid_argument, so a bad graph fell back quietly)."""
    from torch_spyre import _C

    assert issubclass(_C.Unsupported, NotImplementedError) and issubclass(_C.Malformed, ValueError)
    assert not issubclass(_C.Unsupported, ValueError) and not issubclass(_C.Malformed, NotImplementedError)
    view = {"offset": 0, "dtype": "f32"}
    graph = {
        "num_args": 3,
        "views": [
            {**view, "arg": 0, "sizes": [8, 8], "strides": [8, 1]},
            {**view, "arg": 1, "sizes": [8, 8], "strides": [8, 1]},
            {**view, "arg": 2, "sizes": [8, 8], "strides": [1, 8]},  # a column-major output
        ],
        "ops": [{"matmul": {"a": 0, "b": 1, "out": 2, "compute": "f32"}}],
    }
    with pytest.raises(_C.Unsupported, match="output rows not contiguous"):
        _C._compile_graph(0, json.dumps(graph))
    graph["views"][1]["sizes"] = [9, 8]
    with pytest.raises(_C.Malformed, match="shapes do not agree"):
        _C._compile_graph(0, json.dumps(graph))


def test_a_malformed_graph_is_a_value_error_naming_the_field():
    from torch_spyre import _C

    bad = {"num_args": 1, "views": [{"arg": 3, "offset": 0, "sizes": [4], "strides": [1], "dtype": "f32"}], "ops": []}
    with pytest.raises(ValueError, match=r"views\[0\]\.arg"):
        _C._compile_graph(0, json.dumps(bad))
    bad["views"][0]["arg"] = 0
    bad["ops"] = [{"pointwise": {"compute": "f32", "inputs": [], "out": 0, "steps": [{"kind": "frob"}]}}]
    with pytest.raises(ValueError, match=r"ops\[0\]\.pointwise\.steps\[0\]\.kind"):
        _C._compile_graph(0, json.dumps(bad))
    bad["ops"][0]["pointwise"]["inputs"] = [{"view": 0}]
    bad["ops"][0]["pointwise"]["steps"] = [{"kind": "round", "to": "f32", "args": [0]}]
    with pytest.raises(ValueError, match=r"ops\[0\]\.pointwise\.steps\[0\]\.to"):
        _C._compile_graph(0, json.dumps(bad))


def test_repeated_key_heads_fold_into_the_attention_and_match_cpu():
    """HuggingFace's repeat_kv (grouped-query attention with a mask, as its static cache gives)
    copies each key and value head g times; compiled, the attention reads the unrepeated heads."""
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids, step = torch.randint(0, 256, (2, 20)), torch.tensor([[5], [7]])
    torch_spyre.set_cpu_fallback("error")
    compile_stats(reset=True)
    with torch.no_grad():
        first = model(ids, use_cache=True)
        want = model(step, past_key_values=first.past_key_values, use_cache=True).logits
        dev = copy.deepcopy(model).to("spyre")
        for layer in dev.model.layers:
            layer.self_attn.forward = torch.compile(layer.self_attn.forward, backend="spyre")
        cache = transformers.StaticCache(config=cfg, max_cache_len=32)
        got_first = dev(ids.to("spyre"), cache=cache, use_cache=True).logits
        got = dev(step.to("spyre"), cache=cache, use_cache=True).logits
    torch.testing.assert_close(got_first.cpu(), first.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    assert compile_stats()["kv_repeats_folded"] >= 1


class _RMSNorm(nn.Module):
    """As HuggingFace's Llama writes it: in fp32, mean of squares, rsqrt, weight."""

    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d))

    def forward(self, x):
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norms_compile_to_one_pass_over_their_rows_and_match_cpu(dtype):
    """A layer norm and an RMS norm compiled (inference): their means and variances are steps of
    the normalising expression, nothing of them goes through memory, and the results are CPU's:
    rows of constants (variance exactly 0), rows far from 0 (the variance's cancellation), a NaN."""
    torch.manual_seed(0)
    ln, rms = nn.LayerNorm(96).to(dtype), _RMSNorm(96).to(dtype)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()

    norms = nn.ModuleList([ln, rms])

    def f(m, x):
        return m[1](m[0](x) + x)

    x = torch.randn(3, 40, 96)
    x[0, 1] = 2.5  # constant row
    x[1, 2] = 1e4 + torch.randn(96)  # a large mean
    x[2, 3, 5] = float("nan")
    x = x.to(dtype)
    dev = copy.deepcopy(norms).to("spyre")
    cf = torch.compile(f, backend="spyre")
    with torch.no_grad():
        cf(dev, x.to("spyre"))
        before = launch_count()
        got = cf(dev, x.to("spyre"))
        assert launch_count() - before == 1
        want = f(norms, x)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol, equal_nan=True)
    assert compile_stats()["row_reductions_fused"] == 3  # the layer norm's mean and variance, the RMS


def test_a_softmax_written_out_and_reductions_of_other_dims_match_cpu():
    """Reductions over the last dim fuse into their consumers; one over another dim, or one whose
    value is also a result, is computed apart: every result is CPU's."""

    def f(x, w):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        p = e / e.sum(-1, keepdim=True)
        m = x.mean(-1)  # a result itself: not fused
        c = x - x.mean(0, keepdim=True)  # over the first dim
        return p * w, m, c * x.var(-1, keepdim=True, correction=0)

    torch.manual_seed(1)
    x, w = torch.randn(64, 300) * 4, torch.randn(300)
    got = torch.compile(f, backend="spyre")(*_spyre(x, w))
    for g, r in zip(got, f(x, w), strict=True):
        torch.testing.assert_close(g.cpu(), r, rtol=1e-4, atol=1e-5)
    assert compile_stats()["row_reductions_fused"] == 3  # amax, sum and var


_PRE = [lambda x: x, lambda x: x * 2 - 1, lambda x: torch.exp(x * 0.1), lambda x: x.abs()]
_RED = [
    lambda x: x.sum(-1, keepdim=True),
    lambda x: x.mean(-1).unsqueeze(-1),
    lambda x: x.amax(-1, keepdim=True),
    lambda x: x.amin(-1, keepdim=True),
    lambda x: x.var(-1, keepdim=True),
    lambda x: x.var(-1, keepdim=True, correction=0),
]
_ROW = [lambda r: r, lambda r: r + 0.5, lambda r: torch.rsqrt(r.abs() + 1), lambda r: r * r]
_USE = [
    lambda x, r: x - r,
    lambda x, r: x * r,
    lambda x, r: torch.tanh(x + r),
    lambda x, r: torch.where(x > r, x, r),
]


@pytest.mark.parametrize("seed", range(8))
def test_random_row_reductions_fused_into_their_consumers_match_cpu(seed):
    """A small differential fuzzer of the fusion: a random shape (rows of 2 to 700 elements, 1 to 3
    dims, fp32 or bf16 input), a random elementwise producer, reduction over the last dim, per-row
    steps and consumer; compiled against CPU."""
    g = torch.Generator().manual_seed(seed)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    rank = int(torch.randint(1, 4, (1,), generator=g))
    shape = [int(torch.randint(1, 6, (1,), generator=g)) for _ in range(rank - 1)]
    shape.append(int(torch.randint(2, 701, (1,), generator=g)))  # a row of one is not reduced at all
    dtype = pick([torch.float32, torch.bfloat16])
    pre, red, row, use = pick(_PRE), pick(_RED), pick(_ROW), pick(_USE)

    def f(x):
        h = pre(x.to(torch.float32))
        return use(h, row(red(h))).to(x.dtype)

    x = (torch.randn(shape, generator=g) * 3).to(dtype)
    got = torch.compile(f, backend="spyre")(x.to("spyre"))
    want = f(x)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol, equal_nan=True)
    assert compile_stats()["row_reductions_fused"] == 1


def test_rows_too_long_to_fuse_are_reduced_apart_and_match_cpu(caplog):
    """A layer norm over rows longer than the scratchpad holds with its steps is planned again with
    its reductions as passes of their own: nothing runs op by op, and the result is CPU's."""
    ln = nn.LayerNorm(100_000)
    x = torch.randn(2, 100_000)
    with torch.no_grad(), caplog.at_level(logging.INFO, logger="torch_spyre.compile"):
        got = torch.compile(ln.to("spyre"), backend="spyre")(x.to("spyre"))
        want = ln.cpu()(x)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    assert "does not compile with its row reductions fused" in caplog.text
    assert compile_stats()["row_reductions_fused"] == 0


def _matches_cpu_with_plan(f, args, dtype, tmp_path, monkeypatch) -> str:
    """Asserts that f compiled on spyre gives CPU's results over args in dtype; returns its plan."""
    monkeypatch.setenv("TORCH_SPYRE_COMPILE_DEBUG", str(tmp_path / "dbg"))
    args = [t.to(dtype) for t in args]
    with torch.no_grad():
        got = torch.compile(f, backend="spyre")(*_spyre(*args))
        want = f(*args)
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), r, rtol=tol, atol=tol)
    (d,) = list((tmp_path / "dbg").iterdir())
    return (d / "plan.txt").read_text()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activations_apply_in_the_matmul_epilogue_and_match_cpu(dtype, tmp_path, monkeypatch):
    """gelu (both forms), relu, silu, sigmoid and tanh of a linear layer's product are applied
    before the product is stored (the plan fuses them into the matmul), and give CPU's values: the
    product is rounded to its type first, as CPU stores it."""
    torch.manual_seed(0)
    acts = [F.gelu, lambda h: F.gelu(h, approximate="tanh"), F.relu, F.silu, torch.sigmoid, torch.tanh]
    x, w, b = torch.randn(4, 24, 64), torch.randn(80, 64) * 0.2, torch.randn(80)

    def f(x, w, b):
        return [act(F.linear(x, w, b)) for act in acts] + [torch.tanh(x[0] @ w.t())]

    plan = _matches_cpu_with_plan(f, (x, w, b), dtype, tmp_path, monkeypatch)
    assert plan.count("fuses gelu") == 2 and "fuses relu" in plan and "fuses silu" in plan
    assert "fuses sigmoid" in plan and plan.count("fuses tanh") == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_adds_apply_in_the_matmul_epilogue_and_match_cpu(dtype, tmp_path, monkeypatch):
    """A residual added to a linear layer's product (or to its activation, or to a batched
    product), or a gate multiplying it, is applied in the matmul's epilogue; one made after the
    matmul is applied apart. Every result is CPU's: each step rounds to the type as CPU's do."""
    torch.manual_seed(0)
    x, h, w, b = torch.randn(4, 24, 80), torch.randn(4, 24, 64), torch.randn(80, 64) * 0.2, torch.randn(80)
    bx, by = torch.randn(4, 24, 64), torch.randn(4, 64, 80) * 0.2

    def f(x, h, w, b, bx, by):
        late = h @ w.t()
        return [
            x + F.linear(h, w, b),
            F.gelu(F.linear(h, w, b)) + x,
            torch.bmm(bx, by) + x,
            late + (x * 2),  # made after the product: not fused
            F.silu(h @ w.t()) * F.linear(h, w, b),  # a gated MLP: the up projection times the gate
        ]

    plan = _matches_cpu_with_plan(f, (x, h, w, b, bx, by), dtype, tmp_path, monkeypatch)
    assert "-> add in" in plan and "fuses gelu, add_1" in plan and "fuses add_2" in plan
    assert "add_3 (aten.add.Tensor)" in plan  # the late residual: an op of its own
    assert "fuses silu" in plan and "fuses mul_1" in plan


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def test_bf16_chains_fuse_with_each_value_rounded_as_cpu_rounds_it(tmp_path, monkeypatch):
    """Elementwise chains in bf16 (a rotary embedding as HuggingFace writes it, a chain of
    products and sums) are fused into one expression each, and each intermediate is rounded to
    bf16 inside it as CPU rounds each op's result: the values are CPU's bit for bit where every op
    is correctly rounded. Computing the chain in fp32 and rounding once gives other bits for these
    inputs, so the rounding is tested."""
    torch.manual_seed(0)
    q, cos, sin = torch.randn(2, 4, 64, 128), torch.randn(64, 128), torch.randn(64, 128)
    x, y, z = torch.randn(3, 64, 300).unbind(0)

    def f(q, cos, sin, x, y, z):
        return q * cos + _rotate_half(q) * sin, (x * y + z) * x - y

    monkeypatch.setenv("TORCH_SPYRE_COMPILE_DEBUG", str(tmp_path / "dbg"))
    args = [t.to(torch.bfloat16) for t in (q, cos, sin, x, y, z)]
    with torch.no_grad():
        got = torch.compile(f, backend="spyre")(*_spyre(*args))
    want = f(*args)
    for g, r in zip(got, want, strict=True):
        assert torch.equal(g.cpu(), r)
    once = ((x * y + z) * x - y).to(torch.bfloat16)  # the chain in fp32, rounded once
    assert not torch.equal(once, want[1])
    (d,) = list((tmp_path / "dbg").iterdir())
    plan = (d / "plan.txt").read_text()
    # The rotation (its negated half and concatenation) and both products are steps of the sum,
    # which reads q, cos and sin once; the chain is one expression.
    assert "fuses mul, rotate_half_default, mul_1" in plan and "fuses mul_2, add_1, mul_3" in plan, plan
    assert compile_stats()["rotations_fused"] == 1


def test_only_the_rotate_half_pattern_becomes_the_rotation_and_each_result_is_cpus():
    """The rewrite takes `cat((-x[..., h:], x[..., :h]), -1)` and nothing like it: the halves the
    other way round, another dim, an odd width or halves of two tensors stay cats. Every result
    is CPU's bit for bit, and the rotation run eagerly (where a plan leaves it) is the cat."""
    torch.manual_seed(2)
    x, y = torch.randn(3, 5, 64), torch.randn(3, 5, 64)
    odd = torch.randn(4, 7)

    def f(x, y, odd):
        return (
            _rotate_half(x) * 2,  # the pattern, fp32
            torch.cat((-x[..., :32], x[..., 32:]), -1),  # not a rotation
            torch.cat((-x[:, 2:], x[:, :2]), 1),  # along another dim (of 5 rows: not halves)
            torch.cat((-x[..., 32:], y[..., :32]), -1),  # halves of two tensors
            torch.cat((-odd[..., 3:], odd[..., :3]), -1),  # 7 wide: no halves
        )

    got = torch.compile(f, backend="spyre")(*_spyre(x, y, odd))
    for g, r in zip(got, f(x, y, odd), strict=True):
        assert torch.equal(g.cpu(), r)
    assert compile_stats()["rotations_fused"] == 1
    eager = torch.ops.spyre.rotate_half(x.to(torch.bfloat16).to("spyre"))
    assert torch.equal(eager.cpu(), _rotate_half(x.to(torch.bfloat16)))


def test_an_input_broadcast_over_heads_is_loaded_once_per_tile_and_matches_cpu(tmp_path, monkeypatch):
    """x * cos + 1 with x the heads of a projection ([h, s, d] over memory laid out [s, h, d]) and
    cos [s, d] broadcast over the heads: the tiles' rows run along the heads, so cos is one row
    per tile (loaded once, not once per head); the values are CPU's."""
    torch.manual_seed(4)
    x, cos = torch.randn(2048, 8, 128).to(torch.bfloat16), torch.randn(2048, 128).to(torch.bfloat16)

    def f(x, cos):
        return x.transpose(0, 1) * cos + 1

    monkeypatch.setenv("TORCH_SPYRE_COMPILE_DEBUG", str(tmp_path / "dbg"))
    got = torch.compile(f, backend="spyre")(*_spyre(x, cos))
    assert torch.equal(got.cpu(), f(x, cos))
    (d,) = list((tmp_path / "dbg").iterdir())
    loads = [line for line in (d / "s0.txt").read_text().splitlines() if " LOAD " in line]
    assert any("<- mem[r2+0x0] 1 rows x 256 B stride 0" in line for line in loads), loads


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_an_rms_norm_in_a_narrow_type_is_one_pass_and_matches_cpu(dtype, tmp_path, monkeypatch):
    """HuggingFace's RMS norm on bf16 or fp16 activations: computed in fp32, cast back to the
    activations' type, times the weight. The cast is a step of the weight's product (rounded as it
    would be stored), so the norm reads its rows once and writes them once: one op in the plan."""
    torch.manual_seed(1)
    norm = _RMSNorm(256).to(dtype)
    x = (torch.randn(4, 33, 256) * 3).to(dtype)
    monkeypatch.setenv("TORCH_SPYRE_COMPILE_DEBUG", str(tmp_path / "dbg"))
    with torch.no_grad():
        got = torch.compile(copy.deepcopy(norm).to("spyre"), backend="spyre")(x.to("spyre"))
        want = norm(x)
    # fp16 is DLFloat16 on the default card: its 9-bit fraction rounds where IEEE half's 10 do not.
    tol = 1e-2 if dtype == torch.bfloat16 else 4e-3
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)
    (d,) = list((tmp_path / "dbg").iterdir())
    plan = (d / "plan.txt").read_text()
    assert plan.count("(aten.") == 1, plan  # every node is a step of the weight's product


@pytest.mark.parametrize("m,k,n", [(8, 32, 16), (512, 256, 768), (2048, 128, 512), (96, 2048, 96), (2048, 2048, 2048)])
def test_residual_epilogue_over_the_matmul_plans(m, k, n):
    """Shapes that take the matmul's different plans (blocks per core, shared panels, a resident
    B): the residual's block is found where the output's is, in each."""
    torch.manual_seed(m + n)
    x, h, w, b = torch.randn(m, n), torch.randn(m, k), torch.randn(n, k) * k**-0.5, torch.randn(n)

    def f(x, h, w, b):
        return x + F.silu(F.linear(h, w, b))

    with torch.no_grad():
        got = torch.compile(f, backend="spyre")(*_spyre(x, h, w, b))
    torch.testing.assert_close(got.cpu(), f(x, h, w, b), rtol=1e-4, atol=1e-4)


def test_a_compiled_call_frees_its_intermediates_when_it_returns_without_the_garbage_collector():
    # The runner's closures once formed a cycle over the call's tensors, so each call's
    # intermediates lived until Python's garbage collector ran: a long stream of compiled calls
    # (a decode loop) grew device memory between collections.
    f = torch.compile(lambda x, w: torch.relu(x @ w + 1).sum(0), backend="spyre")
    x, w = torch.randn(64, 64, device="spyre"), torch.randn(64, 64, device="spyre")
    f(x, w)  # compiled, and any constant it keeps is allocated
    gc.collect()
    gc.disable()
    try:
        base = torch.spyre.memory_allocated()
        for _ in range(3):
            out = f(x, w)
            # The result alone (a 256-byte row, in one 512-byte block); x @ w + 1 is 16 KiB.
            assert torch.spyre.memory_allocated() - base <= 512
            del out
            assert torch.spyre.memory_allocated() == base
    finally:
        gc.enable()


_REFUSED_TYPES = {
    "round of bool": (lambda x: torch.round(x > 0), torch.float32),
    "abs of bool": (lambda x: torch.abs(x > 0), torch.float32),
    "sub of bools": (lambda x: torch.sub(x > 0, False), torch.float32),
    "round of an empty bool": (lambda x: torch.round(x[:0] > 0), torch.float32),
    "lerp of integers": (lambda x: torch.lerp(x, x, 0.3), torch.int64),
    "softmax of int32": (lambda x: torch.softmax(x, 1), torch.int32),
    "log_softmax of int64": (lambda x: torch.log_softmax(x, -1), torch.int64),
    "argmax of bool": (lambda x: torch.argmax(x > 0, 0, keepdim=True), torch.float32),
}


@pytest.mark.parametrize("case", list(_REFUSED_TYPES))
def test_compiled_calls_refuse_the_types_cpu_refuses(case):
    """Where CPU's kernel refuses a call's types, the compiled call raises CPU's error, as the eager
    kernel does (the differential fuzzer's compile front door found each answering instead: a
    lowered node, a decomposition and an empty input skipped the check). Compiled first, the eager
    call afterwards still refuses (a check made under the tracing's fake tensors once kept the
    fake answer for every later call)."""
    torch_spyre.set_cpu_fallback("warn")  # a softmax of integers has no kernel: the CPU's refuses it
    fn, dtype = _REFUSED_TYPES[case]
    x = torch.arange(-6, 6).reshape(3, 4).to(dtype)
    with pytest.raises(Exception) as cpu:
        fn(x)
    with pytest.raises(type(cpu.value), match=str(cpu.value)[:40].replace("(", r"\(").replace(")", r"\)")):
        torch.compile(fn, backend="spyre")(x.to("spyre"))
    with pytest.raises(type(cpu.value)):
        fn(x.to("spyre"))


def test_a_compiled_in_place_product_with_a_0_dim_operand_matches_cpu():
    """The type check of a node whose operand is 0-dim must run on real stand-ins, not the
    tracing's fake tensors (an intermediate check refused v1.mul_(v8), which then failed)."""
    v1, v8 = torch.randn(7).half(), torch.tensor(0.5)
    d1, d8 = v1.to("spyre"), v8.to("spyre")
    got = torch.compile(lambda: d1.mul_(d8), backend="spyre", dynamic=False)()
    v1.mul_(v8)
    assert got.dtype == v1.dtype and torch.equal(d1.cpu(), v1)


def test_a_compiled_call_that_torchs_reference_refuses_runs_as_cpus_kernel_runs_it():
    """addcmul of int64 tensors by value=0.5: CPU's kernel takes it, torch's reference (the
    decomposition) raised ValueError, so the compiled call failed where CPU answers. The call now
    stays whole and its eager kernel answers (found by the compile front door of the fuzzer)."""
    x = torch.randint(-5, 6, (4, 16), generator=torch.Generator().manual_seed(0))
    want = torch.addcmul(x, x, x, value=0.5)
    d = x.to("spyre")
    got = torch.compile(lambda: torch.addcmul(d, d, d, value=0.5), backend="spyre")()
    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


_FRESH_RESULTS = {  # ops whose result is a tensor of its own, whose decompositions ended in a view
    "roll": lambda t: torch.roll(t, 2),
    "stack": lambda t: torch.stack([t, t * 2], -1),
    "index_add": lambda t: t.index_add(0, torch.tensor([2, 0], device=t.device), t[:2] * 3),
    "index_copy": lambda t: t.index_copy(0, torch.tensor([2, 0], device=t.device), t[:2] * 3),
    "rot90": lambda t: torch.rot90(t, 1, [0, 1]),
    "unfold": lambda t: F.unfold(t.reshape(1, 1, 3, 5), (2, 2)),
    # These three ended in torch's _unsafe_view, which core ATen's table made a view.
    "kron of a slice": lambda t: torch.kron(t, t[:2, :2]),
    "matmul of a batch": lambda t: torch.matmul(t.reshape(1, 3, 5), t.t()),
    "linear of a batch": lambda t: F.linear(t.reshape(1, 3, 5), t),
}


@pytest.mark.parametrize("name", list(_FRESH_RESULTS))
def test_a_compiled_result_is_a_tensor_of_its_own_that_takes_an_in_place_op(name):
    """These decompositions ended in a view of a tensor they made, so the compiled result was a view
    made inside AOTAutograd's Function, and an in-place op on it under autograd raised (roll: the
    fuzzer's compile front door, seed 9 program 124; the rest: a scan of op_db and the compiled
    outputs of torch's composites that end in _unsafe_view). Now each is a
    tensor of its own, as CPU's is, and the gradient through the in-place op is CPU's."""
    fn = _FRESH_RESULTS[name]
    x = torch.randn(3, 5, generator=torch.Generator().manual_seed(0))
    cpu = x.clone().requires_grad_()
    fn(cpu).mul_(2).sum().backward()
    leaf = x.clone().to("spyre").requires_grad_()
    y = torch.compile(fn, backend="spyre", dynamic=False)(leaf)
    assert y._base is None
    y.mul_(2).sum().backward()
    torch.testing.assert_close(leaf.grad.cpu(), cpu.grad)


# Calls whose second operand is a tensor of one element, which CPU's mul, div and floor_divide
# kernels read as a scalar, unconverted, when they compute in bf16 (and one expanded from it, which
# they do not).
_ONE_ELEMENT_CALLS = {
    "bf16 times an int32 of one element": lambda x, k: x * k,
    "bf16 times an int32 expanded from one element": lambda x, k: x * k.expand(x.shape[-1]),
    "bf16 divided by an int32 of one element, truncated": lambda x, k: torch.div(x * 1e7, k, rounding_mode="trunc"),
    "bf16 floor-divided by a 0-dim fp32": lambda x, k: torch.floor_divide(x * 1e7, (k.float() / 7).reshape(())),
    "an int32 times a bf16 of one element": lambda x, k: (x * 1e6).int() * (k.bfloat16() / 3),
}


@pytest.mark.parametrize("name", list(_ONE_ELEMENT_CALLS))
def test_a_call_by_a_tensor_of_one_element_reads_it_as_cpu_does(name):
    """CPU's kernels read a one-element operand exact and compute in fp32, rounding once. The
    compiled path converted it to bf16 first (an fp16 product by a large int32 overflowed where
    CPU's did not: the fuzzer's compile front door, seed 13 program 44). An expanded one is not
    read so (CPU converts it as it converts any tensor), and an int operand of the same call
    still rounds to bf16 first, as CPU's iterator converts it."""
    fn = _ONE_ELEMENT_CALLS[name]
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)).bfloat16()
    k = torch.tensor([1234567], dtype=torch.int32)  # 1236992 in bf16
    want = fn(x, k)
    dx, dk = x.to("spyre"), k.to("spyre")
    eager = fn(dx, dk)
    compiled = torch.compile(lambda: fn(dx, dk), backend="spyre", dynamic=False)()
    for got in (eager, compiled):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


# Found by compiling each op of op_db in bfloat16 against aot_eager on CPU.
_SCAN_FINDINGS = {
    # The planner took round.decimals for the library's round, which rounds to an integer.
    "round to 3 decimals": lambda x: torch.round(x, decimals=3),
    "round to -1 decimals": lambda x: torch.round(x * 100, decimals=-1),
    # The type check's stand-ins were traced into the graph: AOTAutograd refused its detach_.
    "softplus with beta and threshold": lambda x: F.softplus(x, beta=3, threshold=0.2),
    # torch's decomposition kept the mean and rstd in fp32 off the CPU.
    "native_layer_norm's statistics": lambda x: torch.ops.aten.native_layer_norm(x, [8], x[0], x[1], 1e-5),
}


@pytest.mark.parametrize("name", list(_SCAN_FINDINGS))
def test_a_compiled_bf16_call_matches_cpu(name):
    fn = _SCAN_FINDINGS[name]
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0)).bfloat16()
    want = fn(x)
    got = torch.compile(fn, backend="spyre", dynamic=False)(x.to("spyre"))
    as_tuple = lambda t: t if isinstance(t, tuple) else (t,)  # noqa: E731
    for g, w in zip(as_tuple(got), as_tuple(want), strict=True):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(0, 0), (0, 5, 5), (2, 0, 0), (2, 4, 4)])
def test_compiled_matrix_rank_matches_cpu_empty_matrices_too(shape):
    """matrix_rank has a spyre kernel, so functionalization left it whole and core ATen's table
    ran its C++ composite below functionalization: for an empty matrix that fills its result in
    place, and AOTAutograd refused the graph (a scan of op_db's every sample). It stays whole now."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    want = torch.linalg.matrix_rank(x)
    got = torch.compile(torch.linalg.matrix_rank, backend="spyre", dynamic=False)(x.to("spyre"))
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_logspace_takes_its_ends_in_the_result_type_as_cpu(dtype):
    """CPU's logspace rounds its exponents' ends to the result's type first: 10 ** 4.3 in bf16 is
    20480 there (4.3 is 4.3125), where torch's reference, which both front doors ran, gave 19968
    (a scan of op_db's every sample through torch.compile). The reference also computed in
    float64, which took the CPU fallback; a float logspace is native now."""

    def fn(start, end, steps, base):
        return torch.logspace(start, end, steps, base=base, dtype=dtype, device="spyre")

    for args in ((4.3, -3.0, 4, 10.0), (1.2, 4.0, 5, 2.5), (-9.5, 4.2, 7, 3.0)):
        want = torch.logspace(*args[:3], base=args[3], dtype=dtype)
        for got in (fn(*args), torch.compile(fn, backend="spyre", dynamic=False)(*args)):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=0)
        torch._dynamo.reset()


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (lambda a, b: (a @ b).relu() + 1, [(0, 4), (4, 3)]),
        (lambda a, b: (a @ b).relu() + 1, [(3, 0), (0, 5)]),
        (lambda a, b: torch.bmm(a, b) * 2, [(2, 0, 4), (2, 4, 3)]),
        (lambda a: a.sum(0) * 2 + a.amax(1).sum(), [(0, 3)]),
        (lambda a: a.sum(1) * 2, [(3, 0)]),
    ],
)
def test_a_compiled_op_with_an_empty_operand_is_one_program(fn, shapes):
    """Found in the scan of op_db's every sample: a lowering that reads no element of an empty
    operand left it out of its call, which the library then refused (\"argument 'self' is not a
    tensor\"), and the program's ops ran one by one; the empty amax fell back to the CPU eagerly."""
    args = [torch.randn(*s, generator=torch.Generator().manual_seed(i)) for i, s in enumerate(shapes)]
    compile_stats(reset=True)
    torch_spyre.set_cpu_fallback("error")  # conftest restores the default after each test
    got = torch.compile(fn, backend="spyre", dynamic=False)(*[a.to("spyre") for a in args])
    torch.testing.assert_close(got.cpu(), fn(*args), rtol=0, atol=0)
    assert compile_stats()["programs_not_compiled"] == 0


def test_a_compiled_programs_results_share_no_storage():
    """Found by the compile front door's fuzzer (seed 19, program 261): fmod's two gradients came
    back as parts of one storage (the program's out block), where CPU's share none; so a resize_
    of one could grow over the other, and saving one saved both. Each result has a storage of its
    own now, and the block is freed with the last of them."""

    def fn(a, b):
        return torch.autograd.grad((torch.fmod(a, b) * 0.5).sum(), [a, b])

    a, b = torch.randn(1, 1, 1, 4), torch.randn(7, 4, 1, 1) * 1e-3
    want = fn(a.requires_grad_(), b.requires_grad_())
    compiled = torch.compile(fn, backend="spyre", dynamic=False)
    on_card = lambda: [x.detach().to("spyre").requires_grad_() for x in (a, b)]  # noqa: E731
    compiled(*on_card())  # compiled: what the compile keeps is allocated before the count
    gc.collect()  # earlier tests' garbage
    before = torch.spyre.memory_allocated()
    got = compiled(*on_card())
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.cpu(), w)
        assert g.storage_offset() == 0 and g.untyped_storage().nbytes() == w.untyped_storage().nbytes()
    assert got[0].untyped_storage().data_ptr() != got[1].untyped_storage().data_ptr()
    keep = got[1].cpu()
    grown = got[0].resize_(64).fill_(7.0)  # grows into memory of its own
    assert bool((grown.cpu() == 7).all())
    torch.testing.assert_close(got[1].cpu(), keep)
    buffer = io.BytesIO()
    torch.save(got[1], buffer)
    assert torch.load(io.BytesIO(buffer.getvalue())).untyped_storage().nbytes() == keep.untyped_storage().nbytes()
    got[1].record_stream(torch.spyre.Stream())  # on a part: recorded on its block
    del got, grown, g
    gc.collect()
    torch.spyre.synchronize()
    assert torch.spyre.memory_allocated() == before
    # An empty result points nowhere, as CPU's does: saved beside a neighbour of another type, it
    # is not taken for a view of the neighbour's memory.
    empty, full = torch.compile(lambda x: ((x[:0] * 2).long(), x * 3), backend="spyre")(a.detach().to("spyre"))
    assert empty.untyped_storage().data_ptr() == 0
    buffer = io.BytesIO()
    torch.save([empty, full], buffer)
    torch.testing.assert_close(torch.load(io.BytesIO(buffer.getvalue()))[1].cpu(), a * 3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("shape", [(10,), (3, 10)])
def test_compiled_multilabel_margin_loss_has_cpus_shape_and_gradient(reduction, shape, dtype):
    """Found by a sweep of module_db through torch.compile: torch decomposes the loss above
    autograd while a compile traces, and its decomposition gave one sample's unreduced loss the
    shape [1], where CPU's is 0-dim, and in float64 wrong values (the targets end early at -1).
    Compiled, the loss is its eager kernel's computation now; float64, which the card does not
    compute in, through the fallback."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=dtype)
    target = torch.tensor([3, 0, -1, 1, 2, 5, 4, 7, 8, 9])[: shape[-1]].expand(shape).contiguous()
    fn = lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction)  # noqa: E731
    want = fn(x.requires_grad_(), target)
    (want_grad,) = torch.autograd.grad(want.sum(), x)
    dev = x.detach().to("spyre").requires_grad_()
    torch_spyre.set_cpu_fallback("error" if dtype == torch.float32 else "allow")
    got = torch.compile(fn, backend="spyre", dynamic=False)(dev, target.to("spyre"))
    (grad,) = torch.autograd.grad(got.sum(), dev)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want.detach())
    torch.testing.assert_close(grad.cpu(), want_grad)
    if shape == (3, 10):  # no sample: torch's decomposition, in CPU's shape
        empty = x.detach()[:0].to("spyre")
        assert torch.compile(fn, backend="spyre")(empty, target[:0].to("spyre")).shape == fn(x[:0], target[:0]).shape


def test_a_compiled_row_update_writes_its_input_in_place(tmp_path):
    """HuggingFace's StaticCache under torch.compile: `cache.index_copy_(2, positions, rows)` then
    attention over the cache. It was a copy of the whole cache before the rows were written and
    another after it (two passes over a Llama-3-8B layer's cache per decode step for one row);
    now the rows land in the cache and nothing else moves; likewise when the graph creates the
    cache itself (a StaticCache's first forward). Values and the cache are CPU's."""
    code = (
        "import json, torch, torch_spyre\n"
        "from torch_spyre._compile import compile_stats\n"
        "def step(cache, pos, rows, q):\n"
        "    cache.index_copy_(2, pos, rows)\n"
        "    return torch.softmax(q @ cache.transpose(-1, -2), -1) @ cache\n"
        "g = torch.Generator().manual_seed(0)\n"
        "cache = torch.randn(2, 4, 256, 64, generator=g)\n"
        "rows, q = torch.randn(2, 4, 1, 64, generator=g), torch.randn(2, 4, 1, 64, generator=g)\n"
        "pos = torch.tensor([5])\n"
        "dev = [t.to('spyre') for t in (cache, pos, rows, q)]\n"
        "torch_spyre.set_cpu_fallback('error')\n"
        "got = torch.compile(step, backend='spyre')(*dev)\n"
        "want = step(cache, pos, rows, q)\n"
        "torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)\n"
        "assert torch.equal(dev[0].cpu(), cache)\n"
        "def first(pos, rows):  # the cache's first forward creates it\n"
        "    return torch.zeros(2, 4, 256, 64, device=rows.device).index_copy(2, pos, rows)\n"
        "got = torch.compile(first, backend='spyre')(dev[1], dev[2])\n"
        "assert torch.equal(got.cpu(), first(pos, rows))\n"
        "print(json.dumps(compile_stats()))\n"
    )
    stats, proc = run_with_stats(code, tmp_path)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["inputs_updated_in_place"] == 2
    # The only device-to-device bytes: none (the 512 KiB cache is never copied).
    assert stats["cards"][0]["bytes"]["d2d"] == 0


def test_index_copy_in_place_moves_only_its_rows_and_refuses_a_negative_index(tmp_path):
    stats, _ = run_with_stats(
        "import torch, torch_spyre\n"
        "x = torch.zeros(64, 1024, device='spyre')\n"
        "x.index_copy_(0, torch.tensor([3, 60], device='spyre'), torch.ones(2, 1024, device='spyre'))\n"
        "want = torch.zeros(64, 1024); want[[3, 60]] = 1\n"
        "assert torch.equal(x.cpu(), want)\n",
        tmp_path,
    )
    assert stats["cards"][0]["bytes"]["d2d"] == 0
    # CPU refuses an index before the first row; the device does too, and writes nothing.
    x = torch.zeros(3, device="spyre")
    with pytest.raises(IndexError):
        torch.zeros(3).index_copy_(0, torch.tensor([-1]), torch.ones(1))
    for call in (
        lambda: x.index_copy_(0, torch.tensor([-1], device="spyre"), torch.ones(1, device="spyre")),
        lambda: x.index_copy(0, torch.tensor([-1], device="spyre"), torch.ones(1, device="spyre")),
    ):
        with pytest.raises(RuntimeError, match="index_put_"):
            call().cpu()  # the kernel's fault is reported when the queue is next waited for
    assert torch.equal(x.cpu(), torch.zeros(3))
    with pytest.raises(IndexError, match="Dimension out of range"):  # CPU's words
        x.index_copy(5, torch.tensor([1], device="spyre"), torch.ones(1, device="spyre"))
