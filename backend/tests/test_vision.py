"""Vision layers on the device against CPU torch with TORCH_SPYRE_CPU_FALLBACK=error: batch,
group and instance norm (training and eval, running statistics), max, average and adaptive
pooling, interpolation and padding modes, forward and backward, in a ResNet-style network, a
U-Net-style decoder and compiled. These ops run as decompositions into native ops
(torch_spyre/_decomposed.py); the OpInfo tests of test_ops.py cover their samples one by one."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_spyre

S = "spyre"


class Block(nn.Module):
    """A ResNet basic block with a downsampling shortcut."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.down(x))


def resnet():
    return nn.Sequential(
        nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
        Block(8, 16, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5),
    )  # fmt: skip


class Decoder(nn.Module):
    """U-Net-style: group and instance norm, upsampling, reflect and replicate padding, average
    and adaptive max pooling."""

    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(2, 4)
        self.inorm = nn.InstanceNorm2d(4, affine=True, track_running_stats=True)
        self.conv = nn.Conv2d(4, 4, 3)

    def forward(self, x):
        y = self.gn(x)
        y = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        y = self.conv(F.pad(y, (1, 1, 1, 1), mode="reflect"))
        y = self.inorm(F.avg_pool2d(y, 3, 2, 1, ceil_mode=True, count_include_pad=False))
        y = F.pad(F.interpolate(y, size=(7, 5), mode="nearest"), (1, 2, 0, 1), mode="replicate")
        return F.adaptive_max_pool2d(y, (3, 2)) + F.adaptive_avg_pool2d(y, (3, 2))


def _grads(model):
    return {n: p.grad for n, p in model.named_parameters()}


def _close(a, b, what):
    torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-4, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("make,shape", [(resnet, (4, 3, 32, 32)), (Decoder, (2, 4, 9, 11))], ids=["resnet", "decoder"])
def test_a_vision_network_trains_and_evaluates_like_cpu(make, shape):
    torch.manual_seed(0)
    model = make()
    dev = copy.deepcopy(model).to(S)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    torch_spyre.set_cpu_fallback("error")
    opt, opt_d = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(dev.parameters(), lr=0.1)
    for step in range(2):  # training: batch statistics, running statistics updated in place
        out, out_d = model(x), dev(x.to(S))
        _close(out_d, out, f"training forward {step}")
        out.square().mean().backward()
        out_d.square().mean().backward()
        for name, g in _grads(dev).items():
            _close(g, _grads(model)[name], f"grad of {name}")
        opt.step(), opt_d.step()
        opt.zero_grad(), opt_d.zero_grad()
    for (name, a), b in zip(dev.state_dict().items(), model.state_dict().values(), strict=True):
        _close(a, b, f"{name} after training")
    model.eval(), dev.eval()
    with torch.no_grad():
        _close(dev(x.to(S)), model(x), "eval forward")


def test_a_compiled_vision_network_matches_cpu():
    torch.manual_seed(0)
    model = resnet()
    dev = torch.compile(copy.deepcopy(model).to(S), backend="spyre")
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    torch_spyre.set_cpu_fallback("error")
    out, out_d = model(x), dev(x.to(S))
    _close(out_d, out, "compiled forward")
    out.sum().backward()
    out_d.sum().backward()
    for (name, a), b in zip(dev.named_parameters(), model.parameters(), strict=True):
        _close(a.grad, b.grad, f"compiled grad of {name}")


def test_pooling_and_unpooling_raise_where_cpu_raises():
    torch_spyre.set_cpu_fallback("error")
    x = torch.randn(1, 2, 8, 8)
    values, indices = F.max_pool2d(x, 2, return_indices=True)
    for bad in (indices + 1000, indices - 1000):
        with pytest.raises(RuntimeError, match="invalid max index"):
            F.max_unpool2d(values, bad, 2)
        with pytest.raises(RuntimeError, match="invalid max index"):
            F.max_unpool2d(values.to(S), bad.to(S), 2)
    for fn in (lambda t: F.avg_pool2d(t, 3, padding=2), lambda t: F.max_pool2d(t, 0), lambda t: F.avg_pool2d(t, 9)):
        with pytest.raises(RuntimeError) as cpu:
            fn(x)
        with pytest.raises(RuntimeError) as dev:
            fn(x.to(S))
        assert str(cpu.value).split("\n")[0][:40] == str(dev.value).split("\n")[0][:40]
    with pytest.raises(RuntimeError):
        F.batch_norm(x.to(S), torch.zeros(3).to(S), torch.ones(3).to(S))  # 2 channels, 3 statistics


def test_batch_norm_statistics_take_cpu_dtypes():
    """fp16 input with fp32 running statistics keeps fp32 statistics; eval returns none saved."""
    torch_spyre.set_cpu_fallback("error")
    aten = torch.ops.aten
    x = torch.randn(2, 3, 4).half()
    stats = (torch.randn(3), torch.randn(3), torch.zeros(3), torch.ones(3))
    for training in (True, False):
        want = aten.native_batch_norm(x, *stats, training, 0.1, 1e-5)
        got = aten.native_batch_norm(x.to(S), *(t.to(S) for t in stats), training, 0.1, 1e-5)
        for g, w in zip(got, want, strict=True):
            assert (g.dtype, g.shape) == (w.dtype, w.shape)
        _close(got[0].float(), want[0].float(), "normalized")


@pytest.mark.parametrize("name,extra", [("upsample_nearest2d", ()), ("upsample_bilinear2d", (False,))])
def test_interpolation_backward_writes_its_grad_input_out(name, extra):
    """The .grad_input overload (an out= tensor not named "out") runs on the device and writes CPU's
    gradient into an empty out or one it resizes; an out of another dtype raises CPU's error."""
    torch_spyre.set_cpu_fallback("error")
    op = getattr(torch.ops.aten, f"{name}_backward").grad_input
    grad = torch.randn(2, 3, 8, 6, generator=torch.Generator().manual_seed(3))
    args = ([8, 6], [2, 3, 4, 3], *extra)
    want = op(grad, *args, grad_input=torch.empty(0))
    for shape in ((0,), (2, 3, 4, 3)):
        out = torch.empty(shape, device=S)
        assert op(grad.to(S), *args, grad_input=out) is out
        _close(out, want, f"{name}_backward.grad_input into {list(shape)}")
    with pytest.raises(RuntimeError) as cpu:
        op(grad, *args, grad_input=torch.empty(0, dtype=torch.int64))
    with pytest.raises(RuntimeError) as dev:
        op(grad.to(S), *args, grad_input=torch.empty(0, dtype=torch.int64, device=S))
    assert str(dev.value) == str(cpu.value)
