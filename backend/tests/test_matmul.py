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


MATMUL = ("x = torch.ones(512, 512).to('spyre')", "y = x @ x")
ELEMENTWISE = ("x = torch.ones(4 << 20).to('spyre')", "y = x + x")


def test_device_time_is_reproducible_and_follows_the_config(tmp_path):
    slow_mem = tmp_path / "slow_mem.json"
    slow_mem.write_text(json.dumps({"memory": {"bandwidth_gbps": 102.4}}))
    big_pt = tmp_path / "big_pt.json"
    big_pt.write_text(json.dumps({"chip": {"pt_rows": 16}}))
    # 512^3 fp32 (fp32 runs the PT array at a quarter rate) is mostly compute bound: a PT array of
    # twice the rows makes it much faster; half the LPDDR5 bandwidth costs much less than 2x.
    base = _cycles(None, *MATMUL)
    assert _cycles(None, *MATMUL) == base  # same program, same config, same cycles
    assert _cycles(str(big_pt), *MATMUL) < 0.8 * base
    assert _cycles(str(slow_mem), *MATMUL) < 1.4 * base
    # An elementwise add streams 32 MiB in and 16 MiB out: memory bound, so the opposite holds.
    base = _cycles(None, *ELEMENTWISE)
    assert _cycles(str(slow_mem), *ELEMENTWISE) > 1.6 * base
    assert abs(_cycles(str(big_pt), *ELEMENTWISE) - base) < 0.05 * base
