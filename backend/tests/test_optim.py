"""The fused Adam and AdamW steps on spyre (torch_spyre/_optim.py) against CPU's fused kernels.

The optimizer settings are PyTorch's own (torch.testing's optim_db), plus a tensor learning rate
and GradScaler's unscaling and skipped steps. Each run takes several steps, so the moments and the
step count matter, and must not fall back to the CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch_spyre
from torch.testing._internal.common_optimizers import optim_db

CASES = [
    pytest.param(info.optim_cls, dict(case.kwargs), id=f"{info.optim_cls.__name__}-{case.desc.replace(' ', '_')}")
    for info in optim_db
    if info.optim_cls in (torch.optim.Adam, torch.optim.AdamW)
    for case in info.optim_inputs_func(device="cpu", dtype=None)
] + [
    pytest.param(torch.optim.AdamW, {"lr": "tensor", "weight_decay": 0.1}, id="AdamW-tensor_lr"),
    pytest.param(torch.optim.Adam, {"lr": "tensor", "amsgrad": True}, id="Adam-tensor_lr_amsgrad"),
]


def _run(optim_cls, kwargs, device, dtype, steps=4, scale=None, skip_step=None):
    """Parameters and optimizer state after `steps` fused steps on `device`, all on the CPU."""
    kwargs = dict(kwargs)
    if kwargs.get("lr") == "tensor":
        kwargs["lr"] = torch.tensor(0.02)
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(shape, generator=g, dtype=dtype).to(device).requires_grad_() for shape in ((37, 5), (130,))]
    opt = optim_cls(params, fused=True, **kwargs)
    for i in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g, dtype=dtype).to(device)
        if scale is None:
            opt.step()
            continue
        # What GradScaler's step passes: the scale, and whether this step's gradients overflowed.
        opt.grad_scale = torch.tensor(scale, device=device)
        opt.found_inf = torch.tensor(1.0 if i == skip_step else 0.0, device=device)
        opt.step()
    state = [t.cpu() for s in opt.state.values() for k, t in sorted(s.items())]
    return [p.detach().cpu() for p in params] + [p.grad.cpu() for p in params] + state


def _close(cpu, spyre, dtype):
    # Both compute in float32 and round once when they store; the two may round one value apart,
    # so low precision allows about one unit in the last place, relative: the second moments are
    # about 1e-3 and the steps about lr, so no absolute tolerance may hide them.
    rtol, atol = {torch.float32: (2e-6, 1e-7), torch.bfloat16: (8e-3, 1e-9), torch.float16: (1e-3, 1e-9)}[dtype]
    assert len(cpu) == len(spyre)
    for a, b in zip(cpu, spyre, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(b, a, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize(("optim_cls", "kwargs"), CASES)
def test_a_fused_step_matches_cpus_fused_kernel_on_the_device(optim_cls, kwargs, dtype):
    torch_spyre.fallback_counts(reset=True)
    spyre = _run(optim_cls, kwargs, "spyre", dtype)
    assert not torch_spyre.fallback_counts(), "the fused step fell back to the CPU"
    _close(_run(optim_cls, kwargs, "cpu", dtype), spyre, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("optim_cls", [torch.optim.Adam, torch.optim.AdamW])
def test_grad_scalers_unscaling_and_skipped_step_match_cpu(optim_cls, dtype):
    kwargs = {"weight_decay": 0.1, "amsgrad": True}
    torch_spyre.fallback_counts(reset=True)
    spyre = _run(optim_cls, kwargs, "spyre", dtype, scale=1024.0, skip_step=2)
    assert not torch_spyre.fallback_counts()
    cpu = _run(optim_cls, kwargs, "cpu", dtype, scale=1024.0, skip_step=2)
    _close(cpu, spyre, dtype)
    # The skipped step counts as not taken: after the parameters and their gradients, each
    # parameter's state is exp_avg, exp_avg_sq, max_exp_avg_sq and step.
    assert [spyre[4 + 3].item(), spyre[8 + 3].item()] == [3.0, 3.0]
