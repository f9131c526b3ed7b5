"""Vision on the card, each figure beside CPU torch in the same run.

  resnet conv   a ResNet-style 3x3 convolution (batch 8, 64 to 64 channels, 56x56, stride 1,
                padding 1): its device time and PT-array utilisation, 2*N*O*C*H*W*9 over
                (device seconds * the configured chip's peak for the dtype), in fp16 and fp32,
                and the host wall time of one call (simulation included) beside CPU's fp32 call;
                forward, and forward with backward (input and weight gradients)
  vit forward   a ViT-Small-style image classifier (HuggingFace's ViTForImageClassification,
                224x224, 16x16 patches, 12 layers of width 384, batch 2) in fp32: wall time of
                one forward, and its device time

Run it alone on the machine (no build, no other job): the simulator's speed depends on the host.

    .venv/bin/python benchmarks/vision.py [--only conv|vit] [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("SPYRE_STATS", str(Path(tempfile.mkdtemp()) / "stats.json"))  # the configured chip

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch_spyre  # noqa: E402
from spyre_arch.analysis import roofs  # noqa: E402
from timing import median_seconds  # noqa: E402


def peak_flops(dtype: torch.dtype) -> float:
    """The configured chip's PT-array peak for `dtype` in FLOP/s (fp16's, times chip.fp32_rate for fp32)."""
    _, stats = torch_spyre.write_reports()
    r = roofs(json.loads(Path(stats).read_text())["config"])
    return r.fp32_peak if dtype == torch.float32 else r.peak


def device_seconds(fn) -> float:
    """Simulated device seconds of one call of `fn` (after a warm-up call: programs compiled and loaded)."""
    fn()
    torch.spyre.synchronize()
    c0 = torch_spyre.device_cycles()
    fn()
    torch.spyre.synchronize()
    return (torch_spyre.device_cycles() - c0) / (torch_spyre.device_info()["clock_mhz"] * 1e6)


def _synced(fn):
    return lambda: (fn(), torch.spyre.synchronize())


def resnet_conv(repeat: int) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, 56, 56, generator=g)
    w = torch.randn(64, 64, 3, 3, generator=g) * 0.05
    flops = 2.0 * 8 * 64 * 64 * 56 * 56 * 9

    def forward(xx, ww):
        return lambda: F.conv2d(xx, ww, padding=1)

    def training(xx, ww):
        def step():
            xx.grad, ww.grad = None, None
            F.conv2d(xx, ww, padding=1).sum().backward()

        return step

    t_cpu = median_seconds(forward(x, w), repeat)
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    t_cpu_bw = median_seconds(training(xc, wc), repeat)
    for dtype in (torch.float16, torch.float32):
        xd, wd = x.to("spyre", dtype), w.to("spyre", dtype)
        fwd = forward(xd, wd)
        seconds = device_seconds(fwd)
        wall = median_seconds(_synced(fwd), repeat)
        xg, wg = xd.clone().requires_grad_(), wd.clone().requires_grad_()
        bwd = training(xg, wg)
        seconds_bw = device_seconds(bwd)
        wall_bw = median_seconds(_synced(bwd), repeat)
        peak = peak_flops(dtype)
        name = str(dtype).removeprefix("torch.")
        print(
            f"resnet conv   3x3, 8x64x56x56 {name:7s} forward: device {seconds * 1e3:6.3f} ms, PT utilisation "
            f"{flops / seconds / peak:5.1%} of {peak / 1e12:5.1f} TFLOP/s; wall spyre {wall * 1e3:7.1f} ms, "
            f"cpu fp32 {t_cpu * 1e3:6.1f} ms ({wall / t_cpu:4.1f}x)"
        )
        print(
            f"              with backward: device {seconds_bw * 1e3:6.3f} ms, PT utilisation "
            f"{3 * flops / seconds_bw / peak:5.1%}; wall spyre {wall_bw * 1e3:7.1f} ms, "
            f"cpu fp32 {t_cpu_bw * 1e3:6.1f} ms ({wall_bw / t_cpu_bw:4.1f}x)"
        )


def vit_forward(repeat: int) -> None:
    import transformers

    config = transformers.ViTConfig(
        image_size=224, patch_size=16, hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
        intermediate_size=1536, num_labels=1000,
    )  # fmt: skip
    torch.manual_seed(0)
    cpu = transformers.ViTForImageClassification(config).eval()
    dev = copy.deepcopy(cpu).to("spyre")
    pixels = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    on_dev = pixels.to("spyre")

    def spyre():
        with torch.no_grad():
            return dev(pixel_values=on_dev).logits.cpu()

    def host():
        with torch.no_grad():
            return cpu(pixel_values=pixels).logits

    worst = (spyre() - host()).abs().max().item()
    t_dev, t_cpu = median_seconds(spyre, repeat), median_seconds(host, repeat)
    seconds = device_seconds(spyre)
    print(
        f"vit forward   ViT-S/16, 224x224, batch 2, fp32: wall spyre {t_dev * 1e3:7.1f} ms, cpu {t_cpu * 1e3:6.1f} ms "
        f"({t_dev / t_cpu:4.1f}x); device {seconds * 1e3:6.3f} ms; largest logit difference {worst:.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per figure (medians are printed)")
    parser.add_argument("--only", choices=["conv", "vit"], help="one figure")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    torch_spyre.set_cpu_fallback("error")  # every figure is of native kernels
    start = time.perf_counter()
    if args.only in (None, "conv"):
        resnet_conv(args.repeat)
    if args.only in (None, "vit"):
        vit_forward(args.repeat)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
