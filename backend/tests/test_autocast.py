"""torch.autocast("spyre"): CUDA's op lists decide which ops run in the autocast dtype, which in
fp32, and which promote; checked against the same ops with the casts written out by hand."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch_spyre


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lists_decide_the_dtype_of_each_op(dtype, cpu_gen):
    torch_spyre.set_cpu_fallback("error")
    a = torch.randn(16, 32, generator=cpu_gen).to("spyre")
    b = torch.randn(32, 8, generator=cpu_gen).to("spyre")
    w = torch.randn(8, 32, generator=cpu_gen).to("spyre")
    assert dtype in torch.spyre.get_amp_supported_dtype()
    with torch.autocast("spyre", dtype=dtype):
        mm = a @ b  # lower precision
        lin = F.linear(a, w)
        soft = torch.softmax(mm, -1)  # fp32
        mixed = mm + a[:, :8]  # not listed: ordinary promotion
    assert mm.dtype == lin.dtype == dtype
    assert torch.equal(mm.cpu(), (a.to(dtype) @ b.to(dtype)).cpu())
    assert torch.equal(lin.cpu(), F.linear(a.to(dtype), w.to(dtype)).cpu())
    assert soft.dtype == torch.float32
    torch.testing.assert_close(soft.cpu(), torch.softmax(mm.float(), -1).cpu())
    assert mixed.dtype == torch.float32


def test_training_step_under_autocast_matches_cpu_autocast(cpu_gen):
    """A small MLP's forward and backward under bf16 autocast: fp32 parameters and gradients, and
    the gradients CPU autocast gives (its lists treat these layers the same way), to bf16 accuracy."""
    torch_spyre.set_cpu_fallback("error")
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 4)]
    x = torch.randn(8, 32, generator=cpu_gen)
    grads = {}
    for device in ("cpu", "spyre"):
        m = torch.nn.Sequential(*layers).to(device)
        m.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16):
            out = m(x.to(device))
        assert out.dtype == torch.bfloat16
        out.float().square().mean().backward()
        grads[device] = [p.grad.to("cpu", copy=True) for p in m.parameters()]  # .to(spyre) moves these
        assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in m.parameters())
    for got, want in zip(grads["spyre"], grads["cpu"], strict=True):
        torch.testing.assert_close(got, want, rtol=5e-2, atol=5e-3)
