"""The planner's memory planning and the segment's JSON: the values a segment makes for use
elsewhere in one out block, the values made and used only inside it and the ops' temporaries in
one arena placed by lifetime (first fit), and the segment's views and calls as the op library
reads them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import torch

from .nodes import _DTYPES, _constant_of, _num, _val, library_name

if TYPE_CHECKING:
    from .lower import Plan, Planner, Segment

_ALIGN = 64  # bytes between arena values (the op library's temporaries start at such offsets too)


class MemoryPlanning:
    """The planner's last pass, a base of lower.Planner: each segment's memory and JSON."""

    # -- memory planning and the segment's JSON

    def _lay_out(self, plan: Plan):
        for kind, s in plan.steps:
            if kind == "segment":
                self._emit(s)

    def _emit(self, s: Segment):
        reads, escapes = s.inputs, s.outputs
        slots: dict = {}
        for r in reads:
            slots[r] = len(slots)
        s.inputs = [(slots[r], r) for r in reads]
        # Values used elsewhere go in one block (one launch argument); each becomes a tensor of its
        # own over its part of the block when the segment runs.
        at = 0
        if escapes:
            s.out_slot = len(slots)
        for n in escapes:
            v = _val(n)
            s.out_offsets[n] = at
            nbytes = _extent(v) * _DTYPES[v.dtype][1]
            s.out_parts.append((at, nbytes, tuple(v.shape), tuple(v.stride()), v.dtype))
            at += (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        s.out_bytes = max(at, _ALIGN) if escapes else 0
        # The arena: values made and used only here, and the ops' temporaries, placed by lifetime
        # (first fit).
        local = [v for n in s.nodes for v in self.produces(n) if v not in slots and v not in s.out_offsets]
        pos = {v: i for i, n in enumerate(s.nodes) for v in [n, *self.produces(n)]}
        last = {}
        for i, n in enumerate(s.nodes):
            for r in self._mem_reads(n):
                last[r] = i
        placed: list = []  # (start, end, first, last)
        temps = {(n, what): nbytes for n in s.nodes for what, nbytes in self.temps(n)}
        for n in local + list(temps):
            if isinstance(n, tuple):
                pos[n] = pos[n[0]]
                size = temps[n]
            else:
                v = _val(n)
                size = _extent(v) * _DTYPES[v.dtype][1]
            size = (size + _ALIGN - 1) // _ALIGN * _ALIGN
            born, dies = pos[n], last.get(n, pos[n])
            off = 0
            for start, end, b, d in sorted(placed):
                if d < born or b > dies:  # lifetimes apart: may share
                    continue
                if off + size <= start:
                    break
                off = max(off, end)
            placed.append((off, off + size, born, dies))
            s.arena[n] = off
        if placed:
            s.arena_slot = len(slots) + (1 if escapes else 0)
            s.arena_bytes = max(_ALIGN, max(end for _, end, _, _ in placed))
        num_args = len(slots) + (1 if escapes else 0) + (1 if placed else 0)
        b = _Builder(self, s, slots)
        nodes = []
        for n in s.nodes:
            if self.kind[n] == "empty":
                continue
            node = b.call(n)
            if n in self.epilogue:
                e = self.epilogue[n]
                if e.activation is not None:
                    node["args"]["activation"] = e.activation
                if e.residual is not None:  # read as the product's [.., M, N] (both are contiguous)
                    sizes = list(_val(n).shape)
                    strides = [int(x) for x in torch.empty(sizes, device="meta").stride()]
                    node["args"]["residual"] = {"view": b.view(e.residual, sizes, strides)}
                    node["args"]["residual_fn"] = e.residual_fn
            if (n, "temp") in s.arena:
                node["temp"] = {"arg": s.arena_slot, "offset": s.arena[(n, "temp")], "bytes": temps[(n, "temp")]}
            nodes.append(node)
        s.spec = json.dumps({"num_args": num_args, "views": b.views, "nodes": nodes}, separators=(",", ":"))
        s.fused = {
            n: sorted(self._inlined(n) + (self.epilogue[n].nodes if n in self.epilogue else []), key=self.order.get)
            for n in s.nodes
        }
        kinds = {}
        for n in s.nodes:
            kinds[self.kind[n]] = kinds.get(self.kind[n], 0) + 1
        s.label = f"{self.name}/s{s.index} " + "+".join(f"{c}{k}" for k, c in sorted(kinds.items()))


def _extent(v: torch.Tensor) -> int:
    """Elements from a tensor's first element to one past its last."""
    if v.numel() == 0:
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(v.shape, v.stride(), strict=True))


class _Builder:
    """A segment's views (where each value lives: an argument slot, the out block or the arena) and
    its nodes as the op library's calls (the JSON the compiler reads)."""

    def __init__(self, p: Planner, s: Segment, slots: dict):
        self.p, self.s, self.slots = p, s, slots
        self.views: list = []
        self._view_index: dict = {}

    def view(self, n, sizes=None, strides=None) -> int:
        """The view of node n's value (sizes and strides overridable, e.g. for a broadcast)."""
        v = _val(n)
        mem = self.p._mem(n)
        base = _val(mem)
        dtype, width = _DTYPES[v.dtype]
        if mem in self.slots:
            arg, offset = self.slots[mem], v.storage_offset() - base.storage_offset()
        elif mem in self.s.out_offsets:
            arg = self.s.out_slot
            offset = v.storage_offset() - base.storage_offset() + self.s.out_offsets[mem] // width
        else:
            arg = self.s.arena_slot
            offset = v.storage_offset() - base.storage_offset() + self.s.arena[mem] // width
        sizes = list(v.shape) if sizes is None else list(sizes)
        strides = list(v.stride()) if strides is None else list(strides)
        entry = {"arg": arg, "offset": int(offset), "sizes": [int(x) for x in sizes]}
        entry["strides"] = [int(x) for x in strides]
        entry["dtype"] = dtype
        key = json.dumps(entry, sort_keys=True)
        if key not in self._view_index:
            self.views.append(entry)
            self._view_index[key] = len(self.views) - 1
        return self._view_index[key]

    def call(self, n, root=None) -> dict:
        """Node n as a call: fused producers nested in it (their views broadcast to the expression's
        output, `root`'s), inlined constants as numbers."""
        root = n if root is None else root

        def fused(x):
            x = self.p._fused_through_view(x)
            if self.p.kind.get(x) == "inline":
                c = _constant_of(x)
                if c is not None:
                    return _num(c)
                if x in self.p.inline_into:
                    node = self.call(x, root)
                    if x in self.p.row_reductions:
                        # What the op library checks: the rows it reduces are the expression's.
                        node["args"]["input_sizes"] = [int(d) for d in _val(x.args[0]).shape]
                    return {"node": node}
            return None

        return self.p._call(n, library_name(n.target), self.view, fused, self.view, root)
