"""One rank of test_distributed.py's collective checks, run under torchrun.

Every collective of ``torch.distributed``, synchronous and as ``async_op``, runs twice on the same
inputs: on CPU tensors through Gloo (the reference) and on spyre tensors through the ``spyre``
backend, in one process group (``cpu:gloo,spyre:spyre``, or ``spyre`` alone with
``CHECKS_BACKEND=spyre``). The results must be the same bits, the
same shapes and dtypes, and where Gloo raises, spyre must raise too. Each rank writes what it found
to ``<out>/rank<r>.json``.

    torchrun --standalone --nproc-per-node 3 backend/tests/distributed_checks.py OUT
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import traceback

import torch
import torch.distributed as dist
import torch_spyre  # noqa: F401  (registers the device and the backend)

# The names of PyTorch 2.13 (the older ones warn that they are deprecated).
ALL_GATHER_SINGLE = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)
REDUCE_SCATTER_SINGLE = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DTYPES = (torch.float32, torch.bfloat16, torch.int64)
# CHECKS_ON_CARDS=1: every rank drives its own card of one spyre-simd, so the collectives run on
# the cards (peer-to-peer DMA and the cards' adds): floating-point reductions are compared within
# the rounding of another order of additions, sizes that take the ring are added, and the report
# counts the collectives the cards ran.
ON_CARDS = os.environ.get("CHECKS_ON_CARDS") == "1"
ON_CARDS_TOLERANCE = (
    {
        torch.float32: {"rtol": 1e-5, "atol": 1e-5},
        torch.bfloat16: {"rtol": 1.6e-2, "atol": 0.125},  # two roundings of bf16 (2^-7 of values to 8)
    }
    if ON_CARDS
    else None
)
RING_SIZES = (140_000,) if ON_CARDS else ()  # fp32: 547 KiB, above TREE_BELOW_BYTES
OPS = (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT)


def values(shape, dtype, salt: int) -> torch.Tensor:
    """Inputs that differ by rank and by case; small integers so that products stay in range."""
    g = torch.Generator().manual_seed(1000 * salt + RANK)
    if dtype == torch.int64:
        return torch.randint(-4, 5, shape, generator=g, dtype=dtype)
    return (torch.randn(shape, generator=g) * 2).to(dtype)


def to_spyre(x):
    if isinstance(x, torch.Tensor):
        return x.to("spyre")
    return [to_spyre(t) for t in x]


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    return [to_cpu(t) for t in x]


def run(fn, args, async_op: bool):
    """Runs one collective; the name of the error it raised, if any, and whether its Work (when
    async) says it is completed after wait()."""
    try:
        work = fn(*args, async_op=async_op)
        if async_op:
            work.wait()
            return None, work.is_completed()
        return None, True
    except Exception as e:  # noqa: BLE001  (compared with what Gloo raised)
        return type(e).__name__, True


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride() and torch.equal(a, b)
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))


def close(want, got, tolerance) -> bool:
    """Floating-point results equal within `tolerance` (the cards add in their ring's or tree's
    order, Gloo in its own: the last bits differ), everything else exactly."""
    if isinstance(want, torch.Tensor):
        if not want.is_floating_point():
            return same(want, got)
        alike = got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype
        return alike and torch.allclose(got.float(), want.float(), **tolerance[want.dtype])
    return len(want) == len(got) and all(close(w, g, tolerance) for w, g in zip(want, got, strict=True))


class Checks:
    def __init__(self) -> None:
        self.count = 0
        self.failures: list[str] = []

    def check(self, name: str, fn, make_args, outputs, async_op: bool = False, tolerance=None) -> None:
        """Runs `fn(*make_args())` on CPU tensors and on their spyre copies; compares the tensors
        that `outputs(args)` picks, and the errors."""
        self.count += 1
        cpu_args = make_args()
        spyre_args = [to_spyre(a) if isinstance(a, torch.Tensor | list) else a for a in make_args()]
        want_error, _ = run(fn, cpu_args, async_op)  # Gloo's reduce_scatter works never say completed
        got_error, completed = run(fn, spyre_args, async_op)
        label = f"{name} (async)" if async_op else name
        if not completed:
            self.failures.append(f"{label}: the work is not completed after wait()")
        if want_error or got_error:
            if want_error != got_error:
                self.failures.append(f"{label}: gloo raised {want_error}, spyre raised {got_error}")
            return
        want, got = outputs(cpu_args), to_cpu(outputs(spyre_args))
        if tolerance is not None and close(want, got, tolerance):
            return
        if not same(want, got):
            self.failures.append(f"{label}: spyre gave {got}, gloo {want}")


def all_to_all(outputs, inputs, async_op=False):
    """dist.all_to_all, which Gloo refuses (it has only the single-tensor form). The cards take it,
    so on them the CPU reference is the single-tensor form on the concatenated parts."""
    if not ON_CARDS or inputs[0].device.type != "cpu":
        return dist.all_to_all(outputs, inputs, async_op=async_op)
    out = torch.empty(sum(o.numel() for o in outputs), dtype=outputs[0].dtype)
    sizes = [o.numel() for o in outputs]
    dist.all_to_all_single(out, torch.cat(inputs), sizes, [x.numel() for x in inputs])
    for o, part in zip(outputs, out.split(sizes), strict=True):
        o.copy_(part)
    return _Done() if async_op else None


def coalesced(kind: str):
    """Two calls of `kind` in one torch.distributed coalescing block (as FSDP makes them), whose
    args are the two calls' tensors in order."""

    def fn(*tensors, async_op=False):
        with dist._coalescing_manager(async_ops=async_op) as cm:
            if kind == "all_reduce":
                for t in tensors:
                    dist.all_reduce(t)
            else:
                call = ALL_GATHER_SINGLE if kind == "all_gather_single" else REDUCE_SCATTER_SINGLE
                for out, x in zip(tensors[::2], tensors[1::2], strict=True):
                    call(out, x)
        if async_op:
            cm.wait()
            return _Done()
        return None

    return fn


class _Done:
    def wait(self) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def check_dtype(c: Checks, dtype: torch.dtype, salt: int) -> None:
    """Every collective, synchronous and async, then point to point, on tensors of `dtype`."""
    name = str(dtype).removeprefix("torch.")
    first = lambda args: args[0]  # noqa: E731
    # Uneven: rank r sends r + k + 1 elements to rank k (and none to itself on rank 0).
    send = [RANK + k + 1 if (RANK, k) != (0, 0) else 0 for k in range(WORLD)]
    recv = [k + RANK + 1 if (k, RANK) != (0, 0) else 0 for k in range(WORLD)]
    root = WORLD - 1
    for a in (False, True):
        for n in RING_SIZES + (7, 0):  # the ring's size, odd, and empty
            for op in OPS:
                c.check(
                    f"all_reduce {op} {name} [{n}]",
                    lambda t, op=op, **k: dist.all_reduce(t, op=op, **k),
                    lambda n=n, salt=salt: [values((n,), dtype, salt)],
                    first,
                    a,
                    ON_CARDS_TOLERANCE,
                )
        c.check(
            f"all_reduce of a transposed view {name}",
            dist.all_reduce,
            lambda salt=salt: [values((3, 5), dtype, salt).t()],
            first,
            a,
        )
        for shape in ((5, 3), *((n,) for n in RING_SIZES)):
            c.check(
                f"broadcast from 1 {name} {shape}",
                lambda t, **k: dist.broadcast(t, src=1, **k),
                lambda shape=shape, salt=salt: [values(shape, dtype, salt)],
                first,
                a,
            )
        for n in (6, *RING_SIZES):
            for op in OPS:
                # Only the root's tensor is defined afterwards (Gloo leaves partial sums elsewhere).
                c.check(
                    f"reduce {op} to {root} {name} [{n}]",
                    lambda t, op=op, **k: dist.reduce(t, dst=root, op=op, **k),
                    lambda n=n, salt=salt: [values((n,), dtype, salt)],
                    lambda args: args[0] if RANK == root else torch.zeros(0),
                    a,
                    ON_CARDS_TOLERANCE,
                )
        for n in (4, 0, *(m // 3 for m in RING_SIZES)):
            c.check(
                f"all_gather [{n}] {name}",
                dist.all_gather,
                lambda n=n, salt=salt: [
                    [torch.zeros(n, dtype=dtype) for _ in range(WORLD)],
                    values((n,), dtype, salt),
                ],
                first,
                a,
            )
            c.check(
                f"all_gather_single [{n}] {name}",
                ALL_GATHER_SINGLE,
                lambda n=n, salt=salt: [torch.zeros(WORLD * n, dtype=dtype), values((n,), dtype, salt)],
                first,
                a,
            )
            c.check(
                f"reduce_scatter [{n}] {name}",
                dist.reduce_scatter,
                lambda n=n, salt=salt: [
                    torch.zeros(n, dtype=dtype),
                    [values((n,), dtype, salt + k) for k in range(WORLD)],
                ],
                first,
                a,
                ON_CARDS_TOLERANCE,
            )
            c.check(
                f"reduce_scatter_single [{n}] {name}",
                REDUCE_SCATTER_SINGLE,
                lambda n=n, salt=salt: [torch.zeros(n, dtype=dtype), values((WORLD * n,), dtype, salt)],
                first,
                a,
                ON_CARDS_TOLERANCE,
            )
        c.check(
            f"coalesced all_reduce {name}",
            coalesced("all_reduce"),
            lambda salt=salt: [values((5,), dtype, salt), values((3, 4), dtype, salt + 1)],
            lambda args: args,
            a,
            ON_CARDS_TOLERANCE,
        )
        c.check(
            f"coalesced all_gather_single {name}",
            coalesced("all_gather_single"),
            lambda salt=salt: [
                torch.zeros(WORLD * 5, dtype=dtype),
                values((5,), dtype, salt),
                torch.zeros(WORLD * 2, dtype=dtype),
                values((2,), dtype, salt + 1),
            ],
            lambda args: args[0::2],
            a,
        )
        c.check(
            f"coalesced reduce_scatter_single {name}",
            coalesced("reduce_scatter_single"),
            lambda salt=salt: [
                torch.zeros(5, dtype=dtype),
                values((WORLD * 5,), dtype, salt),
                torch.zeros(2, dtype=dtype),
                values((WORLD * 2,), dtype, salt + 1),
            ],
            lambda args: args[0::2],
            a,
            ON_CARDS_TOLERANCE,
        )
        c.check(
            f"all_to_all_single, uneven {name}",
            lambda o, i, **k: dist.all_to_all_single(o, i, output_split_sizes=recv, input_split_sizes=send, **k),
            lambda salt=salt: [torch.zeros(sum(recv), dtype=dtype), values((sum(send),), dtype, salt)],
            first,
            a,
        )
        c.check(
            f"all_to_all, uneven {name}",
            all_to_all,
            lambda salt=salt: [
                [torch.zeros(m, dtype=dtype) for m in recv],
                [values((m,), dtype, salt + k) for k, m in enumerate(send)],
            ],
            first,
            a,
        )
        c.check(
            f"gather to {root} {name}",
            lambda i, o, **k: dist.gather(i, o if RANK == root else None, dst=root, **k),
            lambda salt=salt: [values((3,), dtype, salt), [torch.zeros(3, dtype=dtype) for _ in range(WORLD)]],
            lambda args: args[1] if RANK == root else args[0],
            a,
        )
        c.check(
            f"scatter from 0 {name}",
            lambda o, i, **k: dist.scatter(o, i if RANK == 0 else None, src=0, **k),
            lambda salt=salt: [torch.zeros(4, dtype=dtype), [values((4,), dtype, salt + k) for k in range(WORLD)]],
            first,
            a,
        )
        # Where Gloo refuses, so must spyre: gathered tensors of the wrong size.
        c.check(
            f"all_gather into tensors of the wrong size {name}",
            dist.all_gather,
            lambda salt=salt: [[torch.zeros(3, dtype=dtype) for _ in range(WORLD)], values((4,), dtype, salt)],
            first,
            a,
        )
    # Point to point around the ring, blocking and not.
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    for mode in ("blocking", "from any rank", "batched"):
        for device in ("cpu", "spyre"):
            c.count += 1
            x = values((9,), dtype, salt).to(device)
            r = torch.zeros(9, dtype=dtype, device=device)
            if mode != "batched":  # even ranks send first, so that the ring cannot deadlock
                got = prv
                if RANK % 2 == 0:
                    dist.send(x, nxt)
                    got = dist.recv(r, prv if mode == "blocking" else None)
                else:
                    got = dist.recv(r, prv if mode == "blocking" else None)
                    dist.send(x, nxt)
                if got != prv:
                    c.failures.append(f"recv {mode} on {device} {name}: from {got}, not {prv}")
            else:
                for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.irecv, r, prv)]):
                    w.wait()
            expect = torch.Generator().manual_seed(1000 * salt + prv)
            want = (
                torch.randint(-4, 5, (9,), generator=expect, dtype=dtype)
                if dtype == torch.int64
                else (torch.randn((9,), generator=expect) * 2).to(dtype)
            )
            if not torch.equal(r.cpu(), want):
                c.failures.append(f"send/recv {mode} on {device} {name}: got {r.cpu()}")


def main(out: pathlib.Path) -> None:
    # The reference's CPU tensors go to Gloo either way: directly, or through the spyre backend.
    if ON_CARDS:  # each rank its own card of the server, as torchrun's LOCAL_RANK names it
        torch.spyre.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(os.environ.get("CHECKS_BACKEND", "cpu:gloo,spyre:spyre"))
    torch_spyre.set_cpu_fallback("error")  # every op of the checks runs on the card
    c = Checks()
    for salt, dtype in enumerate(DTYPES):
        check_dtype(c, dtype, salt)
    # An async all_reduce's future holds the spyre output, and barrier() orders the ranks.
    c.count += 1
    t = torch.full((5,), float(RANK + 1), device="spyre")
    fut = dist.all_reduce(t, async_op=True).get_future()
    got = fut.wait()
    if not (isinstance(got, list) and got[0].device.type == "spyre" and torch.equal(got[0].cpu(), t.cpu())):
        c.failures.append(f"the future of an async all_reduce holds {got}")
    if not torch.equal(t.cpu(), torch.full((5,), float(WORLD * (WORLD + 1) // 2))):
        c.failures.append(f"async all_reduce through its future gave {t.cpu()}")
    dist.barrier()
    report = {"checks": c.count, "failures": c.failures, "on_cards": torch_spyre.distributed.device_collectives()}
    (out / f"rank{RANK}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main(pathlib.Path(sys.argv[1]))
    except Exception:
        traceback.print_exc()
        sys.exit(1)
