"""Collectives among the cards of one server, run by the cards themselves: the bytes cross the
server's PCIe switch by peer-to-peer DMA, and the reductions run on the receiving card's cores.
One process drives every card, as with ``torch.cuda.nccl``: each call takes one tensor per card.

    import torch_spyre.comm as comm
    xs = [torch.randn(n, device=f"spyre:{i}") for i in range(4)]
    comm.all_reduce(xs)          # in place: every xs[i] holds the sum

The call returns once the work is queued. Each card's current stream waits for it before what
comes next on that stream, as if the collective had run there; the host waits only when it reads
a result. Two algorithms (``algorithm=``, or chosen by size):

- ``"ring"``: reduce-scatter, then all-gather, around the ring 0 -> 1 -> ... -> N-1 -> 0. Each
  card's buffer is cut in N chunks and each chunk in slices, which pipeline: one slice crosses
  the switch while the one before it is added. Every card sends and receives 2(N-1)/N of the
  buffer, the least any all-reduce can (bandwidth-optimal), in 2(N-1) steps.
- ``"tree"``: reduce up a binary tree to card 0, then broadcast down it: 2 ceil(log2 N) steps of
  the whole buffer. Fewer steps than the ring, for small tensors, whose time is latency.

The timings these take are modelled (docs/architect-guide.md, "Several cards");
``benchmarks/collectives.py`` prints the bus bandwidth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from . import _C

# Below this many bytes the tree's fewer steps beat the ring's smaller messages
# (benchmarks/collectives.py measures the crossover on the default config).
TREE_BELOW_BYTES = 512 * 1024
# A ring chunk is cut in one slice per this many bytes (1 to 8 slices): each slice pays a copy's and
# a kernel's fixed costs.
SLICE_BYTES = 1 << 20

_REDUCE: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "sum": lambda acc, x: acc.add_(x),
    "avg": lambda acc, x: acc.add_(x),  # divided by N once, by the card that completes the sum
    "product": lambda acc, x: acc.mul_(x),
    "max": lambda acc, x: torch.maximum(acc, x, out=acc),
    "min": lambda acc, x: torch.minimum(acc, x, out=acc),
}

# Each card's two streams for collectives: what it sends, and what it adds (a wait for an arriving
# slice must not hold up the sends queued behind it).
_streams: dict[int, tuple[torch.Stream, torch.Stream]] = {}


def _card_streams(index: int) -> tuple[torch.Stream, torch.Stream]:
    if index not in _streams:
        device = torch.device("spyre", index)
        _streams[index] = (torch.Stream(device=device), torch.Stream(device=device))
    return _streams[index]


def _check(tensors: Sequence[torch.Tensor], op: str) -> list[int]:
    if op not in _REDUCE:
        raise ValueError(f"torch_spyre.comm: op must be one of {sorted(_REDUCE)}, not {op!r}")
    if len(tensors) < 1:
        raise ValueError("torch_spyre.comm: needs one tensor per card, got none")
    first = tensors[0]
    cards = []
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type != "spyre":
            raise TypeError(f"torch_spyre.comm: every tensor must be on a spyre device, not {getattr(t, 'device', t)}")
        if t.dtype != first.dtype or t.shape != first.shape:
            raise ValueError(
                f"torch_spyre.comm: every tensor must have one dtype and shape: {first.dtype} {tuple(first.shape)} "
                f"and {t.dtype} {tuple(t.shape)}"
            )
        if not t.is_contiguous():
            raise ValueError("torch_spyre.comm: the tensors must be contiguous")
        cards.append(t.device.index)
    if len(set(cards)) != len(cards):
        raise ValueError(f"torch_spyre.comm: one tensor per card; cards {cards} repeat")
    if op == "avg" and not first.is_floating_point():
        raise ValueError(f"torch_spyre.comm: op 'avg' needs a floating-point dtype, not {first.dtype}")
    return cards


class _Schedule:
    """Queues the work of one collective on the cards' collective streams, in dependency order,
    and ties the cards' current streams to it at both ends."""

    def __init__(self, cards: list[int], name: str):
        self.cards = cards
        self.name = name  # what the copies are called in the device trace: "all_reduce ring", ...
        self.current = [torch.accelerator.current_stream(torch.device("spyre", c)) for c in cards]
        self.send = [_card_streams(c)[0] for c in cards]
        self.add = [_card_streams(c)[1] for c in cards]
        self.start = [self._record(s) for s in self.current]
        self.reached: set[tuple[int, int]] = set()  # (sender, receiver): the receiver's start awaited
        # (sender, receiver) -> the sender's last copy into the receiver's result; the send stream is
        # in order, so the receiver's current stream waits for that one alone (finish).
        self.landed: dict[tuple[int, int], torch.Event] = {}
        for i, ev in enumerate(self.start):  # what the caller queued before comes first
            self.send[i].wait_event(ev)
            self.add[i].wait_event(ev)

    @staticmethod
    def _record(stream: torch.Stream) -> torch.Event:
        ev = torch.Event(device=stream.device)
        ev.record(stream)
        return ev

    def copy(
        self,
        i: int,
        j: int,
        dst: torch.Tensor,
        src: torch.Tensor,
        after: Sequence[torch.Event | None],
        result: bool = False,
        what: str = "",
    ) -> torch.Event:
        """Card i's DMA copies src (its own) into dst (card j's), once `after` are reached;
        `result`: dst is the caller's tensor (not staging, which a reduction on its card reads);
        `what`: the step, for the copy's name in the device trace."""
        stream = self.send[i]
        # The copy lands in the receiver's memory: staging the allocator may just have freed there,
        # or a buffer that work the caller queued there still reads. It waits for that work too.
        if (i, j) not in self.reached:
            self.reached.add((i, j))
            stream.wait_event(self.start[j])
        for ev in after:
            if ev is not None:
                stream.wait_event(ev)
        with stream:
            _C._peer_copy_async(dst, src, f"{self.name} {what} -> spyre:{self.cards[j]}")
        ev = self._record(stream)
        if result:
            self.landed[i, j] = ev
        return ev

    def reduce(self, i: int, fn: Callable, acc: torch.Tensor, x: torch.Tensor, after: torch.Event) -> torch.Event:
        stream = self.add[i]
        stream.wait_event(after)
        with stream:
            fn(acc, x)
        return self._record(stream)

    def local_copy(
        self, i: int, kind: int, dst: torch.Tensor, src: torch.Tensor, after: torch.Event | None
    ) -> torch.Event:
        """Card i copies src into dst, both its own, on its send (kind 0) or add (1) stream."""
        stream = (self.send, self.add)[kind][i]
        if after is not None:
            stream.wait_event(after)
        with stream:
            dst.copy_(src)
        return self._record(stream)

    def scale(self, i: int, t: torch.Tensor, by: float, after: torch.Event | None) -> torch.Event:
        stream = self.add[i]
        if after is not None:
            stream.wait_event(after)
        with stream:
            t.div_(by)
        return self._record(stream)

    def finish(self) -> None:
        """Each card's current stream waits for its own collective streams and for the copies
        that landed in its result (those into staging, its reductions waited for). The staging was
        allocated on the current streams, so it is not reused before the collective is done with it."""
        for i, cur in enumerate(self.current):
            cur.wait_event(self._record(self.send[i]))
            cur.wait_event(self._record(self.add[i]))
        for (_, j), ev in self.landed.items():
            self.current[j].wait_event(ev)


def _ring_longest(count: int, n: int, slices: int) -> int:
    """The most elements of one slice of a ring chunk."""
    return max(-(-(count * (c + 1) // n - count * c // n) // slices) for c in range(n))


def staging_numel(algorithm: str, count: int, n: int, slices: int) -> int:
    """Elements of the staging buffer each card needs for one reduction of `count` elements
    (all_reduce's, or reduce_scatter's of its whole input)."""
    # The ring: one step's slices arriving while the last's are added.
    return 2 * slices * _ring_longest(count, n, slices) if algorithm == "ring" else count


def _pieces(count: int, n: int, slices: int) -> Callable:
    """piece(buf, c, k): slice k of chunk c when `count` elements are cut in n chunks of `slices`."""
    bounds = [count * c // n for c in range(n + 1)]

    def piece(buf, c: int, k: int):
        lo, hi = bounds[c], bounds[c + 1]
        return buf[lo + -(-(hi - lo) * k // slices) : lo + -(-(hi - lo) * (k + 1) // slices)]

    return piece


# The ring phases. A buffer of another process's card is a _Remote (_group_comm.py): only sliced
# and measured. Card i "owns" chunk own(i) = i + shift: the chunk it holds complete after the
# reduce-scatter, and passes first in the all-gather.


def _reduce_scatter_phase(sched, bufs: list, staging: list, fn: Callable, slices: int, shift: int, first=None) -> dict:
    """Ring reduce-scatter in place in `bufs` through `staging` (staging_numel each): at step s
    card i sends chunk (own(i) - 1 - s) to card i + 1, which reduces it into its own; after n - 1
    steps card i's chunk own(i) holds the reduction over every card. `first[i]`: what card i's
    first sends wait for. Returns {(card, slice): the last reduction into its owned chunk}."""
    n = len(bufs)
    count = bufs[0].numel()
    piece = _pieces(count, n, slices)
    longest = _ring_longest(count, n, slices)
    slots = 2 * slices
    added: dict = {}  # (card, step, slice) -> its reduction done
    slot_free: dict = {}  # (card, slot) -> the reduction that read it
    use = 0
    for s in range(n - 1):
        for k in range(slices):
            slot = use % slots
            use += 1
            landed = []  # (receiver, its chunk's slice, where the sender's slice landed, the copy's event)
            for i in range(n):
                j = (i + 1) % n
                c = (i + shift - 1 - s) % n
                src = piece(bufs[i], c, k)
                if src.numel() == 0:
                    continue
                land = staging[j][slot * longest : slot * longest + src.numel()]
                before = added.get((i, s - 1, k)) if s else (first[i] if first else None)
                step = f"reduce-scatter {s + 1}/{n - 1}"
                ev = sched.copy(i, j, land, src, [before, slot_free.get((j, slot))], what=step)
                landed.append((j, piece(bufs[j], c, k), land, ev))
            for j, acc, land, ev in landed:
                added[j, s, k] = slot_free[j, slot] = sched.reduce(j, fn, acc, land, ev)
    return {(i, k): added.get((i, n - 2, k)) for i in range(n) for k in range(slices)}


def _scale_owned(sched, bufs: list, slices: int, shift: int, done: dict) -> None:
    """avg: each card divides its owned chunk by n once it is complete (updates `done`)."""
    n = len(bufs)
    piece = _pieces(bufs[0].numel(), n, slices)
    for i in range(n):
        for k in range(slices):
            owned = piece(bufs[i], (i + shift) % n, k)
            if owned.numel():
                done[i, k] = sched.scale(i, owned, n, done.get((i, k)))


def _all_gather_phase(sched, bufs: list, slices: int, shift: int, ready: dict) -> None:
    """Ring all-gather in place in `bufs`: at step s card i passes chunk (own(i) - s), complete,
    to card i + 1; `ready[(i, k)]`: what card i's owned slice k waits for before it leaves."""
    n = len(bufs)
    piece = _pieces(bufs[0].numel(), n, slices)
    got: dict = {}  # (card, step, slice) -> its chunk arrived
    for s in range(n - 1):
        for k in range(slices):
            for i in range(n):
                j = (i + 1) % n
                c = (i + shift - s) % n
                src = piece(bufs[i], c, k)
                if src.numel() == 0:
                    continue
                before = ready.get((i, k)) if s == 0 else got.get((i, s - 1, k))
                step = f"all-gather {s + 1}/{n - 1}"
                got[j, s, k] = sched.copy(i, j, piece(bufs[j], c, k), src, [before], result=True, what=step)


def _ring(sched, bufs: list, staging: list, fn: Callable, avg: bool, slices: int) -> None:
    """Queues a ring all-reduce of `bufs` (one per card, 1-D): reduce-scatter, then all-gather."""
    done = _reduce_scatter_phase(sched, bufs, staging, fn, slices, 1)
    if avg:
        _scale_owned(sched, bufs, slices, 1, done)
    _all_gather_phase(sched, bufs, slices, 1, done)
    sched.finish()


def _tree(sched, bufs: list, staging: list, fn: Callable, avg: bool) -> None:
    """Queues a tree all-reduce of `bufs` through `staging` (as _ring)."""
    n = len(bufs)
    done: list = [None] * n  # each card's last reduction or arrival
    span = 1
    while span < n:  # reduce: card i takes card i + span's partial sum
        for i in range(0, n - span, 2 * span):
            arrived = sched.copy(i + span, i, staging[i], bufs[i + span], [done[i + span], done[i]], what="reduce")
            done[i] = sched.reduce(i, fn, bufs[i], staging[i], arrived)
        span *= 2
    if avg:
        done[0] = sched.scale(0, bufs[0], n, done[0])
    _tree_broadcast(sched, bufs, 0, done)
    sched.finish()


def _tree_broadcast(sched, bufs: list, root: int, done: list) -> None:
    """Root's buffer down a binary tree rooted at `root`: ceil(log2 n) steps of the whole buffer,
    for small ones. `done[v]`: card (root + v)'s last work on its buffer."""
    n = len(bufs)
    span = 1
    while span < n:
        span *= 2
    while span > 1:  # card v gives the result to card v + span / 2 (v counted from the root)
        span //= 2
        for v in range(0, n - span, 2 * span):
            a, b = (root + v) % n, (root + v + span) % n
            done[v + span] = sched.copy(
                a, b, bufs[b], bufs[a], [done[v], done[v + span]], result=True, what="broadcast"
            )


def _chain_broadcast(sched, bufs: list, root: int, slices: int) -> None:
    """Root's buffer along the ring root -> root + 1 -> ..., in slices that pipeline: every card's
    link carries the buffer once, for large ones."""
    n = len(bufs)
    piece = _pieces(bufs[0].numel(), 1, slices)
    for k in range(slices):
        arrived = None
        for h in range(n - 1):
            a, b = (root + h) % n, (root + h + 1) % n
            src = piece(bufs[a], 0, k)
            if src.numel():
                arrived = sched.copy(
                    a, b, piece(bufs[b], 0, k), src, [arrived], result=True, what=f"hop {h + 1}/{n - 1}"
                )


def plan(nbytes: int, cards: int, algorithm: str | None = None, slices: int | None = None) -> tuple[str, int]:
    """The algorithm and slices of a collective moving `nbytes` per card over `cards` cards,
    where the caller left them to be chosen (None)."""
    if algorithm is None:
        algorithm = "tree" if nbytes < TREE_BELOW_BYTES else "ring"
    if slices is None:
        slices = min(8, max(1, nbytes // cards // SLICE_BYTES))
    return algorithm, slices


def run(sched, algorithm: str, bufs: list, staging: list, op: str, slices: int) -> None:
    """Queues an all-reduce on `sched`; the caller holds no_grad."""
    if algorithm == "ring":
        _ring(sched, bufs, staging, _REDUCE[op], op == "avg", slices)
    else:
        _tree(sched, bufs, staging, _REDUCE[op], op == "avg")


def run_broadcast(sched, algorithm: str, bufs: list, root: int, slices: int) -> None:
    """Queues a broadcast of card `root`'s buffer into every other's on `sched`."""
    if algorithm == "ring":
        _chain_broadcast(sched, bufs, root, slices)
    else:
        _tree_broadcast(sched, bufs, root, [None] * len(bufs))
    sched.finish()


def run_all_gather(sched, outs: list, ins: list, slices: int) -> None:
    """Queues an all-gather on `sched`: card i's input lands in chunk i of every card's output
    (flat, n times the input). Card i first copies its own input into its chunk, on its send
    stream, which then passes it on."""
    for i, (out, x) in enumerate(zip(outs, ins, strict=True)):
        sched.local_copy(i, 0, _pieces(out.numel(), len(outs), 1)(out, i, 0), x, None)
    _all_gather_phase(sched, outs, slices, 0, {})
    sched.finish()


def run_reduce_scatter(sched, outs: list, ins: list, scratch: list, staging: list, op: str, slices: int) -> None:
    """Queues a reduce-scatter on `sched`: chunk i of the reduction of every card's input (flat,
    n times the output) lands in card i's output. The inputs stay as they are: each card reduces
    in `scratch` (a copy of its input), through `staging` (staging_numel("ring", ...))."""
    n = len(ins)
    first = [sched.local_copy(i, 1, scratch[i], ins[i], None) for i in range(n)]
    done = _reduce_scatter_phase(sched, scratch, staging, _REDUCE[op], slices, 0, first)
    if op == "avg":
        _scale_owned(sched, scratch, slices, 0, done)
    piece = _pieces(scratch[0].numel(), n, 1)
    for i in range(n):  # after its reductions: on the same stream
        sched.local_copy(i, 1, outs[i], piece(scratch[i], i, 0), None)
    sched.finish()


def run_exchange(sched, n: int, dst_of: Callable, src_of: Callable, fold: dict | None = None) -> None:
    """Queues direct copies on `sched`, each across the switch in one hop: card i's `src_of(i, j)`
    into card j's `dst_of(i, j)` (None, or empty: nothing moves from i to j). This is gather,
    scatter, all_to_all and the list forms of all_gather: every card's link carries only its own
    parts. `fold` ({j: (op, acc)}): card j then reduces what landed from each other card, in card
    order, into `acc` (reduce, the list form of reduce_scatter), after its own part (the (j, j)
    copy, if any), and avg divides once at the end."""
    fold = fold or {}
    landed: dict = {}
    for i in range(n):
        for j in range(n):
            dst = dst_of(i, j)
            if dst is None or dst.numel() == 0:
                continue
            if i == j:  # a card's own part: on the stream its reductions run on, before them
                landed[i, j] = sched.local_copy(i, 1 if j in fold else 0, dst, src_of(i, j), None)
            else:
                landed[i, j] = sched.copy(i, j, dst, src_of(i, j), [None], result=j not in fold, what="direct")
    for j, (op, acc) in fold.items():
        last = None
        for i in range(n):
            if i != j and (i, j) in landed:
                last = sched.reduce(j, _REDUCE[op], acc, dst_of(i, j), landed[i, j])
        if op == "avg":
            sched.scale(j, acc, n, last)
    sched.finish()


def all_reduce(
    tensors: Sequence[torch.Tensor], op: str = "sum", algorithm: str | None = None, slices: int | None = None
) -> None:
    """Reduces ``tensors`` (one per card, same dtype and shape, contiguous) elementwise with ``op``
    (``"sum"``, ``"avg"``, ``"product"``, ``"max"``, ``"min"``) and writes the result into each.
    ``algorithm``: ``"ring"``, ``"tree"`` or None (tree below ``TREE_BELOW_BYTES``, ring above);
    ``slices``: how many pieces each ring chunk is cut into for pipelining (None: one per
    ``SLICE_BYTES`` of a chunk, from 1 to 8)."""
    cards = _check(tensors, op)
    _check_plan(algorithm, slices)
    bufs = [t.view(-1) for t in tensors]
    if len(bufs) == 1 or bufs[0].numel() == 0:
        return
    algorithm, slices = plan(bufs[0].nbytes, len(bufs), algorithm, slices)
    with torch.no_grad():  # data movement, as NCCL's: no autograd graph, leaves that require grad included
        staging = [
            torch.empty(staging_numel(algorithm, b.numel(), len(bufs), slices), dtype=b.dtype, device=b.device)
            for b in bufs
        ]
        run(_Schedule(cards, f"all_reduce {algorithm}"), algorithm, bufs, staging, op, slices)


def broadcast(tensors: Sequence[torch.Tensor], root: int = 0, algorithm: str | None = None) -> None:
    """Copies ``tensors[root]`` into every other tensor (one per card, same dtype and shape,
    contiguous). ``algorithm``: ``"tree"`` (binary, from the root), ``"ring"`` (a chain from the
    root, pipelined in slices) or None (tree below ``TREE_BELOW_BYTES``)."""
    cards = _check(tensors, "sum")
    _check_plan(algorithm, None)
    if not isinstance(root, int) or not 0 <= root < len(tensors):
        raise ValueError(f"torch_spyre.comm: root must index the tensors (0 .. {len(tensors) - 1}), not {root!r}")
    bufs = [t.view(-1) for t in tensors]
    if len(bufs) == 1 or bufs[0].numel() == 0:
        return
    algorithm, slices = plan(bufs[0].nbytes, 1, algorithm)
    with torch.no_grad():
        name = f"broadcast {'chain' if algorithm == 'ring' else 'tree'}"
        run_broadcast(_Schedule(cards, name), algorithm, bufs, root, slices)


def all_gather(outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> None:
    """Gathers ``inputs`` (one per card) into every card's output: ``outputs[i]`` (on the card of
    ``inputs[i]``, contiguous, n times as many elements) holds input j at elements [j m, (j + 1) m),
    as ``torch.distributed.all_gather_into_tensor``. A ring, pipelined in slices."""
    cards = _check(inputs, "sum")
    _check_outputs(outputs, inputs, len(inputs), "all_gather")
    outs, ins = [o.view(-1) for o in outputs], [t.view(-1) for t in inputs]
    if ins[0].numel() == 0:
        return
    _, slices = plan(outs[0].nbytes, len(outs))
    with torch.no_grad():
        run_all_gather(_Schedule(cards, "all_gather ring"), outs, ins, slices)


def reduce_scatter(outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor], op: str = "sum") -> None:
    """Reduces ``inputs`` (one per card, contiguous, n times the output's elements) elementwise
    with ``op`` and scatters the result: ``outputs[i]`` (on the card of ``inputs[i]``) holds its
    elements [i m, (i + 1) m), as ``torch.distributed.reduce_scatter_tensor``. A ring, pipelined
    in slices; the inputs are left as they were."""
    cards = _check(inputs, op)
    _check_outputs(inputs, outputs, len(inputs), "reduce_scatter")
    outs, ins = [o.view(-1) for o in outputs], [t.view(-1) for t in inputs]
    if outs[0].numel() == 0:
        return
    n = len(ins)
    _, slices = plan(ins[0].nbytes, n, "ring")
    with torch.no_grad():
        scratch = [torch.empty_like(x) for x in ins]
        staging = [
            torch.empty(staging_numel("ring", x.numel(), n, slices), dtype=x.dtype, device=x.device) for x in ins
        ]
        run_reduce_scatter(_Schedule(cards, "reduce_scatter ring"), outs, ins, scratch, staging, op, slices)


def _check_plan(algorithm: str | None, slices: int | None) -> None:
    if algorithm not in (None, "ring", "tree"):
        raise ValueError(f"torch_spyre.comm: algorithm must be 'ring', 'tree' or None, not {algorithm!r}")
    if slices is not None and (not isinstance(slices, int) or slices < 1):
        raise ValueError(f"torch_spyre.comm: slices must be a positive int, not {slices!r}")


def _check_outputs(big: Sequence[torch.Tensor], small: Sequence[torch.Tensor], n: int, what: str) -> None:
    """`big[i]` is on the card of `small[i]`, contiguous, of its dtype, with n times its elements."""
    if len(big) != len(small):
        raise ValueError(f"torch_spyre.comm: {what} needs as many outputs as inputs, not {len(big)} and {len(small)}")
    for b, t in zip(big, small, strict=True):
        if not isinstance(b, torch.Tensor) or b.device != t.device or b.dtype != t.dtype or not b.is_contiguous():
            raise ValueError(
                f"torch_spyre.comm: {what}'s tensors must be contiguous, of one dtype, pairwise on one card: "
                f"{getattr(b, 'device', b)} {getattr(b, 'dtype', '')} and {t.device} {t.dtype}"
            )
        if b.numel() != n * t.numel():
            raise ValueError(
                f"torch_spyre.comm: {what} over {n} cards needs {n} x {t.numel()} elements, not {b.numel()}"
            )


def ring_seconds(nbytes: int, cards: int, link_gbps: float) -> float:
    """The ring's analytical time for ``nbytes`` on ``cards`` cards whose links carry
    ``link_gbps`` GB/s of data each way: 2(N-1)/N of the buffer through each card's link."""
    return 2 * (cards - 1) / cards * nbytes / (link_gbps * 1e9) if cards > 1 else 0.0


def bus_bandwidth(nbytes: int, cards: int, seconds: float) -> float:
    """All-reduce bus bandwidth in GB/s as nccl-tests defines it: size / time * 2(N-1)/N."""
    return nbytes / seconds * 2 * (cards - 1) / cards / 1e9 if seconds > 0 else math.inf


__all__ = [
    "TREE_BELOW_BYTES",
    "all_gather",
    "all_reduce",
    "broadcast",
    "bus_bandwidth",
    "reduce_scatter",
    "ring_seconds",
]
