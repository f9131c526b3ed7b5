"""The graph front door of the kernel compiler: an ATen FX graph (as AOTAutograd hands it, with
concrete shapes) becomes a plan of *segments* and *eager steps*.

A segment is one program, one launch: runs of ops the compiler's op library lowers (pointwise,
reductions, matmuls, indexing, concatenation, attention) with chains of elementwise nodes fused
into one expression, views folded into strided IR views (no data moves), and intermediates that
never leave the segment placed in one device buffer, the arena, where values whose lifetimes do
not overlap share bytes. Everything else runs eagerly: the op is called on spyre tensors, so it
takes its eager spyre kernel (or the CPU fallback where allowed).

The planner decides fusion, segments and memory, never how an op is computed: a segment reaches
the compiler as its nodes (ATen calls over views), and the C++ op library lowers each one, the
same lowering the eager kernels use (backend/compiler/src/ops/). docs/design-compile.md explains
the choices. The passes: fusion.py (what each node is, which producers fuse), this module
(segments), memory.py (the arena and the segment's JSON); nodes.py reads the FX nodes.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from .fusion import Fusion
from .memory import MemoryPlanning
from .nodes import _VIEWS, _constant_of, _is_tensor_node, limits

# ---- the plan --------------------------------------------------------------------------------------


@dataclass
class Segment:
    """One program: its nodes (ATen calls the op library lowers, as JSON), which runtime values fill
    its argument slots, and which values it creates (escaping ones as new tensors, the rest in the
    arena)."""

    index: int
    nodes: list = field(default_factory=list)  # FX nodes whose ops it runs, in order
    fused: dict = field(default_factory=dict)  # node -> the nodes fused into its expression
    inputs: list = field(default_factory=list)  # (slot, root node) read from the environment
    outputs: list = field(default_factory=list)  # the nodes whose values it makes for use elsewhere
    out_slot: int = -1  # the block holding every value the segment makes for use elsewhere
    out_bytes: int = 0
    out_parts: list = field(default_factory=list)  # each output's (byte offset, bytes, sizes, strides, dtype)
    arena_slot: int = -1
    arena_bytes: int = 0
    arena: dict = field(default_factory=dict)  # node (or (node, "temp")) -> byte offset
    out_offsets: dict = field(default_factory=dict)  # node -> byte offset in the out block
    spec: str = ""
    key: str = ""
    program: object = None  # the compiled program (a torch_spyre._C._Program), set when planned
    label: str = ""


@dataclass
class Plan:
    steps: list  # ("segment", Segment) | ("eager", node)
    kinds: dict = field(default_factory=dict)  # node -> how the planner took it

    def launches(self) -> int:
        return sum(1 for kind, _ in self.steps if kind == "segment") + sum(
            1
            for kind, n in self.steps
            if kind == "eager" and _is_tensor_node(n) and n.target not in _VIEWS and n.target is not operator.getitem
        )


class Planner(Fusion, MemoryPlanning):
    """Builds the plan of one graph whose nodes carry concrete fake values (meta["val"])."""

    def __init__(self, gm: fx.GraphModule, name: str, row_fusion: bool = True):
        self.gm, self.name = gm, name
        self.row_fusion = row_fusion  # reductions over a row fused into their consumers (fusion.py)
        self.nodes = list(gm.graph.nodes)
        self.order = {n: i for i, n in enumerate(self.nodes)}
        self.root: dict = {}  # view node -> the node whose memory it views
        # node -> its kind: "input", "output", "view", "item" (a tuple of views), "inline", "eager",
        # "empty" (memory, no op), the op library family of its op ("pointwise", "reduce", "matmul",
        # "index", "movement", "attention"), or for a getitem of a tuple result "part" (a result the
        # op writes), "unwritten" or "static" (a number)
        self.kind: dict = {}
        self.inline_into: dict = {}  # inlined pointwise node -> its consumer
        self.row_valued: set = set()  # inlined nodes of a fused row reduction's chain (fusion.py)
        self.row_reductions: set = set()  # the reductions among them
        self.epilogue: dict = {}  # matmul node -> the fusion.Epilogue it applies
        self.outputs = set()
        self.info: dict = {}  # op node -> (temporary bytes, compute dtype name or None), from the library
        self.reads: dict = {}  # op node -> the operand nodes its lowering reads

    # -- segmentation

    _OPS = ("pointwise", "reduce", "matmul", "index", "movement", "attention", "conv", "empty")

    def plan(self) -> Plan:
        self.classify()
        steps: list = []
        seg: Segment | None = None
        produced_by: dict = {}  # op node -> segment
        for n in self.nodes:
            k = self.kind[n]
            if k not in self._OPS and k != "eager":
                continue
            if k == "eager":
                # It runs before the open segment unless it reads what the segment makes, or writes
                # memory (a trailing copy_ into a mutated input) the segment may still read.
                reads = self._mem_reads_eager(n)
                mutates = isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable
                if seg is not None and (mutates or any(produced_by.get(r) is seg for r in reads)):
                    steps.append(("segment", seg))
                    seg = None
                steps.append(("eager", n))
                continue
            if seg is None:
                seg = Segment(index=0)
            seg.nodes.append(n)
            for v in self.produces(n):
                produced_by[v] = seg
        if seg is not None:
            steps.append(("segment", seg))
        # Split segments that need more launch arguments than a launch has.
        final: list = []
        for kind, s in steps:
            if kind == "eager":
                final.append((kind, s))
            else:
                final.extend(("segment", p) for p in self._fit(s.nodes))
        count = 0
        for kind, s in final:
            if kind == "segment":
                s.index = count
                count += 1
        plan = Plan(final, self.kind)
        self._lay_out(plan)
        return plan

    def _leaves(self, n) -> list:
        """The fx nodes an emitted op reads (through inlined producers)."""
        out = []
        for x in n.all_input_nodes:
            x = self._fused_through_view(x)
            if self.kind.get(x) == "inline" and (x in self.inline_into or _constant_of(x) is not None):
                if x in self.inline_into:
                    out.extend(self._leaves(x))
                continue
            out.append(x)
        return out

    def _fused_through_view(self, x):
        """x, or the fused reduction x is a view of (its value has no memory: a step of the
        expression reading x computes it)."""
        if self.kind.get(x) == "view" and self.kind.get(self.root.get(x)) == "inline":
            return self.root[x]
        return x

    def _mem(self, x):
        """The node owning the memory x's value lives in."""
        return self.root.get(x, x)

    def _mem_reads(self, n) -> set:
        if self.kind.get(n) != "pointwise":  # what the op library's lowering reads
            return {self._mem(x) for x in self.reads.get(n, [])}
        return {self._mem(x) for x in self._leaves(n) if _is_tensor_node(x)}

    def _mem_reads_eager(self, n) -> set:
        out = set()
        for x in n.all_input_nodes:
            if self.kind.get(x) == "item":
                out.add(self._mem(x.args[0]))
            else:
                out.add(self._mem(x))
        return out

    def _segment_args(self, nodes: list) -> tuple[list, list]:
        inside = set(nodes) | {v for n in nodes for v in self.produces(n)}
        reads, escapes = [], []
        for n in nodes:
            for r in sorted(self._mem_reads(n), key=self.order.get):  # a set: its order is per process
                if r not in inside and r not in reads:
                    reads.append(r)
        for n in nodes:
            escapes.extend(v for v in self.produces(n) if self._escapes(v, inside))
        return reads, escapes

    def _escapes(self, n, inside: set) -> bool:
        if n in self.outputs:
            return True
        stack = list(n.users)
        while stack:
            u = stack.pop()
            k = self.kind.get(u)
            if k in ("view", "item"):
                if u in self.outputs:
                    return True
                stack.extend(u.users)
            elif k == "inline":
                stack.extend(u.users)
            elif u not in inside:
                return True
        return False

    def _args(self, nodes: list) -> int:
        reads, escapes = self._segment_args(nodes)
        arena = any(v not in escapes for n in nodes for v in self.produces(n)) or any(self.temps(n) for n in nodes)
        return len(reads) + (1 if escapes else 0) + (1 if arena else 0)

    def _fit(self, nodes: list) -> list:
        """Cuts a run of nodes into segments of at most max_launch_args launch arguments each,
        greedily (each segment as long as it can be; a single op always fits: the compiler checks
        it)."""
        most = limits()["max_launch_args"]
        parts, start = [], 0
        while start < len(nodes):
            end = start + 1
            while end < len(nodes) and self._args(nodes[start : end + 1]) <= most:
                end += 1
            parts.append(nodes[start:end])
            start = end
        out = []
        for part in parts:
            reads, escapes = self._segment_args(part)
            out.append(Segment(index=0, nodes=part, inputs=reads, outputs=escapes))
        return out

    def segment_nodes(self, s: Segment) -> list:
        """Every node a segment computes, fused ones and constants included, in graph order: what
        runs eagerly when its program does not compile."""
        out = set(s.nodes)
        for n in s.nodes:
            out.update(self._inlined(n))
            if n in self.epilogue:
                out.update(self.epilogue[n].nodes)
            out.update(x for x in n.all_input_nodes if self.kind.get(x) == "inline")
        for n in list(out):
            out.update(x for x in n.all_input_nodes if self.kind.get(x) == "inline")
        return sorted(out, key=self.order.get)

    def _inlined(self, n) -> list:
        out = []
        for x in n.all_input_nodes:
            x = self._fused_through_view(x)
            if x in self.inline_into:
                out.append(x)
                out.extend(self._inlined(x))
        return out
