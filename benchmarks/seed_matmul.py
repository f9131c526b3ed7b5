"""Wall time of the seed matmul (1024 x 1024 float32) on the simulated Spyre and on the CPU.

Both are measured in the same process, after a warm-up, as the median of --repeat runs:
  spyre kernel     torch.matmul on spyre tensors + torch.spyre.synchronize()
  spyre end-to-end the seed program: .to("spyre") both operands, matmul, result .cpu()
  cpu              torch.matmul on CPU tensors (PyTorch's own threads)
The simulated device time of one matmul is printed beside them.
"""

from __future__ import annotations

import argparse

import torch
import torch_spyre
from timing import median_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()

    n = args.size
    host = torch.randn(n, n, generator=torch.Generator().manual_seed(0))
    dev = host.to("spyre")

    def spyre_kernel():
        torch.matmul(dev, dev)
        torch.spyre.synchronize()

    def spyre_end_to_end():
        d = host.to("spyre")
        torch.matmul(d, d).cpu()

    def cpu():
        torch.matmul(host, host)

    t_kernel = median_seconds(spyre_kernel, args.repeat)
    t_e2e = median_seconds(spyre_end_to_end, args.repeat)
    t_cpu = median_seconds(cpu, args.repeat)

    c0 = torch_spyre.device_cycles()
    spyre_kernel()
    cycles = torch_spyre.device_cycles() - c0
    mhz = torch_spyre.device_info()["clock_mhz"]

    torch.testing.assert_close(torch.matmul(dev, dev).cpu(), torch.matmul(host, host), rtol=1e-4, atol=1e-4)
    print(
        f"seed matmul {n}x{n}x{n} float32, median of {args.repeat} (torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads)"
    )
    print(f"  spyre kernel (wall):      {t_kernel * 1e3:9.2f} ms")
    print(f"  spyre end-to-end (wall):  {t_e2e * 1e3:9.2f} ms")
    print(f"  cpu torch.matmul (wall):  {t_cpu * 1e3:9.2f} ms")
    print(f"  slowdown kernel vs cpu:   {t_kernel / t_cpu:9.1f} x")
    print(f"  simulated device time:    {cycles / mhz:9.1f} us ({cycles:,} cycles at {mhz} MHz)")


if __name__ == "__main__":
    main()
