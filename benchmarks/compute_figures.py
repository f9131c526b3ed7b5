"""The figures the compute work is judged by, each beside CPU torch in the same run.

  op overhead      wall time per call of x.add_(1) on 16 elements, through the whole stack
  llama step       wall time of one training step (forward, backward, AdamW) of a small
                   Llama-style decoder (HuggingFace's LlamaForCausalLM), and of its forward
  gemm utilisation PT-array utilisation of an fp16 GEMM (default 4096 cubed) in the model:
                   2*M*N*K / (device seconds * peak fp16 FLOP/s of the configured chip)
  seed gemm        wall time of the 1024-cube fp32 matmul of the seed example

Run it alone on the machine (no build, no other job): the simulator's speed depends on the host.
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import torch
import torch.nn.functional as F
import torch_spyre
from timing import median_seconds

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def op_overhead(calls: int) -> None:
    dev, cpu = torch.zeros(16, device="spyre"), torch.zeros(16)

    def spyre():
        for _ in range(calls):
            dev.add_(1)
        torch.spyre.synchronize()

    def host():
        for _ in range(calls):
            cpu.add_(1)

    t_dev, t_cpu = median_seconds(spyre, 5) / calls, median_seconds(host, 5) / calls
    print(f"op overhead   x.add_(1), 16 elements: spyre {t_dev * 1e6:7.1f} us/call   cpu {t_cpu * 1e6:6.2f} us/call")


def llama_model():
    """The Llama-style decoder of the step figures (seeded, on the CPU) and its 4 x 129 tokens."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    data = torch.randint(0, config.vocab_size, (4, 129), generator=torch.Generator().manual_seed(0))
    return transformers.LlamaForCausalLM(config), data


def llama_step(repeat: int) -> None:
    base, data = llama_model()
    results = {device: _time_llama(copy.deepcopy(base), data, device, repeat) for device in ("cpu", "spyre")}
    (cs, cf), (ss, sf) = results["cpu"], results["spyre"]
    print(
        f"llama step    4x128 tokens, 4 layers x 256: train step spyre {ss * 1e3:7.1f} ms  cpu {cs * 1e3:7.1f} ms"
        f"  ({ss / cs:4.1f}x)   forward spyre {sf * 1e3:7.1f} ms  cpu {cf * 1e3:7.1f} ms  ({sf / cf:4.1f}x)"
    )


def llama_calls(model, data: torch.Tensor, device: str):
    """(training step, forward) of `model` moved to `device`, each a call that waits for its result."""
    model = model.to(device)
    vocab = model.config.vocab_size
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = data[:, :-1].to(device), data[:, 1:].to(device)

    def step():
        logits = model(inputs).logits
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()

    def forward():
        with torch.no_grad():
            model(inputs).logits.sum().item()

    return step, forward


def _time_llama(model, data: torch.Tensor, device: str, repeat: int) -> tuple[float, float]:
    """(training step, forward) median wall seconds of `model` on `device`."""
    step, forward = llama_calls(model, data, device)
    return median_seconds(step, repeat), median_seconds(forward, repeat)


def gemm_utilisation(n: int) -> None:
    info = torch_spyre.device_info()
    a = torch.randn(n, n, dtype=torch.float16).to("spyre")
    b = torch.randn(n, n, dtype=torch.float16).to("spyre")
    (a @ b).cpu()  # compile and load
    torch.spyre.synchronize()
    c0, t0 = torch_spyre.device_cycles(), time.perf_counter()
    a @ b
    torch.spyre.synchronize()
    cycles, wall = torch_spyre.device_cycles() - c0, time.perf_counter() - t0
    seconds = cycles / (info["clock_mhz"] * 1e6)
    peak = 98.304e12 * info["cores"] / 32 * info["clock_mhz"] / 1500  # the configured chip's fp16 peak
    achieved = 2.0 * n**3 / seconds
    print(
        f"gemm          {n}^3 fp16: {seconds * 1e3:8.3f} ms device time, {achieved / 1e12:6.1f} TFLOP/s, "
        f"PT utilisation {100 * achieved / peak:5.1f} % of {peak / 1e12:.1f} TFLOP/s (wall {wall:5.1f} s)"
    )


def seed_gemm(repeat: int) -> None:
    host = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0))
    dev = host.to("spyre")

    def spyre():
        torch.matmul(dev, dev)
        torch.spyre.synchronize()

    t_dev, t_cpu = median_seconds(spyre, repeat), median_seconds(lambda: torch.matmul(host, host), repeat)
    print(
        f"seed gemm     1024^3 fp32: spyre {t_dev * 1e3:7.1f} ms   cpu {t_cpu * 1e3:6.1f} ms   ({t_dev / t_cpu:4.1f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--gemm", type=int, default=4096, help="size of the utilisation GEMM")
    parser.add_argument("--only", choices=["overhead", "llama", "gemm", "seed"], help="one figure")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, spyre config {torch_spyre.device_info()}")
    torch_spyre.set_cpu_fallback("error")  # every figure is of native kernels
    if args.only in (None, "overhead"):
        op_overhead(2000)
    if args.only in (None, "seed"):
        seed_gemm(args.repeat)
    if args.only in (None, "llama"):
        llama_step(args.repeat)
    if args.only in (None, "gemm"):
        gemm_utilisation(args.gemm)


if __name__ == "__main__":
    main()
