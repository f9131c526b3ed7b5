"""aten::mm on the cores, against CPU PyTorch, and its simulated time against the config."""

from __future__ import annotations

import json

import pytest
import torch
import torch_spyre
from conftest import run_python


def test_seed_example(cpu_gen):
    device = torch.device("spyre:0")
    tensor = torch.randn(1024, 1024, device="cpu", generator=cpu_gen)
    result = torch.matmul(tensor.to(device), tensor.to(device))
    assert result.device == device
    torch.testing.assert_close(result.cpu(), torch.matmul(tensor, tensor), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 7), (129, 257, 130), (64, 512, 8), (300, 20, 1)])
def test_float32_shapes(m, k, n, cpu_gen):
    a, b = torch.randn(m, k, generator=cpu_gen), torch.randn(k, n, generator=cpu_gen)
    torch_spyre.set_cpu_fallback("error")  # must be native
    out = a.to("spyre") @ b.to("spyre")
    torch.testing.assert_close(out.cpu(), a @ b, rtol=1e-4, atol=1e-4)


def test_float16_accumulates_in_float32(cpu_gen):
    a = torch.randn(200, 300, generator=cpu_gen).half()
    b = torch.randn(300, 90, generator=cpu_gen).half()
    torch_spyre.set_cpu_fallback("error")
    out = (a.to("spyre") @ b.to("spyre")).cpu()
    assert out.dtype == torch.float16
    reference = (a.float() @ b.float()).half()  # fp32 accumulate, one rounding at the end
    torch.testing.assert_close(out, reference, rtol=1e-3, atol=1e-3)


def test_transposed_and_sliced_operands(cpu_gen):
    a = torch.randn(70, 50, generator=cpu_gen)
    b = torch.randn(90, 70, generator=cpu_gen)
    da, db = a.to("spyre"), b.to("spyre")
    torch.testing.assert_close((da.t() @ db.t()).cpu(), a.t() @ b.t(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close((da[10:40] @ db[:50, ::2]).cpu(), a[10:40] @ b[:50, ::2], rtol=1e-4, atol=1e-4)


def test_out_variant_and_aliasing(cpu_gen):
    a = torch.randn(16, 16, generator=cpu_gen)
    da = a.to("spyre")
    out = torch.empty(16, 16, device="spyre")
    torch.mm(da, da, out=out)
    torch.testing.assert_close(out.cpu(), a @ a, rtol=1e-4, atol=1e-4)
    torch.mm(da, da, out=da)  # output aliases an input
    torch.testing.assert_close(da.cpu(), a @ a, rtol=1e-4, atol=1e-4)


def test_shape_mismatch_is_an_error():
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch.ones(2, 3, device="spyre") @ torch.ones(4, 2, device="spyre")


def test_unsupported_dtype_takes_the_fallback():
    a = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    with pytest.warns(UserWarning, match="aten::mm' has no Spyre kernel"):
        out = a.to("spyre") @ a.t().to("spyre")
    assert out.device.type == "spyre"
    assert torch.equal(out.cpu(), a @ a.t())
    torch_spyre.set_cpu_fallback("error")
    with pytest.raises(NotImplementedError, match="aten::mm"):
        a.to("spyre") @ a.t().to("spyre")


def _cycles(config: str | None, setup: str, op: str) -> int:
    """Device cycles of `op` (after `setup` and one warm-up run of `op`) under `config`."""
    code = (
        "import torch, torch_spyre\n"
        f"{setup}\n{op}\ntorch.spyre.synchronize()\n"  # warm: program compile and load
        f"c0 = torch_spyre.device_cycles()\n{op}\ntorch.spyre.synchronize()\n"
        "print(torch_spyre.device_cycles() - c0)\n"
    )
    proc = run_python(code, env={"SPYRE_CONFIG": config} if config else None)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


MATMUL = ("x = torch.ones(1024, 1024).to('spyre')", "y = x @ x")
ELEMENTWISE = ("x = torch.ones(4 << 20).to('spyre')", "y = x + x")


def test_device_time_is_reproducible_and_follows_the_config(tmp_path):
    slow_mem = tmp_path / "slow_mem.json"
    slow_mem.write_text(json.dumps({"memory": {"bandwidth_gbps": 102.4}}))
    big_pt = tmp_path / "big_pt.json"
    big_pt.write_text(json.dumps({"chip": {"pt_rows": 16}}))
    # 1024^3 fp32 (fp32 runs the PT array at a quarter rate) is mostly compute bound: a PT array of
    # twice the rows makes it much faster; half the LPDDR5 bandwidth costs much less than 2x.
    base = _cycles(None, *MATMUL)
    assert _cycles(None, *MATMUL) == base  # same program, same config, same cycles
    assert _cycles(str(big_pt), *MATMUL) < 0.8 * base
    assert _cycles(str(slow_mem), *MATMUL) < 1.4 * base
    # An elementwise add streams 32 MiB in and 16 MiB out: memory bound, so the opposite holds.
    base = _cycles(None, *ELEMENTWISE)
    assert _cycles(str(slow_mem), *ELEMENTWISE) > 1.6 * base
    assert abs(_cycles(str(big_pt), *ELEMENTWISE) - base) < 0.05 * base


def test_arithmetic_beside_systemc_matches_inline(tmp_path):
    """The cores' arithmetic (and the copies of LOADs) runs on a worker thread beside the SystemC
    thread; with sim.async_compute false it runs inline. A training step of a transformer layer
    with attention, and GEMMs, give the same bits both ways: a missed wait for the worker would
    read stale tiles, or overwrite device memory that a deferred load has yet to read. (Not the
    device cycles: when the host's commands reach a busy card can still change those slightly;
    see the architect guide.)"""
    inline = tmp_path / "inline.json"
    inline.write_text(json.dumps({"sim": {"async_compute": False}, "chip": {"fp16_format": "ieee"}}))
    code = """
import hashlib, torch, torch_spyre
import torch.nn.functional as F
torch_spyre.set_cpu_fallback("error")
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(64, 4, 96, dropout=0.0, batch_first=True).to("spyre")
x = torch.randn(3, 37, 64).to("spyre")
out = layer(x)
q, k, v = (t.reshape(3, 37, 4, 16).transpose(1, 2) for t in (out, out * 2, out - 1))
out = F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(1) @ torch.ones(16, 300, device="spyre")
out.square().mean().backward()
with torch.no_grad():
    busy, z, zs = torch.randn(1024, 1024).to("spyre"), torch.randn(512, 512).to("spyre"), []
    for i in range(4):
        busy @ busy  # keeps the worker busy, so that the loads of z below wait in its queue
        zs.append(z.t() * 2)
        z.copy_(torch.full((512, 512), float(i)))  # must not land before those loads have read z
digest = hashlib.sha256(out.detach().cpu().numpy().tobytes() + torch.cat(zs).cpu().numpy().tobytes())
for p in layer.parameters():
    digest.update(p.grad.cpu().numpy().tobytes())
print(digest.hexdigest())
"""
    runs = [run_python(code, env={"SPYRE_CONFIG": str(inline)} if cfg else None) for cfg in (False, True)]
    for proc in runs:
        assert proc.returncode == 0, proc.stderr
    assert runs[0].stdout == runs[1].stdout


def test_large_gemms_share_panels_between_cores(tmp_path):
    """Large GEMMs spread their blocks over a grid of cores that share A and B panels through
    LOAD_MULTICAST: CPU's results for every operand layout and for a bias, and near the PT array's
    peak with and without a bias."""
    code = """
import json, os, torch, torch_spyre
torch_spyre.set_cpu_fallback("error")
g = torch.Generator().manual_seed(0)
def r(*s, dtype=torch.float32):
    return torch.randn(*s, generator=g).to(dtype)
def check(got, want, tol):
    torch.testing.assert_close(got.cpu().float(), want.float(), rtol=tol, atol=tol)
a, b = r(2048, 4096, dtype=torch.float16), r(4096, 2048, dtype=torch.float16)
da, db = a.to("spyre"), b.to("spyre")
y = da @ db
torch.spyre.synchronize()
c0 = torch_spyre.device_cycles()
y = da @ db
torch.spyre.synchronize()
cycles = torch_spyre.device_cycles() - c0
check(y, (a.float() @ b.float()).half(), 2e-3)
bias = r(2048, dtype=torch.float16)  # the bias row of a linear layer: added by each core to its block
dbias = bias.to("spyre")
c0 = torch_spyre.device_cycles()
yb = torch.addmm(dbias, da, db)
torch.spyre.synchronize()
cycles_bias = torch_spyre.device_cycles() - c0
check(yb, (bias.float() + a.float() @ b.float()).half(), 2e-3)
full = r(1024, 2048)
check(torch.addmm(full.to("spyre"), r(1024, 512).to("spyre") * 0 + 1, r(512, 2048).to("spyre") * 0 + 2, beta=0.5),
      0.5 * full + 1024, 1e-4)
at, bt = r(1024, 2048, dtype=torch.bfloat16), r(2048, 1024, dtype=torch.bfloat16)
check(at.to("spyre").t() @ bt.to("spyre").t(), (at.float().t() @ bt.float().t()).bfloat16(), 1e-2)
f, h = r(1024, 512), r(512, 2048)
check(f.to("spyre") @ h.to("spyre"), f @ h, 1e-4)
check(torch.addmm(r(1024, 2048).to("spyre"), f.to("spyre"), h.to("spyre"), beta=0, alpha=0.5), 0.5 * (f @ h), 1e-4)
p, q = r(2, 1024, 256), r(2, 256, 2048)
check(torch.bmm(p.to("spyre"), q.to("spyre")), torch.bmm(p, q), 1e-4)
out = torch.zeros(1024, 2100, device="spyre")
torch.mm(f.to("spyre"), h.to("spyre"), out=out[:, 20:2068])
check(out[:, 20:2068], f @ h, 1e-4)
assert out[:, :20].abs().sum().item() == 0 and out[:, 2068:].abs().sum().item() == 0
print(json.dumps({"cycles": cycles, "cycles_bias": cycles_bias}))
"""
    trace = tmp_path / "trace.json"
    proc = run_python(code, env={"SPYRE_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    cycles = figures["cycles"]
    # The default chip: 32 cores of 2 corelets, each an 8x8 PT array of 8 fp16 lanes.
    peak_flops_per_cycle = 32 * 2 * 8 * 8 * 8 * 2
    ideal = 2 * 2048 * 4096 * 2048 / peak_flops_per_cycle
    assert cycles < ideal / 0.8, f"{cycles} cycles: {100 * ideal / cycles:.0f} % of peak"
    # With a bias (a linear layer's): still shared panels, near the peak.
    assert figures["cycles_bias"] < ideal / 0.75, f"{figures['cycles_bias']} cycles with a bias"
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "load multicast issue" for e in events)


def test_a_large_fp16_matmul_shares_512_wide_panels_and_matches_cpu(cpu_gen):
    """1024 x 4096 @ 4096 x 4096 in fp16 with a bias: the planner takes shared panels with 512-row
    blocks (fewer bytes per multiply-add on a busy LPDDR5), whose epilogue, chunked stores and
    rank offsets must land every block where it belongs."""
    a = torch.randn(1024, 4096, generator=cpu_gen).half()
    b = (torch.randn(4096, 4096, generator=cpu_gen) / 64).half()
    bias = torch.randn(4096, generator=cpu_gen).half()
    torch_spyre.set_cpu_fallback("error")
    out = torch.addmm(bias.to("spyre"), a.to("spyre"), b.to("spyre")).cpu()
    listing = torch_spyre.debug.listing("aten::addmm")
    assert "M=512 K=128 N=256" in listing, listing[:2000]
    want = torch.addmm(bias.float(), a.float(), b.float())
    # fp32 accumulation on both sides; the device rounds once into fp16 (DLFloat16 or IEEE half).
    torch.testing.assert_close(out.float(), want, rtol=4e-3, atol=2e-2)


def test_a_linear_layers_transposed_weight_costs_its_gemm_no_pt_time(tmp_path):
    """nn.Linear multiplies by its weight [n, k] transposed: every core transposes each B panel on
    the SFP. Pipelined, that transpose and the step's barrier run while the PT arrays finish the
    previous step's MATMUL (a BARRIER that keeps it running), so the layer takes no longer than
    the same GEMM with B already [k, n]; before, the arrays idled through both on every step
    (about 6 % at this size). The cycles are the timed simulator's; timing mode skips the values."""
    config = tmp_path / "timing.json"
    config.write_text(json.dumps({"sim": {"mode": "timing"}}))
    code = """
import json, torch, torch_spyre
import torch.nn.functional as F
from torch_spyre import debug
torch_spyre.set_cpu_fallback("error")
x = torch.empty(2048, 4096, dtype=torch.bfloat16, device="spyre")
w = torch.empty(4096, 4096, dtype=torch.bfloat16, device="spyre")  # [n, k], as nn.Linear keeps it
wt = torch.empty(4096, 4096, dtype=torch.bfloat16, device="spyre")  # [k, n]
def cycles(fn):
    fn()
    torch.spyre.synchronize()
    c0 = torch_spyre.device_cycles()
    fn()
    torch.spyre.synchronize()
    return torch_spyre.device_cycles() - c0
linear = cycles(lambda: F.linear(x, w))
listing = debug.listing("aten::mm")
print(json.dumps({"linear": linear, "plain": cycles(lambda: x @ wt), "listing": listing}))
"""
    proc = run_python(code, env={"SPYRE_CONFIG": str(config)})
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "TRANSP" in got["listing"] and "BARRIER  keeps the latest 1 MATMUL" in got["listing"]
    peak_flops_per_cycle = 32 * 2 * 8 * 8 * 8 * 2  # the default card's PT arrays
    ideal = 2 * 2048 * 4096 * 4096 / peak_flops_per_cycle
    assert got["plain"] < ideal / 0.88, f"{got['plain']} cycles: {100 * ideal / got['plain']:.1f} % of the peak"
    assert got["linear"] <= 1.01 * got["plain"], got
