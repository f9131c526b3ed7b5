"""The collectives of torch.distributed's ``spyre`` backend run by
the cards, when the ranks' cards are cards of one simulated server: every rank drives its own card
through the same spyre-simd (``SPYRE_TRANSPORT=socket``). The bytes cross the server's switch by
peer-to-peer DMA and the receiving cards reduce them, with the ring, tree and direct exchanges of
``torch_spyre.comm``; anywhere else the backend's bytes go through Gloo
(``backend/csrc/process_group.cpp``).

How ranks in different processes reach each other's cards:

- Memory: each rank shares its whole window of its card with the daemon's other clients
  (``_C._ipc_export``, an unguessable handle, as ``cudaIpcGetMemHandle``) and maps the others'
  (``_C._ipc_open``) once, at the group's first collective.
- Order: the schedule is SPMD. Every rank builds the same schedule for every rank and queues only
  its own part; it counts what each rank's collective streams signal, so it knows the value each
  other rank's stream semaphore reaches after any step, and waits on the card for that value,
  reading the other card's semaphore across the switch (``_C._stream_wait_value``).
- Per call, one small all_gather through Gloo carries each rank's buffer and staging addresses and
  its streams' semaphore values; when a rank cannot take the device path (a tensor that is not
  contiguous, a dtype or op the cards do not reduce), every rank learns it there and the call
  goes through Gloo.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from . import _C, comm

# What the cards reduce here (test_comm and test_distributed check each against CPU torch).
_DTYPES = (torch.float32, torch.bfloat16, torch.int64)
_OPS = ("sum", "avg", "product", "max", "min")
# What the cards copy (broadcast, all_gather): any dtype of a fixed numbering, the same in every rank.
_ALL_DTYPES = (
    torch.float32,
    torch.bfloat16,
    torch.int64,
    torch.float16,
    torch.float64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)
_KINDS = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "reduce_scatter",
    "reduce",
    "all_gather_list",
    "reduce_scatter_list",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
)
_REDUCING = ("all_reduce", "reduce_scatter", "reduce", "reduce_scatter_list")
_ROOTED = ("broadcast", "reduce", "gather", "scatter")
# The direct exchanges: each part crosses the switch once, straight to its receiver (comm.run_exchange).
_DIRECT = _KINDS[4:]
_ROW = 12  # a call's row: 12 fields, then a direct exchange's sizes and addresses (3 per rank)

_calls = 0  # collectives the cards ran for this process (device_collectives())

# (rank, semaphore: 0 of the sending stream / 1 of the adding one, its nth signal in this call). On a
# card with few hardware queues per client the two streams may be one queue: then both count on 0.
_Token = tuple[int, int, int]


class _Remote:
    """A 1-D run of another rank's device memory: what a schedule slices and copies into."""

    def __init__(self, rank: int, addr: int, itemsize: int, numel: int):
        self.rank, self.addr, self.itemsize, self._numel = rank, addr, itemsize, numel

    def numel(self) -> int:
        return self._numel

    def __getitem__(self, s: slice) -> _Remote:
        lo, hi, _ = s.indices(self._numel)
        return _Remote(self.rank, self.addr + lo * self.itemsize, self.itemsize, max(0, hi - lo))


class _Peer:
    """Another rank's card as this card's DMA reaches it: its shared window and collective streams."""

    def __init__(self, window: tuple[int, int, int, int], sems: Sequence[int], bases: Sequence[int]):
        self.iova, self.card, self.base, self.bytes = window
        self.sems, self.bases = sems, bases  # its sending and adding streams' semaphores

    def iova_of(self, addr: int) -> int:
        return self.iova + (addr - self.base)


class _GroupSchedule:
    """comm._Schedule's interface for ranks in several processes: the same calls are made on every
    rank for every rank; each rank queues only the work of its own card."""

    def __init__(self, me: int, index: int, peers: list[_Peer | None], shared: list[bool], name: str):
        """`shared[r]`: rank r's two collective streams are one queue (one semaphore). begin() has
        run, and every rank's semaphore values were read after it."""
        self.me, self.index, self.peers, self.shared, self.name = me, index, peers, shared, name
        self.counts = [[0, 0] for _ in peers]
        self.local: dict[_Token, torch.Event] = {}
        self.current = torch.accelerator.current_stream(torch.device("spyre", index))
        self.streams = comm._card_streams(index)
        # A rank's send stream passing its start: its staging and buffer may be written.
        self.start = [self._signal(r, 0) for r in range(len(peers))]
        self.reached: set[tuple[int, int]] = set()
        self.landed: dict[tuple[int, int], _Token] = {}

    @staticmethod
    def begin(index: int) -> None:
        """The collective streams of this rank's card wait for what the caller queued before."""
        start = comm._Schedule._record(torch.accelerator.current_stream(torch.device("spyre", index)))
        for s in comm._card_streams(index):
            s.wait_event(start)

    def _signal(self, rank: int, kind: int) -> _Token:
        sem = 0 if self.shared[rank] else kind
        self.counts[rank][sem] += 1
        token = (rank, sem, self.counts[rank][sem])
        if rank == self.me:
            self.local[token] = comm._Schedule._record(self.streams[kind])
        return token

    def _wait(self, stream: torch.Stream, token: _Token | None) -> None:
        if token is None:
            return
        rank, sem, n = token
        if rank == self.me:
            stream.wait_event(self.local[token])
            return
        peer = self.peers[rank]
        _C._stream_wait_value(self.index, stream.stream_id, peer.iova_of(peer.sems[sem]), peer.bases[sem] + n)

    def copy(
        self, i: int, j: int, dst: _Remote, src, after: Sequence[_Token | None], result: bool = False, what: str = ""
    ) -> _Token:
        if i == self.me:
            stream = self.streams[0]
            if (i, j) not in self.reached:
                self._wait(stream, self.start[j])
            for token in after:
                self._wait(stream, token)
            with stream:
                label = f"{self.name} {what} -> spyre:{self.peers[j].card}"
                _C._copy_to_iova_async(self.peers[j].iova_of(dst.addr), src, label)
        self.reached.add((i, j))
        token = self._signal(i, 0)
        if result:
            self.landed[i, j] = token
        return token

    def reduce(self, j: int, fn, acc, x, after: _Token) -> _Token:
        if j == self.me:
            stream = self.streams[1]
            self._wait(stream, after)
            with stream:
                fn(acc, x)
        return self._signal(j, 1)

    def local_copy(self, i: int, kind: int, dst, src, after: _Token | None) -> _Token:
        if i == self.me:
            stream = self.streams[kind]
            self._wait(stream, after)
            with stream:
                dst.copy_(src)
        return self._signal(i, kind)

    def scale(self, i: int, t, by: float, after: _Token | None) -> _Token:
        if i == self.me:
            stream = self.streams[1]
            self._wait(stream, after)
            with stream:
                t.div_(by)
        return self._signal(i, 1)

    def finish(self) -> None:
        """This rank's current stream waits for its collective streams and for the copies other
        ranks landed in its result."""
        for r in range(len(self.peers)):
            for kind in (0, 1):
                token = self._signal(r, kind)
                if r == self.me:
                    self._wait(self.current, token)
        for (_, j), token in self.landed.items():
            if j == self.me:
                self._wait(self.current, token)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


class Group:
    """The device side of one spyre process group; `host` is its Gloo group."""

    def __init__(self, host: dist.ProcessGroup, rank: int, size: int):
        self.host, self.rank, self.size = host, rank, size
        self.index: int | None = None  # the card, once the group's cards were set up
        self.windows: list[tuple[int, int, int, int] | None] = []

    def ready(self) -> bool:
        """Whether the group's cards are set up for collectives (the same on every rank)."""
        return self.index is not None and self.index >= 0

    def _gather(self, row: list[int]) -> list[list[int]]:
        mine = torch.tensor([_signed(v) for v in row], dtype=torch.int64)
        out = [torch.empty_like(mine) for _ in range(self.size)]
        self.host.allgather([out], [mine]).wait()
        return [[v % (1 << 64) for v in t.tolist()] for t in out]

    def _setup(self, index: int | None) -> None:
        """Shares this rank's card window and opens every other rank's: the device path is on
        when every rank's card is another card of one daemon. Collective: every rank calls it,
        with its tensor's card (None: the tensor is not on a card; the setup waits for a call
        whose tensors all are)."""
        handle = 0
        if index is not None:
            try:
                handle = _C._ipc_export(index)
            except RuntimeError:  # cards this process simulates itself (in-process): nobody else's
                handle = 0
        rows = self._gather([handle, 0 if index is None else index + 1])
        if not all(c for _, c in rows):
            return
        ok = all(h != 0 for h, _ in rows) and len({c for _, c in rows}) == self.size
        windows: list[tuple[int, int, int, int] | None] = [None] * self.size
        if ok:
            try:
                for r, (h, _) in enumerate(rows):
                    if r != self.rank:
                        windows[r] = _C._ipc_open(index, h)
            except (RuntimeError, IndexError):  # another daemon's handle
                ok = False
        ok = all(v for (v,) in self._gather([int(ok)]))
        self.index, self.windows = (index, windows) if ok else (-1, [])

    def run(self, kind: str, tensors: list[torch.Tensor], op: str, root: int, splits=((), ())) -> bool:
        """Queues collective `kind` on the cards and returns True, or returns False (every rank
        alike) when the group's cards or this call cannot take the device path. The tensors, with
        c10d's meanings: ``"all_reduce"`` and ``"reduce"`` [tensor]; ``"broadcast"`` [tensor];
        ``"all_gather"`` [output, input]; ``"reduce_scatter"`` [output, input]; ``"all_gather_list"``
        outputs + [input]; ``"reduce_scatter_list"`` [output] + inputs; ``"gather"`` outputs (the
        root's; none elsewhere) + [input]; ``"scatter"`` [output] + inputs (the root's);
        ``"all_to_all"`` outputs + inputs; ``"all_to_all_single"`` [output, input] with `splits`
        (output and input split sizes, empty: even)."""
        on_cards = bool(tensors) and all(x.device.type == "spyre" for x in tensors)
        index = tensors[0].device.index if on_cards else None
        if self.index is None:
            self._setup(index)
        if self.index == -1:  # every rank knows: the group's cards are not of one server
            return False
        t = tensors[0]
        ok = index is not None and self.index == index and self._takes(kind, tensors, op, root)
        n = self.size
        parts = None  # a direct exchange's (what this rank sends to each, where each one's lands, acc)
        staging = None
        count, algorithm, slices = 0, "direct", 1
        if kind in _DIRECT:
            parts = self._parts(kind, tensors, root, splits) if ok else None
            ok = parts is not None
        else:
            # What moves: the tensor, or all_gather's input and reduce_scatter's output (per rank).
            count = tensors[-1].numel() if kind in ("all_gather", "reduce_scatter") else t.numel()
            if kind == "reduce_scatter":
                algorithm, slices = comm.plan(tensors[1].nbytes, n, "ring")
                staged = n * count
            else:
                algorithm, slices = comm.plan(t.nbytes, 1 if kind == "broadcast" else n)
                staged = count if kind == "all_reduce" else 0
            if ok and staged:
                staging = torch.empty(comm.staging_numel(algorithm, staged, n, slices), dtype=t.dtype, device=t.device)
        row = [int(ok), _KINDS.index(kind), count, _ALL_DTYPES.index(t.dtype) if ok else 0]
        row += [_OPS.index(op) if ok and kind in _REDUCING else 0, root if kind in _ROOTED else 0]
        if ok:
            _GroupSchedule.begin(index)  # before the semaphores are read: current may be one of them
            send, add = comm._card_streams(index)
            (s_sem, s_base), (a_sem, a_base) = (_C._stream_signal_state(index, s.stream_id) for s in (send, add))
            stag_addr = _C._device_address(staging) if staging is not None else 0
            row += [0 if parts else _C._device_address(t), stag_addr, s_sem, a_sem, s_base, a_base]
        else:
            row += [0] * 6
        # A direct exchange's sizes and addresses: elements to each rank, from each, and where they land.
        sends, lands, _ = parts or ([None] * n, [None] * n, None)
        numel = [x.numel() if x is not None else 0 for x in (*sends, *lands)]
        row += numel + [_C._device_address(x) if x is not None and x.numel() else 0 for x in lands]
        rows = self._gather(row)
        if not all(r[0] for r in rows) or len({tuple(r[1:6]) for r in rows}) != 1:
            return False
        if any(rows[i][_ROW + j] != rows[j][_ROW + n + i] for i in range(n) for j in range(n)):
            return False  # what one rank sends is not what the other expects: Gloo says why
        peers: list[_Peer | None] = [
            None if r == self.rank else _Peer(self.windows[r], rows[r][8:10], rows[r][10:12]) for r in range(n)
        ]
        itemsize = t.element_size()

        def each(mine, numel: int, where: int) -> list:
            """Every rank's buffer: this rank's `mine`, the others' at row[where] (0: never reached)."""
            return [mine if r == self.rank else _Remote(r, rows[r][where], itemsize, numel) for r in range(n)]

        shape = {"ring": "chain", "tree": "tree"}.get(algorithm, algorithm) if kind == "broadcast" else algorithm
        shared = [r[8] == r[9] for r in rows]
        sched = _GroupSchedule(self.rank, index, peers, shared, f"{kind} {shape}")
        with torch.no_grad():
            if parts is not None:
                self._exchange(sched, kind, rows, itemsize, parts, op, root)
            elif kind == "all_reduce":
                comm.run(sched, algorithm, each(t.view(-1), count, 6), each(staging, staging.numel(), 7), op, slices)
            elif kind == "broadcast":
                comm.run_broadcast(sched, algorithm, each(t.view(-1), count, 6), root, slices)
            elif kind == "all_gather":
                out, x = tensors
                comm.run_all_gather(sched, each(out.view(-1), n * count, 6), each(x.view(-1), count, 0), slices)
            else:
                out, x = tensors
                scratch = torch.empty_like(x).view(-1)
                outs, ins = each(out.view(-1), count, 0), each(x.view(-1), n * count, 0)
                stag = each(staging, staging.numel(), 7)
                comm.run_reduce_scatter(sched, outs, ins, each(scratch, x.numel(), 0), stag, op, slices)
        global _calls
        _calls += 1
        return True

    def _exchange(self, sched: _GroupSchedule, kind: str, rows: list, itemsize: int, parts, op: str, root: int):
        """Queues a direct exchange: each part crosses the switch once, from its rank's card into
        the place its receiver named in its row."""
        n, me = self.size, self.rank
        sends, lands, acc = parts

        def dst_of(i: int, j: int):
            if j == me:
                return lands[i]
            count = rows[j][_ROW + n + i]
            return _Remote(j, rows[j][_ROW + 2 * n + i], itemsize, count) if count else None

        def src_of(i: int, j: int):
            return sends[j] if i == me else None

        fold = None
        if kind == "reduce":
            fold = {root: (op, acc)}
        elif kind == "reduce_scatter_list":
            fold = {j: (op, acc if j == me else None) for j in range(n)}
        comm.run_exchange(sched, n, dst_of, src_of, fold)

    def _takes(self, kind: str, tensors: list[torch.Tensor], op: str, root: int) -> bool:
        """Whether this rank's side of the call can run on the cards (c10d's checks come after,
        through Gloo, for any that cannot)."""
        if not all(x.is_contiguous() and x.dtype == tensors[0].dtype for x in tensors):
            return False
        t = tensors[0]
        if kind in _REDUCING and (
            t.dtype not in _DTYPES or op not in _OPS or (op == "avg" and not t.is_floating_point())
        ):
            return False
        if t.dtype not in _ALL_DTYPES or (kind in _ROOTED and not 0 <= root < self.size):
            return False
        if kind in ("all_to_all", "all_to_all_single"):
            return True  # a part may be empty (uneven splits)
        if not all(x.numel() > 0 for x in tensors):
            return False
        if kind == "all_gather":
            return t.numel() == self.size * tensors[1].numel()
        if kind == "reduce_scatter":
            return tensors[1].numel() == self.size * t.numel()
        return True

    def _parts(self, kind: str, tensors: list[torch.Tensor], root: int, splits) -> tuple | None:
        """This rank's side of a direct exchange: (the 1-D part it sends to each rank, where each
        rank's part lands here, the tensor it reduces into), or None when c10d would refuse the
        call (Gloo then says why)."""
        n, me = self.size, self.rank
        sends: list = [None] * n
        lands: list = [None] * n
        acc = None

        def alike(xs, like) -> bool:
            return len(xs) == n and all(x.shape == like.shape for x in xs)

        def flat(x: torch.Tensor) -> torch.Tensor:
            return x.view(-1)

        def staging_for(x: torch.Tensor) -> list:
            staging = torch.empty(n * x.numel(), dtype=x.dtype, device=x.device)
            return [staging[i * x.numel() : (i + 1) * x.numel()] for i in range(n)]

        if kind == "reduce":
            (t,) = tensors
            if me == root:
                lands = [None if i == me else s for i, s in enumerate(staging_for(t))]
                acc = flat(t)
            else:
                sends[root] = flat(t)
        elif kind == "reduce_scatter_list":
            out, *ins = tensors
            if not alike(ins, out):
                return None
            sends = [flat(x) for x in ins]
            lands = [flat(out) if i == me else s for i, s in enumerate(staging_for(out))]
            acc = flat(out)
        elif kind == "all_gather_list":
            *outs, x = tensors
            if not alike(outs, x):
                return None
            sends, lands = [flat(x)] * n, [flat(o) for o in outs]
        elif kind == "gather":
            *outs, x = tensors
            if me == root:
                if not alike(outs, x):
                    return None
                lands = [flat(o) for o in outs]
            elif outs:
                return None
            sends[root] = flat(x)
        elif kind == "scatter":
            out, *ins = tensors
            if me == root:
                if not alike(ins, out):
                    return None
                sends = [flat(x) for x in ins]
            elif ins:
                return None
            lands[root] = flat(out)
        elif kind == "all_to_all":
            if len(tensors) != 2 * n:
                return None
            lands, sends = [flat(o) for o in tensors[:n]], [flat(x) for x in tensors[n:]]
        else:  # all_to_all_single: split along the first dimension
            out, x = tensors
            if out.dim() == 0 or x.dim() == 0 or out.shape[1:] != x.shape[1:]:
                return None
            lands, sends = _cut(out, list(splits[0]), n), _cut(x, list(splits[1]), n)
            if lands is None or sends is None:
                return None
        return sends, lands, acc


def _cut(t: torch.Tensor, split: list[int], n: int) -> list[torch.Tensor] | None:
    """`t` cut along its first dimension in `split` rows (empty: evenly in n), each part 1-D."""
    rows = t.shape[0]
    if not split:
        if rows % n:
            return None
        split = [rows // n] * n
    if len(split) != n or sum(split) != rows or min(split) < 0:
        return None
    row, at, parts = t[0].numel() if rows else 0, 0, []
    for m in split:
        parts.append(t.view(-1)[at * row : (at + m) * row])
        at += m
    return parts


def calls() -> int:
    return _calls
