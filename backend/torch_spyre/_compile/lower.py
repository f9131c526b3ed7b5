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
the choices.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from .. import _C

aten = torch.ops.aten
prims = torch.ops.prims

_DTYPES = {
    torch.float32: ("f32", 4),
    torch.float16: ("f16", 2),
    torch.bfloat16: ("bf16", 2),
    torch.int32: ("i32", 4),
    torch.int8: ("i8", 1),
    torch.bool: ("bool", 1),
    torch.int64: ("i64", 8),
}
_NARROW = (torch.float16, torch.bfloat16)
_ALIGN = 64  # bytes between arena values (the op library's temporaries start at such offsets too)

# Ops that only reinterpret their input's memory: in a segment they are strided IR views.
_VIEWS = {
    aten.view.default,
    aten._unsafe_view.default,
    aten.permute.default,
    aten.expand.default,
    aten.t.default,
    aten.transpose.int,
    aten.unsqueeze.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.slice.Tensor,
    aten.select.int,
    aten.alias.default,
    aten.as_strided.default,
    aten.diagonal.default,
    torch.ops.prims.broadcast_in_dim.default,
}
_TUPLE_VIEWS = {aten.split_with_sizes.default, aten.split.Tensor, aten.unbind.int}
_EMPTY = {aten.empty_permuted.default, aten.empty.memory_format, aten.empty_strided.default}

_CATALOGUE: dict | None = None
_LIMITS: dict | None = None


def catalogue() -> dict:
    """The op library's ops: name -> (family, results written), from _C."""
    global _CATALOGUE
    if _CATALOGUE is None:
        _CATALOGUE = {name: tuple(entry) for name, entry in _C._op_catalogue().items()}
    return _CATALOGUE


def limits() -> dict:
    """What a segment must keep to: launch arguments, tensors one pointwise op reads (from _C)."""
    global _LIMITS
    if _LIMITS is None:
        _LIMITS = dict(_C._limits())
    return _LIMITS


def _val(n):
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def _is_tensor_node(n) -> bool:
    return isinstance(n, fx.Node) and isinstance(_val(n), torch.Tensor)


def _num(x):
    """A number as the segment's JSON carries it: infinities and NaN as {"float": ...}."""
    if isinstance(x, bool) or isinstance(x, int):
        return x
    x = float(x)
    if x != x:
        return {"float": "nan"}
    if x in (float("inf"), float("-inf")):
        return {"float": "inf" if x > 0 else "-inf"}
    return x


def _scalar_arg(x) -> bool:
    return isinstance(x, (int, float, bool)) and not isinstance(x, torch.SymInt)


def library_name(target) -> str | None:
    """The op library's name of an FX target ("add" for aten.add.Tensor, "prims::var"), or None
    for anything that is not an ATen or prims operator, or that writes its arguments."""
    if not isinstance(target, torch._ops.OpOverload) or target._schema.is_mutable:
        return None
    ns, base = target.namespace, target._schema.name.split("::")[-1]
    if ns == "aten":
        return base
    return f"{ns}::{base}" if ns == "prims" else None


def _arguments(n: fx.Node) -> dict:
    """n's arguments by schema name, defaults filled in."""
    schema = n.target._schema
    out = {}
    for i, a in enumerate(schema.arguments):
        if i < len(n.args) and not a.kwarg_only:
            out[a.name] = n.args[i]
        elif a.name in n.kwargs:
            out[a.name] = n.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            out[a.name] = None
    return out


def _constant_of(n: fx.Node):
    """The value of a node that fills its output with one number (full, scalar_tensor), or None."""
    if n.target == aten.full.default and _scalar_arg(n.args[1]):
        return n.args[1]
    if n.target == aten.scalar_tensor.default and _scalar_arg(n.args[0]):
        return n.args[0]
    if n.target == aten.full_like.default and _scalar_arg(n.args[1]):
        return n.args[1]
    return None


def _common(args: dict):
    """torch.result_type of the tensor and number arguments (the type a comparison computes in)."""
    operands = [v for v in args.values() if _is_tensor_node(v) or _scalar_arg(v)]
    operands = [_val(v) if isinstance(v, fx.Node) else v for v in operands]
    if not operands:
        return None
    if len(operands) == 1:
        return operands[0].dtype if isinstance(operands[0], torch.Tensor) else None
    common = torch.result_type(operands[0], operands[1])
    for x in operands[2:]:
        common = torch.promote_types(common, torch.result_type(operands[0], x))
    return common


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
    outputs: list = field(default_factory=list)  # (byte offset, node, sizes, strides, dtype) in the out block
    out_slot: int = -1  # the block holding every value the segment makes for use elsewhere
    out_bytes: int = 0
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


class Planner:
    """Builds the plan of one graph whose nodes carry concrete fake values (meta["val"])."""

    def __init__(self, gm: fx.GraphModule, name: str):
        self.gm, self.name = gm, name
        self.nodes = list(gm.graph.nodes)
        self.order = {n: i for i, n in enumerate(self.nodes)}
        self.root: dict = {}  # view node -> the node whose memory it views
        # node -> its kind: "input", "output", "view", "item" (a tuple of views), "inline", "eager",
        # "empty" (memory, no op), the op library family of its op ("pointwise", "reduce", "matmul",
        # "index", "movement", "attention"), or for a getitem of a tuple result "part" (a result the
        # op writes), "unwritten" or "static" (a number)
        self.kind: dict = {}
        self.inline_into: dict = {}  # inlined pointwise node -> its consumer
        self.outputs = set()
        self.info: dict = {}  # op node -> (temporary bytes, compute dtype name or None), from the library
        self.reads: dict = {}  # op node -> the operand nodes its lowering reads

    # -- classification

    def _device_ok(self, n) -> bool:
        v = _val(n)
        return isinstance(v, torch.Tensor) and v.device.type == "spyre" and v.dtype in _DTYPES

    def _results(self, n) -> list:
        """The tensor values node n's op writes: n's own, or the written getitems of a tuple result."""
        v = _val(n)
        if isinstance(v, torch.Tensor):
            return [n] if self._device_ok(n) else []
        if isinstance(v, (tuple, list)):
            return [u for u in n.users if u.target is operator.getitem]
        return []

    def _op_kind(self, n: fx.Node):
        name = library_name(n.target)
        entry = catalogue().get(name) if name else None
        if entry is None:
            return None
        family, written = entry
        v = _val(n)
        if isinstance(v, torch.Tensor):
            if not self._device_ok(n):
                return None
        elif isinstance(v, (tuple, list)):
            parts = [x for x in v[:written] if isinstance(x, torch.Tensor)]
            if not parts or any(x.device.type != "spyre" or x.dtype not in _DTYPES for x in parts):
                return None
        else:
            return None
        for x in n.all_input_nodes:
            if _is_tensor_node(x) and not self._device_ok(x):
                return None
        if family == "pointwise":
            # Every tensor argument must broadcast to the output (no type-changing in-between).
            for x in n.all_input_nodes:
                if _is_tensor_node(x) and len(_val(x).shape) > len(v.shape):
                    return None
        spec, operands = self._probe(n, name)
        try:
            ((temp_bytes, compute, args),) = _C._examine_segment(spec)
        except _C.Unsupported:  # the library does not take this call: it runs eagerly (a Malformed raises)
            return None
        self.info[n] = (temp_bytes, compute)
        # What the lowering reads, and every tensor of a list argument (cat's empty inputs are read
        # by nothing, but the list names them all).
        listed = [y for v in n.args if isinstance(v, (list, tuple)) for y in v if _is_tensor_node(y)]
        reads = [operands[a] for a in args] + [y for y in listed if y in operands]
        self.reads[n] = list(dict.fromkeys(x for x in reads if x is not n and x not in self._results(n)))
        return family

    def _probe(self, n, name) -> tuple[str, list]:
        """A one-node segment over placeholder views of n's operands, each in an argument of its
        own: what the library is asked before memory is placed (does it take the call, what
        temporaries, what compute type, which operands it reads). Returns the spec and the node of
        each argument."""
        views, index, operands = [], {}, []

        def view(x, sizes=None, strides=None):
            v = _val(x)
            if x not in operands:
                operands.append(x)
            entry = {
                "arg": operands.index(x),
                "offset": int(v.storage_offset()),
                "sizes": [int(s) for s in (v.shape if sizes is None else sizes)],
                "strides": [int(s) for s in (v.stride() if strides is None else strides)],
                "dtype": _DTYPES[v.dtype][0],
            }
            key = json.dumps(entry, sort_keys=True)
            if key not in index:
                views.append(entry)
                index[key] = len(views) - 1
            return index[key]

        node = self._call(n, name, view, lambda x: None, view)
        return json.dumps({"num_args": len(operands), "views": views, "nodes": [node]}, separators=(",", ":")), operands

    def _call(self, n, name, view, fused, part_view, root=None) -> dict:
        """Node n as the op library's call: arguments by name (tensors as views from `view`, or as
        `fused(x)` for a fused producer), its results' views, its types. `root` is the node whose
        output an expression writes (inputs broadcast to its shape)."""
        root = n if root is None else root
        pointwise = catalogue()[name][0] == "pointwise"
        read = None if pointwise or n not in self.reads else set(self.reads[n])

        def arg(x):
            if isinstance(x, fx.Node):
                node = fused(x)
                if node is not None:
                    return node
                if not _is_tensor_node(x) or read is not None and x not in read:
                    return None  # a tensor the lowering does not read (attention's seed) is not passed
                return {"view": view(x, *_broadcast(x, root)) if pointwise else view(x)}
            if isinstance(x, (list, tuple)):
                if all(isinstance(y, fx.Node) for y in x) and x:
                    return {"views": [view(y) for y in x]}
                if all(isinstance(y, int) and not isinstance(y, bool) for y in x):
                    return [int(y) for y in x]
                return None
            if _scalar_arg(x):
                return _num(x)
            if isinstance(x, str):
                return x
            return None  # dtypes, devices, layouts: what the results' views already say

        args = _arguments(n)
        call = {"op": name, "args": {k: arg(v) for k, v in args.items()}}
        v = _val(n)
        if isinstance(v, torch.Tensor):
            if n is root:
                call["outs"] = [view(n)]
            call["result"] = _DTYPES[v.dtype][0]
        else:
            parts = {u.args[1]: u for u in self._results(n)}
            written = catalogue()[name][1]
            outs = []
            for i in range(written):
                u = parts.get(i)
                outs.append(part_view(u) if u is not None and _is_tensor_node(u) else None)
            call["outs"] = [-1 if o is None else o for o in outs]
            first = next((x for x in v if isinstance(x, torch.Tensor)), None)
            call["result"] = _DTYPES[first.dtype][0] if first is not None else "f32"
        common = _common(args) if pointwise else None
        call["common"] = _DTYPES[common][0] if common in _DTYPES else call["result"]
        return call

    def produces(self, n) -> list:
        """The memory-owning values node n's op writes: n, or the parts of a tuple result."""
        if isinstance(_val(n), torch.Tensor):
            return [n]
        return [u for u in n.users if self.kind.get(u) == "part"]

    def temps(self, n) -> list:
        """Arena temporaries node n's op needs besides its values: (name, bytes)."""
        nbytes = self.info.get(n, (0, None))[0]
        return [("temp", nbytes)] if nbytes else []

    def classify(self):
        for n in self.nodes:
            if n.op in ("placeholder", "get_attr"):  # get_attr: a constant the graph holds
                self.kind[n] = "input"
            elif n.op == "output":
                self.outputs.update(self._flat(n.args))
                self.kind[n] = "output"
            elif n.op == "call_function" and n.target in _VIEWS and _is_tensor_node(n.args[0]):
                self.kind[n] = "view"
                self.root[n] = self.root.get(n.args[0], n.args[0])
            elif n.op == "call_function" and n.target is operator.getitem and n.args[0].target in _TUPLE_VIEWS:
                self.kind[n] = "view"
                src = n.args[0].args[0]
                self.root[n] = self.root.get(src, src)
            elif n.op == "call_function" and n.target in _TUPLE_VIEWS:
                self.kind[n] = "item"  # its getitems are views
            elif n.op == "call_function" and n.target in _EMPTY and self._device_ok(n):
                self.kind[n] = "empty"  # memory and no op: what is written into it comes after
            elif n.op == "call_function" and n.target is operator.getitem and n.args[0] in self.info:
                # A result of an op with a tuple result: memory of its own, or a number known now.
                written = catalogue()[library_name(n.args[0].target)][1]
                if not _is_tensor_node(n):
                    self.kind[n] = "static"
                else:
                    self.kind[n] = "part" if n.args[1] < written else "unwritten"
            else:
                # A family the planner does not place in segments runs as an eager step, in order:
                # a node with no step would be evaluated on first use, after the launches it reads
                # from were queued but before they ran.
                k = self._op_kind(n) if n.op == "call_function" else None
                self.kind[n] = k if k in self._OPS else "eager"
        # Roots of views must be values with memory of their own.
        for v, r in list(self.root.items()):
            while r in self.root:
                r = self.root[r]
            self.root[v] = r
        self._choose_inlining()

    @staticmethod
    def _flat(args):
        out = []
        fx.node.map_arg(args, out.append)
        return out

    def _compute(self, n):
        return self.info.get(n, (0, None))[1]

    def _fusable(self, n, u) -> bool:
        """Whether pointwise node n can be a step of its user u's expression: both compute in one
        type (fp16 and bf16 compute in fp32 inside an expression), and n is not a narrower float,
        whose store would round it."""
        widened = {"f16": "f32", "bf16": "f32"}
        a, b = self._compute(n), self._compute(u)
        if a is None or b is None or widened.get(a, a) != widened.get(b, b):
            return False
        return _val(n).dtype not in _NARROW

    def _choose_inlining(self):
        """A pointwise node with one user, a pointwise node of its shape that reads it directly,
        becomes part of that user's expression: it is never written to memory."""
        for n in self.nodes:
            k = self.kind.get(n)
            if k == "pointwise" and _constant_of(n) is not None:
                # A number in each reader's expression (or a fill of the slice_scatter it is the base of).
                readers_take_it = all(
                    self.kind.get(u) == "pointwise"
                    or library_name(u.target) == "slice_scatter"
                    and self.kind.get(u) == "movement"
                    and u.args[0] is n
                    and u.args[1] is not n
                    for u in n.users
                )
                if readers_take_it and n not in self.outputs and n.users:
                    self.kind[n] = "inline"
                continue
            if k != "pointwise" or n in self.outputs or len(n.users) != 1:
                continue
            (u,) = n.users
            if self.kind.get(u) != "pointwise" or _val(u).shape != _val(n).shape or not self._fusable(n, u):
                continue
            self.kind[n] = "inline"
            self.inline_into[n] = u
        # A pointwise op reads at most max_pointwise_inputs tensors: where a fused expression would
        # read more, its biggest fused producers are written to memory after all.
        most = limits()["max_pointwise_inputs"]
        leaves: dict = {}
        for n in self.nodes:
            if (
                self.kind.get(n) not in ("pointwise", "inline")
                or n not in self.inline_into
                and self.kind[n] != "pointwise"
            ):
                continue
            while True:
                own, parts = set(), {}
                for x in n.all_input_nodes:
                    if x in self.inline_into:
                        parts[x] = leaves[x]
                    elif self.kind.get(x) != "inline":
                        own.add(x)
                total = own.union(*parts.values()) if parts else own
                if len(total) <= most or not parts:
                    leaves[n] = total
                    break
                big = max(parts, key=lambda x: len(parts[x]))
                del self.inline_into[big]
                self.kind[big] = "pointwise"

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
            if self.kind.get(x) == "inline" and (x in self.inline_into or _constant_of(x) is not None):
                if x in self.inline_into:
                    out.extend(self._leaves(x))
                continue
            out.append(x)
        return out

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
        # own over the block's storage when the segment runs.
        outs, at = [], 0
        if escapes:
            s.out_slot = len(slots)
        for n in escapes:
            v = _val(n)
            outs.append((at, n, tuple(v.shape), tuple(v.stride()), v.dtype))
            s.out_offsets[n] = at
            at += (_extent(v) * _DTYPES[v.dtype][1] + _ALIGN - 1) // _ALIGN * _ALIGN
        s.outputs = outs
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
            if (n, "temp") in s.arena:
                node["temp"] = {"arg": s.arena_slot, "offset": s.arena[(n, "temp")], "bytes": temps[(n, "temp")]}
            nodes.append(node)
        s.spec = json.dumps({"num_args": num_args, "views": b.views, "nodes": nodes}, separators=(",", ":"))
        s.fused = {n: sorted(self._inlined(n), key=self.order.get) for n in s.nodes}
        kinds = {}
        for n in s.nodes:
            kinds[self.kind[n]] = kinds.get(self.kind[n], 0) + 1
        s.label = f"{self.name}/s{s.index} " + "+".join(f"{c}{k}" for k, c in sorted(kinds.items()))

    def segment_nodes(self, s: Segment) -> list:
        """Every node a segment computes, fused ones and constants included, in graph order: what
        runs eagerly when its program does not compile."""
        out = set(s.nodes)
        for n in s.nodes:
            out.update(self._inlined(n))
            out.update(x for x in n.all_input_nodes if self.kind.get(x) == "inline")
        for n in list(out):
            out.update(x for x in n.all_input_nodes if self.kind.get(x) == "inline")
        return sorted(out, key=self.order.get)

    def _inlined(self, n) -> list:
        out = []
        for x in n.all_input_nodes:
            if x in self.inline_into:
                out.append(x)
                out.extend(self._inlined(x))
        return out


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
            if self.p.kind.get(x) == "inline":
                c = _constant_of(x)
                if c is not None:
                    return _num(c)
                if x in self.p.inline_into:
                    return {"node": self.call(x, root)}
            return None

        return self.p._call(n, library_name(n.target), self.view, fused, self.view, root)


def _broadcast(x, n):
    """Sizes and strides of input x broadcast to n's shape (aligned at the right)."""
    xv, out = _val(x), _val(n)
    if tuple(xv.shape) == tuple(out.shape):
        return None, None
    pad = out.dim() - xv.dim()
    sizes, strides = list(out.shape), []
    for i in range(out.dim()):
        j = i - pad
        if j < 0 or xv.shape[j] == 1 and out.shape[i] != 1:
            strides.append(0)
        else:
            strides.append(xv.stride()[j])
    return sizes, strides
