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


# GradScaler's kernels (torch_spyre/_amp.py), each against CPU's on the same numbers.


def _grads(dtype, device):
    """Gradients of several shapes and layouts; the second holds an inf and a NaN."""
    g = torch.Generator().manual_seed(1)
    plain = torch.randn(37, 5, generator=g).to(dtype) * 300
    bad = torch.randn(130, generator=g).to(dtype) * 1e3
    bad[[3, 77]] = torch.tensor([float("inf"), float("nan")]).to(dtype)
    wide = torch.randn(6, 9, generator=g).to(dtype)
    tensors = [plain, bad, torch.tensor(2.5, dtype=dtype), torch.empty(0, 3, dtype=dtype), wide]
    out = [t.to(device) for t in tensors]
    out[-1] = out[-1].t()  # a transposed view is unscaled where it lies
    return out


@pytest.mark.parametrize("inv_scale", [2.0**-16, 1 / 3, 1.0], ids=["2^-16", "1/3", "1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
def test_grad_scalers_unscale_kernel_matches_cpu_without_leaving_the_device(dtype, inv_scale):
    results = {}
    for device in ("cpu", "spyre"):
        for with_bad in (False, True):
            grads = _grads(dtype, device)
            if not with_bad:
                del grads[1]
            found = torch.zeros(1, device=device)
            torch_spyre.fallback_counts(reset=True)
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.tensor([inv_scale], device=device))
            if device == "spyre":
                assert not torch_spyre.fallback_counts(), "unscaling fell back to the CPU"
                assert grads[-1].stride() == (1, 9)
            results[device, with_bad] = [t.cpu() for t in grads] + [found.cpu()]
    for with_bad in (False, True):
        cpu, spyre = results["cpu", with_bad], results["spyre", with_bad]
        for a, b in zip(cpu, spyre, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            torch.testing.assert_close(b, a, rtol=0, atol=0, equal_nan=True)
        assert spyre[-1].item() == (1.0 if with_bad else 0.0)


def test_grad_scalers_unscale_kernel_keeps_a_found_inf_already_set():
    found = torch.ones(1, device="spyre")
    grads = [torch.ones(4, device="spyre")]
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.tensor([0.5], device="spyre"))
    assert found.item() == 1.0 and grads[0].cpu().tolist() == [0.5] * 4


def _update_scale_run(device, scale, growth, backoff, interval, found_pattern):
    current = torch.tensor([scale], device=device)
    tracker = torch.zeros(1, dtype=torch.int32, device=device)
    seen = []
    for found in found_pattern:
        found_inf = torch.tensor([found], device=device)
        out = torch._amp_update_scale_(current, tracker, found_inf, growth, backoff, interval)
        assert out is current
        seen.append((current.item(), tracker.item()))
    return seen


@pytest.mark.parametrize(
    ("scale", "growth", "backoff", "interval"),
    [(65536.0, 2.0, 0.5, 2), (1000.0, 1.1, 0.3, 3), (3.0e38, 2.0, 0.5, 1)],
    ids=["powers-of-two", "factors-that-round", "growth-past-fp32"],
)
def test_grad_scalers_update_scale_kernel_matches_cpu(scale, growth, backoff, interval):
    pattern = [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    cpu = _update_scale_run("cpu", scale, growth, backoff, interval, pattern)
    torch_spyre.fallback_counts(reset=True)
    spyre = _update_scale_run("spyre", scale, growth, backoff, interval, pattern)
    assert not torch_spyre.fallback_counts()
    assert spyre == cpu


@pytest.mark.parametrize(
    "bad",
    ["found_inf_double", "inv_scale_two_elements", "tracker_float", "integer_grad"],
)
def test_grad_scalers_kernels_refuse_what_cpu_refuses(bad):
    def call(device):
        grads = [torch.ones(3, device=device, dtype=torch.int32 if bad == "integer_grad" else torch.float32)]
        found = torch.zeros(1, device=device, dtype=torch.float64 if bad == "found_inf_double" else torch.float32)
        inv = torch.ones(2 if bad == "inv_scale_two_elements" else 1, device=device)
        if bad == "tracker_float":
            torch._amp_update_scale_(torch.ones(1, device=device), torch.zeros(1, device=device), found, 2.0, 0.5, 2)
        else:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)

    with pytest.raises(RuntimeError):
        call("cpu")
    with pytest.raises(RuntimeError):
        call("spyre")


def test_a_grad_scaler_training_loop_matches_cpu():
    """GradScaler with bf16 autocast: an overflowing step is skipped and the scale backs off, then
    grows, as on the CPU; only GradScaler's own float64 reciprocal of the scale leaves the card."""

    def run(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
        scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=2)
        x = torch.randn(5, 8, generator=torch.Generator().manual_seed(0)).to(device)
        scales = []
        for i in range(6):
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = model(x).float().square().mean()
            opt.zero_grad()
            scaler.scale(loss).backward()
            if i == 2:
                model[0].weight.grad[0, 0] = float("inf")
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        return scales, [p.detach().cpu() for p in model.parameters()]

    torch_spyre.set_cpu_fallback("allow")
    torch_spyre.fallback_counts(reset=True)
    spyre_scales, spyre_params = run("spyre")
    assert set(torch_spyre.fallback_counts()) <= {"aten::reciprocal"}
    cpu_scales, cpu_params = run("cpu")
    assert spyre_scales == cpu_scales == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0, 2048.0]
    for a, b in zip(cpu_params, spyre_params, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
