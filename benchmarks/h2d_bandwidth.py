"""Host-to-device bandwidth from pinned and from pageable memory, timed by the card's events.

For each size, a copy `dst.copy_(src, non_blocking=True)` is bracketed by two events with timing
on the same stream; their elapsed time is device time from the card's clock. From pinned memory
the card reads the source in place; from pageable memory the host first stages each piece (of
TORCH_SPYRE_COPY_CHUNK bytes) into mapped memory, so the card may wait for the host between
pieces. Figures are set against the modelled PCIe link (pcie.bandwidth_gbps of $SPYRE_CONFIG,
default 64 GB/s per direction), and the host wall time of each copy call is printed beside them.
"""

import argparse
import json
import os
import statistics
import time

import torch


def link_gbps() -> float:
    path = os.environ.get("SPYRE_CONFIG")
    if path:
        with open(path) as f:
            return float(json.load(f).get("pcie", {}).get("bandwidth_gbps", 64.0))
    return 64.0


def measure(src: torch.Tensor, dst: torch.Tensor, repeat: int) -> tuple[float, float]:
    """Median device milliseconds and median host milliseconds of one copy."""
    device_ms, host_ms = [], []
    for i in range(repeat + 1):
        torch.spyre.synchronize()
        start, end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        t1 = time.perf_counter()
        end.synchronize()
        if i > 0:  # the first one warms up staging buffers and mappings
            device_ms.append(start.elapsed_time(end))
            host_ms.append((t1 - t0) * 1e3)
    return statistics.median(device_ms), statistics.median(host_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 16, 256])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    link = link_gbps()
    print(f"modelled PCIe link: {link:.1f} GB/s per direction")
    print(f"{'size':>8} {'source':>9} {'device ms':>10} {'GB/s':>7} {'of link':>8} {'host ms':>8}")
    for mib in args.sizes_mib:
        n = mib << 20
        dst = torch.empty(n // 4, device="spyre")
        for kind in ("pinned", "pageable"):
            src = torch.ones(n // 4)
            if kind == "pinned":
                src = src.pin_memory()
            device_ms, host_ms = measure(src, dst, args.repeat)
            gbps = n / (device_ms * 1e-3) / 1e9
            print(f"{mib:>5} MiB {kind:>9} {device_ms:>10.3f} {gbps:>7.1f} {gbps / link:>7.0%} {host_ms:>8.2f}")
            del src
        del dst


if __name__ == "__main__":
    main()
