"""Native ops against CPU PyTorch on our own cases, those OpInfo samples rarely cover (test_ops.py
takes the samples): layouts and sizes, broadcasting and type promotion, in-place, out= and errors,
indexing, topk and sort corners, reductions over permuted dims, tensors that span many tiles and
cores, a small scratchpad with fewer cores, and permuted inputs.
"""

from __future__ import annotations

import pytest
import torch
import torch_spyre
from conftest import run_python, run_with_stats
from test_ops import _compare, _to

# Our own cases: layouts and sizes that OpInfo samples rarely cover.
SHAPES = [(0,), (1,), (7,), (63,), (65,), (130, 3), (3, 130), (5, 6, 7), (2, 3, 4, 5), (300_001,)]


def _layouts(shape, dtype, gen):
    """(name, base, view): `view` applied to `base` on either device gives the same layout."""
    base = torch.randn(shape, generator=gen).to(dtype)
    yield "contiguous", base, lambda t: t
    if len(shape) >= 2:
        yield "transposed", base.transpose(0, 1).contiguous(), lambda t: t.transpose(0, 1)
    if shape and shape[-1] > 1:
        wide = torch.zeros(*shape[:-1], shape[-1] * 2, dtype=dtype)
        wide[..., ::2] = base
        yield "strided", wide, lambda t: t[..., ::2]
    flat = torch.zeros(base.numel() + 5, dtype=dtype)
    flat[5:] = base.reshape(-1)
    yield "offset", flat, lambda t: t[5:].view(shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layouts_and_sizes(shape, dtype, cpu_gen):
    torch_spyre.set_cpu_fallback("error")
    for layout, base, view in _layouts(shape, dtype, cpu_gen):
        x, d = view(base), view(base.to("spyre"))
        assert d.stride() == x.stride() and d.storage_offset() == x.storage_offset(), layout
        pairs = [
            (torch.exp(d), torch.exp(x)),
            (d * 2 + d, x * 2 + x),
            (torch.where(d > 0, d, -d), torch.where(x > 0, x, -x)),
            (d.to(torch.float32), x.to(torch.float32)),
            (d.contiguous(), x.contiguous()),
        ]
        if x.dim() >= 1 and x.numel() > 0:
            pairs += [(d.sum(-1), x.sum(-1)), (d.amax(0), x.amax(0)), (d.argmax(-1), x.argmax(-1))]
        for got, want in pairs:
            _compare(got, want, dtype)


def test_broadcasting_and_type_promotion():
    torch_spyre.set_cpu_fallback("error")
    a = torch.randn(4, 1, 3)
    b = torch.randn(5, 1)
    i = torch.arange(15, dtype=torch.int32).reshape(5, 3)
    h = torch.randn(3).half()
    da, db, di, dh = (t.to("spyre") for t in (a, b, i, h))
    _compare(da + db, a + b, None)
    _compare(di * 0.5, i * 0.5, None)
    _compare(di / 4, i / 4, None)
    _compare(di // 4, i // 4, None)
    _compare(da * dh, a * h, None)
    _compare(di + dh, i + h, None)
    _compare(da + torch.tensor(2.5), a + torch.tensor(2.5), None)
    _compare(torch.add(da, db, alpha=3), torch.add(a, b, alpha=3), None)
    _compare(torch.sub(da, db, alpha=0.5), torch.sub(a, b, alpha=0.5), None)


def test_in_place_out_and_errors():
    torch_spyre.set_cpu_fallback("error")
    x = torch.arange(6, dtype=torch.int64)
    d = x.to("spyre")
    with pytest.raises(RuntimeError, match="can't be cast"):
        d.exp_()
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        d.add_(torch.ones(2, 6, dtype=torch.int64, device="spyre"))
    out = torch.empty(0, device="spyre")
    torch.exp(d, out=out)
    _compare(out, torch.exp(x), None)
    f = torch.zeros(6, device="spyre")
    torch.lt(d, 3, out=f)
    _compare(f, (x < 3).float(), None)


def test_indexing_edge_cases_match_cpu():
    """Negative and multi-dimensional indices, and the inputs CPU rejects, which must raise here
    instead of reaching memory outside the tensor or faulting the device queue."""
    torch_spyre.set_cpu_fallback("error")
    x = torch.arange(20.0).view(5, 4)
    d = x.to("spyre")
    neg = torch.tensor([[-1, 0], [2, -5]])
    _compare(d[neg.to("spyre")], x[neg], None)
    _compare(d[:, torch.tensor([-1, -4], device="spyre")], x[:, [-1, -4]], None)
    # Indices split by a slice put their dims first, as on CPU (OpInfo's __getitem__ sample 15),
    # with CPU's strides, also over a transposed tensor.
    y = torch.randn(5, 6, 7, 8, generator=torch.Generator().manual_seed(0))
    i, j = torch.tensor([[0], [-2]]), torch.tensor([1, 5, 3])
    for base in (y, y.transpose(1, 3)):
        want = base[:, i, :, j]
        got = base.to("spyre")[:, i.to("spyre"), :, j.to("spyre")]
        _compare(got, want, None)
        assert got.stride() == want.stride()
    for accumulate in (False, True):
        want, got = x.clone(), d.clone()
        values = torch.tensor([[10.0], [20.0]])  # broadcasts against x[neg]'s shape [2, 2, 4]
        want.index_put_((neg,), values, accumulate=accumulate)
        got.index_put_((neg.to("spyre"),), values.to("spyre"), accumulate=accumulate)
        _compare(got, want, None)
    # masked_scatter_: nothing selected takes nothing from an empty source; a short source raises.
    none = torch.zeros(4, dtype=torch.bool, device="spyre")
    _compare(torch.ones(4, device="spyre").masked_scatter_(none, torch.empty(0, device="spyre")), torch.ones(4), None)
    with pytest.raises(RuntimeError, match="at least as many elements as ones in mask"):
        torch.ones(4, device="spyre").masked_scatter_(~none, torch.ones(3, device="spyre"))
    # gather/scatter: an index wider than self outside `dim` is an error, as on CPU.
    wide = torch.zeros(64, 3, dtype=torch.long, device="spyre")
    with pytest.raises(RuntimeError, match="Size does not match at dimension 0"):
        torch.zeros(2, 3, device="spyre").scatter_(1, wide, 1.0)
    with pytest.raises(RuntimeError, match="Size does not match at dimension 0"):
        torch.zeros(2, 3, device="spyre").gather(1, wide)
    with pytest.raises(RuntimeError, match="no larger than src"):
        torch.zeros(70, 3, device="spyre").scatter_(1, wide, torch.ones(2, 3, device="spyre"))
    # index_add_ into a transposed tensor (its rows are not contiguous) adds through a copy.
    want, got = torch.zeros(4, 6).t(), torch.zeros(4, 6, device="spyre").t()
    src, at = torch.randn(3, 4), torch.tensor([5, 0, 5])
    want.index_add_(0, at, src)
    got.index_add_(0, at.to("spyre"), src.to("spyre"))
    _compare(got, want, None)
    # scatter with an empty index copies self into its out= tensor, resized to self's shape first.
    x = torch.arange(6.0).view(2, 3)
    o = torch.empty(0, device="spyre")
    torch.scatter(x.to("spyre"), 0, torch.zeros(0, 3, dtype=torch.long, device="spyre"), x.to("spyre"), out=o)
    _compare(o, torch.scatter(x, 0, torch.zeros(0, 3, dtype=torch.long), x, out=torch.empty(0)), None)
    # Integer isposinf writes its out= tensor.
    o = torch.ones(3, dtype=torch.bool, device="spyre")
    torch.isposinf(torch.tensor([1, 2, 3], device="spyre"), out=o)
    _compare(o, torch.zeros(3, dtype=torch.bool), None)
    torch.spyre.synchronize()  # and nothing above faulted the queue


def _index_cases():
    m = torch.rand(4, 5, generator=torch.Generator().manual_seed(1)) > 0.5
    i, j = torch.tensor([0, -1, 2]), torch.tensor([[4], [1]])
    return {
        "two broadcast indices": (i, j),
        "indices after a slice": (slice(None), i, torch.tensor([5, 0, -3])),
        "a bool mask over two dims": (m,),
        "a bool mask after a slice": (slice(None), m[0]),
        "rows and per-row labels": (torch.arange(4), torch.tensor([1, 4, 0, 2])),
        "repeated index pairs": (torch.tensor([0, 0, 2]), torch.tensor([1, 1, -2])),
    }


def test_index_put_of_whole_rows_scatters_rows_and_matches_cpu(tmp_path):
    """A KV cache's update, cache[:, :, positions] = values: what follows the indexed dim is
    contiguous in the cache and in the values, so each index moves a row (one index per row of
    the heads' dims, not one per element); against CPU over bf16 and fp32, transposed values (a
    view of HF's keys), broadcast values, negative positions and a transposed cache (rows not
    contiguous: element by element). The stats name the kernel by its rows."""
    g = torch.Generator().manual_seed(3)
    pos = torch.tensor([3, 7, 0, 32, -2])
    for dtype in (torch.bfloat16, torch.float32):
        cache = torch.randn(2, 8, 33, 16, generator=g).to(dtype)
        for vals in (
            torch.randn(2, 8, 5, 16, generator=g).to(dtype),
            torch.randn(2, 5, 8, 16, generator=g).to(dtype).transpose(1, 2),
            torch.randn(16, generator=g).to(dtype),
        ):
            want = cache.clone()
            want[:, :, pos] = vals
            got = cache.to("spyre")
            got[:, :, pos.to("spyre")] = vals.to("spyre")
            _compare(got, want, None)
    t = torch.randn(16, 33, generator=g)
    want, got = t.t().clone(), t.to("spyre").t()
    rows = torch.randn(5, 16, generator=g)
    want[pos] = rows
    got[pos.to("spyre")] = rows.to("spyre")
    _compare(got, want, None)
    code = (
        "import torch, torch_spyre\n"
        "c = torch.zeros(1, 8, 64, 128, device='spyre')\n"
        "c[:, :, torch.arange(40, device='spyre')] = torch.ones(1, 8, 40, 128, device='spyre')\n"
        "torch.spyre.synchronize()\n"
    )
    names = [x["name"] for x in run_with_stats(code, tmp_path)[0]["cards"][0]["launches"]]
    assert "scatter f32 [1,8,40,128]" in names, names


@pytest.mark.parametrize("name", list(_index_cases()))
def test_advanced_indexing_matches_cpu(name):
    """x[...] and x[...] = v (plain and accumulating) with several index tensors or a bool mask."""
    torch_spyre.set_cpu_fallback("error")
    ix = _index_cases()[name]
    dix = tuple(_to(t, "spyre") for t in ix)
    x = torch.randn(4, 5, 6, generator=torch.Generator().manual_seed(2))
    _compare(x.to("spyre")[dix], x[ix], None)
    for accumulate in (False, True):
        want, got = x.clone(), x.to("spyre")
        v = torch.randn(want[ix].shape[-1:])  # broadcast along the indexed rows
        put = torch.ops.aten.index_put_
        put(want, [t if isinstance(t, torch.Tensor) else None for t in ix], v, accumulate)
        put(got, [t if isinstance(t, torch.Tensor) else None for t in dix], v.to("spyre"), accumulate)
        _compare(got, want, None)


@pytest.mark.parametrize(
    "x, k, largest",
    [
        (torch.tensor([-float("inf"), -float("inf"), 1.0]), 3, True),  # real values equal to a taken mark
        (torch.tensor([float("inf"), 2.0, float("inf")]), 3, False),
        (torch.tensor([1.0, float("nan"), 0.0, float("nan")]), 3, True),  # NaN is the largest
        (torch.tensor([1.0, float("nan"), 0.0]), 3, False),  # ... so the smallest puts it last
        (torch.tensor([-128, 5, -128], dtype=torch.int8), 3, True),
        (torch.randn(3, 300), 64, True),  # the most rounds, over several rows
        (torch.randint(-3, 3, (5, 50), dtype=torch.int32), 20, False),  # many ties
    ],
)
def test_topk_edge_cases_match_cpu(x, k, largest):
    """Values equal CPU's; the indices (ties may order differently) are distinct and point at them."""
    torch_spyre.set_cpu_fallback("error")
    values, indices = x.to("spyre").topk(k, largest=largest)
    _compare(values, x.topk(k, largest=largest).values, None)
    torch.testing.assert_close(x.gather(-1, indices.cpu()), values.cpu(), equal_nan=True)
    rows = indices.cpu().reshape(-1, k)
    assert all(len(set(r.tolist())) == k for r in rows)


def test_reductions_over_several_and_permuted_dims(cpu_gen):
    torch_spyre.set_cpu_fallback("error")
    x = torch.randn(4, 5, 6, 7, generator=cpu_gen)
    d = x.to("spyre")
    for dims in [(0,), (1, 2), (0, 2), (3, 1), (0, 1, 2, 3)]:
        _compare(d.sum(dims), x.sum(dims), None)
        _compare(d.amax(dims, keepdim=True), x.amax(dims, keepdim=True), None)
        _compare(d.var(dims), x.var(dims), None)
    _compare(d.permute(2, 0, 3, 1).sum(1), x.permute(2, 0, 3, 1).sum(1), None)
    _compare(d.permute(3, 1, 0, 2).argmax(), x.permute(3, 1, 0, 2).argmax(), None)
    _compare(torch.softmax(d, 1), torch.softmax(x, 1), None)


def test_large_tensors_span_many_tiles_and_cores(cpu_gen):
    torch_spyre.set_cpu_fallback("error")
    x = torch.randn(1000, 1500, generator=cpu_gen)
    d = x.to("spyre")
    _compare(torch.sigmoid(d) * d, torch.sigmoid(x) * x, None)
    _compare(d.t() + 1, x.t() + 1, None)
    _compare(d.sum(0), x.sum(0), None)
    _compare(torch.log_softmax(d, -1), torch.log_softmax(x, -1), None)


def test_small_scratchpad_and_fewer_cores(tmp_path):
    """Programs compiled for a 256 KiB scratchpad and 16 cores run and give CPU's results."""
    config = tmp_path / "small.json"
    config.write_text('{"chip": {"lx_bytes": 262144, "cores": 16, "fp16_format": "ieee"}}')
    code = """
import torch, torch_spyre
torch_spyre.set_cpu_fallback("error")
g = torch.Generator().manual_seed(0)
a, b = torch.randn(300, 700, generator=g), torch.randn(700, 130, generator=g)
x = torch.randn(64, 40_000, generator=g)
h = torch.randn(1024, 1024, generator=g).half()
da, db, dx, dh = a.to("spyre"), b.to("spyre"), x.to("spyre"), h.to("spyre")
assert torch_spyre.device_info()["lx_bytes"] == 262144 and torch_spyre.device_info()["cores"] == 16
checks = [
    ((da @ db).cpu(), a @ b),
    ((da.half() @ db.half()).float().cpu(), (a.half().float() @ b.half().float())),
    (torch.softmax(dx, -1).cpu(), torch.softmax(x, -1)),
    (dx.sum(0).cpu(), x.sum(0)),
    (dx.argmax(-1).cpu(), x.argmax(-1)),
    ((dx * 2 + dx.t().contiguous().t()).cpu(), x * 2 + x),
    (torch.addmm(db[0], da, db).cpu(), torch.addmm(b[0], a, b)),
    # large enough for the cores to share panels (LOAD_MULTICAST) on a 4 x 4 grid
    ((dh @ dh.t()).float().cpu(), (h.float() @ h.float().t()).half().float()),
]
for got, want in checks:
    torch.testing.assert_close(got, want, rtol=2e-3, atol=2e-3)
import json, os
torch_spyre.write_reports()
events = json.load(open(os.environ["SPYRE_TRACE"]))["traceEvents"]
assert any(e.get("name") == "load multicast issue" for e in events), "the 1024-cube GEMM did not share panels"
print("ok")
"""
    proc = run_python(code, env={"SPYRE_CONFIG": str(config), "SPYRE_TRACE": str(tmp_path / "trace.json")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_sort_is_stable_puts_nan_last_and_topk_past_64_uses_it(cpu_gen):
    x = torch.randn(5, 300, generator=cpu_gen)
    x[:, :40] = 0.5  # ties
    x[1, 7] = x[3, 100] = float("nan")
    torch_spyre.set_cpu_fallback("error")
    for descending in (False, True):
        got = torch.sort(x.to("spyre"), dim=1, descending=descending)
        want = torch.sort(x, dim=1, descending=descending, stable=True)
        torch.testing.assert_close(got.values.cpu(), want.values, equal_nan=True)
        assert torch.equal(got.indices.cpu(), want.indices)
        assert torch.equal(torch.argsort(x.t().to("spyre"), dim=0, descending=descending).cpu(), want.indices.t())
    y = torch.randn(4, 1000, generator=cpu_gen)
    for largest in (True, False):
        got = torch.topk(y.to("spyre"), 200, dim=1, largest=largest)
        want = torch.topk(y, 200, dim=1, largest=largest)
        assert torch.equal(got.values.cpu(), want.values) and torch.equal(got.indices.cpu(), want.indices)


def test_a_row_longer_than_the_scratchpad_sorts_on_the_cpu(cpu_gen):
    x = torch.randn(2, 200_000, generator=cpu_gen)
    with pytest.warns(UserWarning, match="aten::sort"):
        got = torch.sort(x.to("spyre"), dim=1)
    assert torch.equal(got.values.cpu(), torch.sort(x, dim=1).values)


def test_int64_sort_keeps_values_past_2_to_53_apart():
    x = torch.tensor([2**53 + 1, 2**53, -(2**62), 2**62 + 3, 2**62 + 1])
    torch_spyre.set_cpu_fallback("error")
    for descending in (False, True):
        got = torch.sort(x.to("spyre"), descending=descending)
        want = torch.sort(x, descending=descending, stable=True)
        assert torch.equal(got.values.cpu(), want.values) and torch.equal(got.indices.cpu(), want.indices)


@pytest.mark.parametrize(
    "shape,perm",
    [((4, 128, 8, 32), (0, 2, 1, 3)), ((300, 70), (1, 0)), ((5, 6, 7), (2, 0, 1)), ((64, 4096), (1, 0)),
     ((3, 1000, 3), (2, 1, 0)), ((2, 3, 130, 3), (0, 3, 2, 1))],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool])
def test_permuted_inputs_copy_and_compute_like_cpu(shape, perm, dtype, cpu_gen):
    """Transposed inputs move in blocks along their contiguous dim (transposed in the scratchpad),
    and tiles take the longest outer dim as rows: the results must not change."""
    x = (torch.randn(shape, generator=cpu_gen) * 5).to(dtype)
    d = x.to("spyre")
    torch_spyre.set_cpu_fallback("error")
    assert torch.equal(d.permute(*perm).contiguous().cpu(), x.permute(*perm).contiguous())
    torch.testing.assert_close((d.permute(*perm).float() * 2 + 1).cpu(), x.permute(*perm).float() * 2 + 1)
