"""The graph front door of the kernel compiler: an ATen FX graph (as AOTAutograd hands it, with
concrete shapes) becomes a plan of *segments* and *eager steps*.

A segment is one program, one launch: runs of ops the compiler takes (pointwise, reductions,
matmuls, fills, concatenation) with chains of elementwise nodes fused into one expression, views
folded into strided IR views (no data moves), and intermediates that never leave the segment
placed in one device buffer, the arena, where values whose lifetimes do not overlap share bytes.
Everything else runs eagerly: the op is called on spyre tensors, so it takes its eager spyre
kernel (or the CPU fallback where allowed). docs/design-compile.md explains the choices.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from .. import _C
from . import attention

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
_FLOAT = (torch.float32, torch.float16, torch.bfloat16)
_MAX_ARGS = 16  # hw::kMaxLaunchArgs
_MAX_EXPR_INPUTS = 3  # tensors a pointwise op reads: schedule::kMaxOperands less its output
_ALIGN = 64  # bytes between arena values
_REDUCE = {"sum": 0, "amax": 1, "amin": 2}

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

_REDUCTIONS = {
    aten.sum.dim_IntList,
    aten.sum.default,
    aten.amax.default,
    aten.amin.default,
    aten.mean.dim,
    prims.sum.default,
    prims.var.default,
}

_FUNCTIONS: dict | None = None


def _functions() -> dict:
    global _FUNCTIONS
    if _FUNCTIONS is None:
        _FUNCTIONS = _C._pointwise_functions()
    return _FUNCTIONS


def _val(n):
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def _is_tensor_node(n) -> bool:
    return isinstance(n, fx.Node) and isinstance(_val(n), torch.Tensor)


def _num(x: float):
    """A JSON number, or the string JSON needs for infinities and NaN."""
    x = float(x)
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return x


# ---- pointwise ops as expression builders --------------------------------------------------------


class _Expr:
    """Steps of one fused pointwise op; arguments name inputs (>= 0) or steps (-1 - j)."""

    def __init__(self):
        self.inputs: list = []  # ("view", node) or ("scalar", x)
        self.steps: list[dict] = []
        self._memo: dict = {}

    def leaf(self, node) -> int:
        key = ("view", node)
        if key not in self._memo:
            self.inputs.append(key)
            self._memo[key] = len(self.inputs) - 1
        return self._memo[key]

    def const(self, x) -> int:
        key = ("scalar", float(x), str(x))
        if key not in self._memo:
            self.inputs.append(("scalar", float(x)))
            self._memo[key] = len(self.inputs) - 1
        return self._memo[key]

    def add(self, step: dict) -> int:
        self.steps.append(step)
        return -len(self.steps)

    def unary(self, name: str, a: int) -> int:
        return self.add({"kind": "unary", "fn": _functions()["unary"][name], "args": [a]})

    def unary_fn(self, fn: int, a: int) -> int:
        return self.add({"kind": "unary", "fn": fn, "args": [a]})

    def binary(self, name: str, a: int, b: int) -> int:
        return self.add({"kind": "binary", "fn": _functions()["binary"][name], "args": [a, b]})

    def select(self, m: int, a: int, b: int) -> int:
        return self.add({"kind": "select", "args": [m, a, b]})

    def copy(self, a: int) -> int:
        return self.add({"kind": "copy", "args": [a]})


_GELU_TANH = 22  # hw::UnaryFn::kGeluTanh (the table maps "gelu" to the erf form)


def _scalar_arg(x) -> bool:
    return isinstance(x, (int, float, bool)) and not isinstance(x, torch.SymInt)


def _pointwise_rule(n: fx.Node):
    """A function (expr, arg) -> step building node n's value, or None when n is not a pointwise op
    the compiler takes. `arg(a)` turns an FX argument into an expression argument."""
    t, a, kw = n.target, n.args, n.kwargs
    fns = _functions()
    if not hasattr(t, "overloadpacket"):
        return None
    name = t.overloadpacket.__name__
    if name in ("add", "sub") and len(a) == 2 and set(kw) <= {"alpha"}:
        alpha = kw.get("alpha", 1)

        def rule(e, arg):
            y = arg(a[1])
            if alpha != 1:
                y = e.binary("mul", y, e.const(alpha))
            return e.binary(name, arg(a[0]), y)

        return rule
    if name == "div" and len(a) == 2 and not kw:
        return lambda e, arg: e.binary("div", arg(a[0]), arg(a[1]))
    if name == "pow" and len(a) == 2 and not kw:
        if _scalar_arg(a[1]) and float(a[1]) == 2.0:
            return lambda e, arg: e.binary("mul", arg(a[0]), arg(a[0]))
        if _scalar_arg(a[1]) and float(a[1]) == 0.5:
            return lambda e, arg: e.unary("sqrt", arg(a[0]))
        if _scalar_arg(a[1]) and float(a[1]) == -0.5:
            return lambda e, arg: e.unary("rsqrt", arg(a[0]))
        return lambda e, arg: e.binary("pow", arg(a[0]), arg(a[1]))
    if name in ("bitwise_and", "bitwise_or", "bitwise_xor") and _val(n).dtype == torch.bool:
        logical = "logical_" + name.split("_")[1]
        return lambda e, arg: e.binary(logical, arg(a[0]), arg(a[1]))
    if name == "bitwise_not" and _val(n).dtype == torch.bool:
        return lambda e, arg: e.unary("logical_not", arg(a[0]))
    if name in fns["binary"] and name != "rsub" and len(a) == 2 and not kw:  # rsub: decomposed before
        if name.startswith("bitwise"):
            return None
        return lambda e, arg: e.binary(name, arg(a[0]), arg(a[1]))
    if name == "gelu" and len(a) == 1:
        if kw.get("approximate", "none") == "tanh":
            return lambda e, arg: e.unary_fn(_GELU_TANH, arg(a[0]))
        return lambda e, arg: e.unary("gelu", arg(a[0]))
    if name in fns["unary"] and len(a) == 1 and not kw and name != "bitwise_not":
        return lambda e, arg: e.unary(name, arg(a[0]))
    if name == "where" and t == aten.where.self:
        return lambda e, arg: e.select(arg(a[0]), arg(a[1]), arg(a[2]))
    if name in ("clamp", "clamp_min", "clamp_max") and not kw:
        lo = a[1] if name in ("clamp", "clamp_min") and len(a) > 1 else None
        hi = a[2] if name == "clamp" and len(a) > 2 else (a[1] if name == "clamp_max" else None)

        def rule(e, arg):
            x = arg(a[0])
            if lo is not None:
                x = e.binary("maximum", x, arg(lo))
            if hi is not None:
                x = e.binary("minimum", x, arg(hi))
            return x

        return rule
    if t in (aten._to_copy.default, aten.clone.default, aten.lift_fresh_copy.default) and len(a) == 1:
        if set(kw) - {"dtype", "memory_format", "layout", "device"}:
            return None
        dev = kw.get("device")
        if dev is not None and torch.device(dev).type != "spyre":
            return None
        return lambda e, arg: e.copy(arg(a[0]))
    if t == aten.sigmoid_backward.default:
        return lambda e, arg: e.binary(
            "mul", arg(a[0]), e.binary("mul", arg(a[1]), e.binary("sub", e.const(1.0), arg(a[1])))
        )
    if t == aten.tanh_backward.default:
        return lambda e, arg: e.binary(
            "mul", arg(a[0]), e.binary("sub", e.const(1.0), e.binary("mul", arg(a[1]), arg(a[1])))
        )
    if t == aten.threshold_backward.default:
        return lambda e, arg: e.select(e.binary("le", arg(a[1]), e.const(a[2])), e.const(0.0), arg(a[0]))
    return None


def _constant_of(n: fx.Node):
    """The value of a node that fills its output with one number (full, scalar_tensor), or None."""
    if n.target == aten.full.default and _scalar_arg(n.args[1]):
        return n.args[1]
    if n.target == aten.scalar_tensor.default and _scalar_arg(n.args[0]):
        return n.args[0]
    if n.target == aten.full_like.default and _scalar_arg(n.args[1]):
        return n.args[1]
    return None


# ---- the plan --------------------------------------------------------------------------------------


@dataclass
class Segment:
    """One program: its ops (IR JSON), which runtime values fill its argument slots, and which
    values it creates (escaping ones as new tensors, the rest in the arena)."""

    index: int
    nodes: list = field(default_factory=list)  # FX nodes whose ops it runs, in order
    fused: dict = field(default_factory=dict)  # node -> the nodes fused into its expression
    inputs: list = field(default_factory=list)  # (slot, root node) read from the environment
    outputs: list = field(default_factory=list)  # (byte offset, node, sizes, strides, dtype) in the out block
    out_slot: int = -1  # the block holding every value the segment makes for use elsewhere
    out_bytes: int = 0
    arena_slot: int = -1
    arena_bytes: int = 0
    arena: dict = field(default_factory=dict)  # node -> byte offset
    out_offsets: dict = field(default_factory=dict)  # node -> byte offset in the out block
    spec: str = ""
    key: str = ""
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
        # node -> its kind: "input", "output", "view", "item" (a tuple of views), "inline", "eager", an
        # op kind ("pointwise", "reduce", "matmul", "attention", "gather", ...), or for an attention's
        # getitems "part" (an output it writes), "unwritten" or "static" (a number)
        self.kind: dict = {}
        self.inline_into: dict = {}  # inlined pointwise node -> its consumer
        self.outputs = set()

    # -- classification

    def _device_ok(self, n) -> bool:
        v = _val(n)
        return isinstance(v, torch.Tensor) and v.device.type == "spyre" and v.dtype in _DTYPES

    def _op_kind(self, n: fx.Node):
        if not self._device_ok(n) or any(
            isinstance(a, fx.Node) and isinstance(_val(a), torch.Tensor) and not self._device_ok(a)
            for a in n.all_input_nodes
        ):
            return None
        if _constant_of(n) is not None:
            return "const"
        if n.target in (aten.mm.default, aten.bmm.default, aten.addmm.default):
            return "matmul" if self._matmul_ok(n) else None
        if n.target in _REDUCTIONS:
            return "reduce" if self._reduce_ok(n) else None
        if n.target == aten.embedding.default:
            w, idx = _val(n.args[0]), _val(n.args[1])
            ok = w.dim() == 2 and w.stride(1) == 1 and idx.dtype == torch.int64 and idx.dim() >= 1 and idx.numel() > 0
            return "gather" if ok and _val(n).is_contiguous() else None
        if n.target == aten.embedding_dense_backward.default:
            grad, idx = _val(n.args[0]), _val(n.args[1])
            ok = n.args[3] < 0 and not n.args[4] and grad.dtype in _FLOAT and idx.dtype == torch.int64
            return "scatter" if ok and grad.is_contiguous() and idx.is_contiguous() and idx.numel() > 0 else None
        if n.target in (aten.empty_permuted.default, aten.empty.memory_format, aten.empty_strided.default):
            return "empty"  # memory and no op: what is written into it comes after
        if n.target == aten.slice_scatter.default:
            return "slice_scatter" if all(_scalar_arg(x) or x is None for x in n.args[2:]) else None
        if n.target == aten.cat.default:
            return "cat" if all(_is_tensor_node(x) for x in n.args[0]) else None
        if n.target == aten.arange.start_step and _val(n).dim() == 1:
            return "iota" if all(_scalar_arg(x) for x in n.args[:3]) else None
        if _pointwise_rule(n) is not None:
            # Every tensor argument must broadcast to the output (no type-changing in-between).
            out = _val(n)
            for x in n.all_input_nodes:
                if _is_tensor_node(x) and len(_val(x).shape) > len(out.shape):
                    return None
            return "pointwise"
        return None

    def _attention_ok(self, n) -> bool:
        if not attention.takes(n):
            return False
        return all(self._device_ok(u) for u in n.users if _is_tensor_node(u)) and all(
            self._device_ok(x) for x in n.all_input_nodes if _is_tensor_node(x)
        )

    def produces(self, n) -> list:
        """The memory-owning values node n's op writes: n, or an attention's tensor outputs."""
        if self.kind.get(n) == "attention":
            return [u for u in n.users if self.kind.get(u) == "part"]
        return [n]

    @staticmethod
    def _written_part(n) -> bool:
        """Whether a getitem of an attention is an output its program writes (not the random seed
        and offset, which have no dropout to feed and are plain empty tensors)."""
        limit = 2 if n.args[0].target == attention.FORWARD else 3
        return n.args[1] < limit

    def temps(self, n) -> list:
        """Arena temporaries node n's op needs besides its values: (name, bytes)."""
        if self.kind.get(n) == "attention":
            return attention.temps(n)
        if n.target == prims.var.default:
            return [("dev", _val(n.args[0]).numel() * 4)]
        return []

    def _matmul_ok(self, n) -> bool:
        vals = [_val(x) for x in n.all_input_nodes]
        out = _val(n)
        if any(v.dtype not in _FLOAT or v.dtype != out.dtype for v in vals):
            return False
        if n.target == aten.addmm.default and set(n.kwargs) - {"alpha", "beta"}:
            return False
        for x in n.args[-2:]:  # the PT array reads a tile along a contiguous dim of each operand
            v = _val(x)
            if v.shape[-1] > 1 and v.shape[-2] > 1 and v.stride(-1) != 1 and v.stride(-2) != 1:
                return False
        return out.dim() >= 1 and out.stride(-1) == 1 and out.numel() > 0 and vals[-1].shape[-2] > 0

    def _reduce_ok(self, n) -> bool:
        x = _val(n.args[0])
        if x.dtype not in _FLOAT or x.numel() == 0:
            return False
        if n.target == aten.sum.default:
            return set(n.kwargs) <= {"dtype"}
        if n.target in (prims.sum.default, prims.var.default):
            return set(n.kwargs) <= {"output_dtype"} and (n.kwargs.get("output_dtype") in (None, _val(n).dtype))
        return set(n.kwargs) <= {"dtype"} and (len(n.args) < 4 or n.args[3] is None)

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
            elif (
                n.op == "call_function"
                and n.target in (attention.FORWARD, attention.BACKWARD)
                and self._attention_ok(n)
            ):
                self.kind[n] = "attention"
            elif n.op == "call_function" and n.target is operator.getitem and self.kind.get(n.args[0]) == "attention":
                # An output of a lowered attention: memory of its own, or a number known now.
                if not _is_tensor_node(n):
                    self.kind[n] = "static"
                else:
                    self.kind[n] = "part" if self._written_part(n) else "unwritten"
            else:
                k = self._op_kind(n) if n.op == "call_function" else None
                self.kind[n] = k or "eager"
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

    def _choose_inlining(self):
        """A pointwise node with one user, a pointwise node of its shape that reads it directly,
        becomes part of that user's expression: it is never written to memory."""
        for n in self.nodes:
            k = self.kind.get(n)
            if k == "const":
                # A number in each reader's expression (or a fill of the slice_scatter it is the base of).
                readers_take_it = all(
                    self.kind.get(u) == "pointwise"
                    or self.kind.get(u) == "slice_scatter"
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
            if self.kind.get(u) != "pointwise" or _val(u).shape != _val(n).shape:
                continue
            d = _val(n).dtype
            if d not in (torch.float32, torch.bool) and not (d == _val(u).dtype and d not in _FLOAT):
                continue  # a narrower float rounds when stored: keep that rounding
            self.kind[n] = "inline"
            self.inline_into[n] = u
        # A pointwise op reads at most _MAX_EXPR_INPUTS tensors: where a fused expression would read
        # more, its biggest fused producers are written to memory after all.
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
                if len(total) <= _MAX_EXPR_INPUTS or not parts:
                    leaves[n] = total
                    break
                big = max(parts, key=lambda x: len(parts[x]))
                del self.inline_into[big]
                self.kind[big] = "pointwise"

    # -- segmentation

    def plan(self) -> Plan:
        self.classify()
        # Which memory-owning values does each emitted op read, and in which segment is it?
        steps: list = []
        seg: Segment | None = None
        produced_by: dict = {}  # op node -> segment
        for n in self.nodes:
            k = self.kind[n]
            if k in ("input", "view", "item", "inline", "output", "part", "static", "unwritten"):
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
        """The fx nodes an emitted op's expression reads (through inlined producers)."""
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
        if self.kind.get(n) == "attention":
            idx = (0, 1, 2) if n.target == attention.FORWARD else (0, 1, 2, 3, 6, 7)
            return {self._mem(n.args[i]) for i in idx}
        return {self._mem(x) for x in self._leaves(n) if _is_tensor_node(x) or self.kind.get(x) == "item"}

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
        """Cuts a run of nodes into segments of at most _MAX_ARGS launch arguments each, greedily
        (each segment as long as it can be; a single op always fits: the compiler checks it)."""
        parts, start = [], 0
        while start < len(nodes):
            end = start + 1
            while end < len(nodes) and self._args(nodes[start : end + 1]) <= _MAX_ARGS:
                end += 1
            parts.append(nodes[start:end])
            start = end
        out = []
        for part in parts:
            reads, escapes = self._segment_args(part)
            out.append(Segment(index=0, nodes=part, inputs=reads, outputs=escapes))
        return out

    # -- memory planning and IR emission

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
        # The arena: values made and used only here, placed by lifetime (first fit).
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
        for n in s.nodes:
            b.op(n)
        doc = {"num_args": num_args, "views": b.views, "ops": b.ops}
        s.spec = json.dumps(doc, separators=(",", ":"))
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
    """Turns a segment's nodes into IR views and ops (the JSON the compiler reads)."""

    def __init__(self, p: Planner, s: Segment, slots: dict):
        self.p, self.s, self.slots = p, s, slots
        self.views: list = []
        self.ops: list = []
        self._view_index: dict = {}

    def view(self, n, sizes=None, strides=None, extra_offset=0) -> int:
        """The IR view of node n's value (sizes and strides overridable, e.g. for keepdim)."""
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
        entry = {"arg": arg, "offset": int(offset + extra_offset), "sizes": [int(x) for x in sizes]}
        entry["strides"] = [int(x) for x in strides]
        entry["dtype"] = dtype
        key = json.dumps(entry, sort_keys=True)
        if key not in self._view_index:
            self.views.append(entry)
            self._view_index[key] = len(self.views) - 1
        return self._view_index[key]

    def op(self, n):
        k = self.p.kind[n]
        if k == "pointwise":
            self.pointwise(n)
        elif k == "const":
            self.fill(n, _constant_of(n))
        elif k == "iota":
            step = n.args[2] if len(n.args) > 2 else n.kwargs.get("step", 1)
            iota = {"kind": "iota", "start": _num(n.args[0]), "step": _num(step)}
            self.pointwise_op([], self.view(n), [iota], _DTYPES[_val(n).dtype][0])
        elif k == "reduce":
            self.reduce(n)
        elif k == "matmul":
            self.matmul(n)
        elif k == "cat":
            self.cat(n)
        elif k == "gather":
            self.gather(n)
        elif k == "scatter":
            self.scatter_add(n)
        elif k == "slice_scatter":
            self.slice_scatter(n)
        elif k == "attention":
            attention.lower(self, n, lambda d: _DTYPES[d][0])

    def pointwise_op(self, inputs: list, out: int, steps: list, compute: str = "f32"):
        """Appends a pointwise op: `inputs` as {"view": i} or {"scalar": x}, written to view `out`."""
        self.ops.append({"pointwise": {"compute": compute, "inputs": inputs, "out": out, "steps": steps}})

    def fill(self, n, value):
        self.pointwise_op([], self.view(n), [{"kind": "fill", "value": _num(value)}], _DTYPES[_val(n).dtype][0])

    def _compute(self, nodes: list) -> str:
        dts = {_val(x).dtype for x in nodes if _is_tensor_node(x)}
        if dts & set(_FLOAT):
            return "f32"
        for d in (torch.int64, torch.int32, torch.int8, torch.bool):
            if d in dts:
                return _DTYPES[d][0]
        return "f32"

    def pointwise(self, n):
        e = _Expr()
        involved = [n]

        def arg(x):
            if isinstance(x, fx.Node):
                c = _constant_of(x)
                if self.p.kind.get(x) == "inline" and c is not None:
                    return e.const(c)
                if x in self.p.inline_into:
                    involved.append(x)
                    involved.extend(y for y in x.all_input_nodes if _is_tensor_node(y))
                    return _pointwise_rule(x)(e, arg)
                involved.append(x)
                return e.leaf(x)
            return e.const(x)

        _pointwise_rule(n)(e, arg)
        if not e.steps:  # a bare copy of an input
            e.copy(0)
        inputs = [
            {"view": self.view(x, *_broadcast(x, n))} if kind == "view" else {"scalar": _num(x)} for kind, x in e.inputs
        ]
        self.pointwise_op(inputs, self.view(n), e.steps, self._compute(involved))

    def reduce(self, n):
        x = n.args[0]
        xv, out = _val(x), _val(n)
        nd = xv.dim()
        if n.target == aten.sum.default:
            dims = list(range(nd))
        elif n.target in (prims.sum.default, prims.var.default):
            dims = sorted({d % nd for d in n.args[1]}) if n.args[1] else list(range(nd))
        else:
            dims = n.args[1] if len(n.args) > 1 and n.args[1] is not None else []
            dims = sorted({d % nd for d in dims}) if dims else list(range(nd))
        keep = [1 if i in dims else s for i, s in enumerate(xv.shape)]
        if out.dim() == nd:
            sizes, strides = list(out.shape), list(out.stride())
        else:
            sizes, strides, j = [], [], 0
            for i in range(nd):
                if i in dims:
                    sizes.append(1)
                    strides.append(1)
                else:
                    sizes.append(out.shape[j])
                    strides.append(out.stride()[j])
                    j += 1
        assert sizes == keep, (sizes, keep)
        fn = n.target.__name__.split(".")[0]
        fn = "sum" if fn in ("mean", "var") else fn
        o = self.view(n, sizes, strides)
        count = 1
        for d in dims:
            count *= xv.shape[d]
        binary = _functions()["binary"]
        if n.target == prims.var.default:
            # Two passes, as torch's: the mean (into the output), then the sum of squared
            # deviations from it (a temporary in the arena), scaled by 1 / (count - correction).
            self.ops.append({"reduce": {"fn": 0, "compute": "f32", "in": self.view(x), "out": o, "dims": dims}})
            self._scale(o, 1.0 / count)
            dev = self.temp(n, "dev", xv)
            steps = [
                {"kind": "binary", "fn": binary["sub"], "args": [0, 1]},
                {"kind": "binary", "fn": binary["mul"], "args": [-1, -1]},
            ]
            mean_b = self.view(
                n,
                *_keep_broadcast(sizes, strides, xv.shape),
            )
            self.pointwise_op([{"view": self.view(x)}, {"view": mean_b}], dev, steps)
            self.ops.append({"reduce": {"fn": 0, "compute": "f32", "in": dev, "out": o, "dims": dims}})
            correction = n.args[2] if len(n.args) > 2 else n.kwargs.get("correction", 1)
            self._scale(o, 1.0 / max(count - correction, 0) if count > correction else float("nan"))
            return
        self.ops.append({"reduce": {"fn": _REDUCE[fn], "compute": "f32", "in": self.view(x), "out": o, "dims": dims}})
        if n.target == aten.mean.dim:
            self._scale(o, 1.0 / count)

    def _scale(self, o: int, factor: float):
        step = {"kind": "binary", "fn": _functions()["binary"]["mul"], "args": [0, 1]}
        self.pointwise_op([{"view": o}, {"scalar": _num(factor)}], o, [step])

    def temp(self, n, what: str, like: torch.Tensor) -> int:
        """A contiguous fp32 temporary of `like`'s shape in the arena, private to node n's op."""
        sizes = list(like.shape)
        return self.temp_view(n, what, sizes, attention._contiguous(sizes), "f32")

    def temp_view(self, n, what: str, sizes, strides, dtype: str) -> int:
        """A view of node n's arena temporary `what` (Planner.temps)."""
        width = {name: w for name, w in _DTYPES.values()}[dtype]
        entry = {"arg": self.s.arena_slot, "offset": self.s.arena[(n, what)] // width, "sizes": [int(x) for x in sizes]}
        entry["strides"] = [int(x) for x in strides]
        entry["dtype"] = dtype
        self.views.append(entry)
        return len(self.views) - 1

    @staticmethod
    def functions() -> dict:
        return _functions()

    def matmul(self, n):
        if n.target == aten.addmm.default:
            bias, a, b = n.args[:3]
        else:
            bias, (a, b) = None, n.args[:2]
        m = {"a": self.operand(a), "b": self.operand(b), "out": self.view(n), "compute": _DTYPES[_val(n).dtype][0]}
        if bias is not None:
            m["bias"] = self.view(bias)
            m["alpha"] = float(n.kwargs.get("alpha", 1))
            m["beta"] = float(n.kwargs.get("beta", 1))
        self.ops.append({"matmul": m})

    def operand(self, x) -> int:
        v = _val(x)
        if v.dim() >= 2 and v.shape[-1] > 1 and v.shape[-2] > 1 and v.stride(-1) != 1 and v.stride(-2) != 1:
            raise ValueError("a matmul operand with no unit-stride dim")  # planned away in _matmul_ok
        return self.view(x)

    def gather(self, n):
        """embedding: rows of the table chosen by the indices (indirect DMA); the table is seen once
        per leading index dim (stride 0) when the indices have several dims."""
        w, idx = n.args[0], n.args[1]
        wv, iv = _val(w), _val(idx)
        lead = list(iv.shape[:-1])
        table = self.view(w, lead + list(wv.shape), [0] * len(lead) + list(wv.stride()))
        self.ops.append({"index": {"kind": 0, "table": table, "index": self.view(idx), "rows": self.view(n)}})

    def scatter_add(self, n):
        """embedding_dense_backward: a zero table, then each row of grad added at its index
        (indirect DMA; repeated indices add up)."""
        grad, idx = n.args[0], n.args[1]
        gv, iv, out = _val(grad), _val(idx), _val(n)
        rows = iv.numel()
        self.fill(n, 0.0)
        self.ops.append(
            {
                "index": {
                    "kind": 2,
                    "table": self.view(n),
                    "index": self.view(idx, [rows], [1]),
                    "rows": self.view(grad, [rows, gv.shape[-1]], [gv.shape[-1], 1]),
                }
            }
        )
        assert out.shape[1] == gv.shape[-1]

    def _copy(self, src: int, dst: int, dtype: torch.dtype):
        self.pointwise_op([{"view": src}], dst, [{"kind": "copy", "args": [0]}], _DTYPES[dtype][0])

    def slice_scatter(self, n):
        """out = input with src written over out[..., start:end:step, ...] along dim."""
        x, src = n.args[0], n.args[1]
        out, sv = _val(n), _val(src)
        dim = (n.args[2] if len(n.args) > 2 else 0) % out.dim()
        start = n.args[3] if len(n.args) > 3 and n.args[3] is not None else 0
        step = n.args[5] if len(n.args) > 5 else 1
        start = start + out.shape[dim] if start < 0 else start
        strides = list(out.stride())
        strides[dim] *= step
        const = _constant_of(x) if self.p.kind.get(x) == "inline" else None
        if const is not None:
            self.fill(n, const)
        else:
            self._copy(self.view(x, *_broadcast(x, n)), self.view(n), out.dtype)
        if sv.numel():
            dst = self.view(n, list(sv.shape), strides, extra_offset=min(start, out.shape[dim]) * out.stride()[dim])
            self._copy(self.view(src), dst, out.dtype)

    def cat(self, n):
        tensors, dim = n.args[0], (n.args[1] if len(n.args) > 1 else 0)
        out = _val(n)
        dim %= out.dim()
        at = 0
        for x in tensors:
            xv = _val(x)
            if xv.numel() == 0:
                continue
            sizes = list(out.shape)
            sizes[dim] = xv.shape[dim]
            o = self.view(n, sizes, list(out.stride()), extra_offset=at * out.stride()[dim])
            self._copy(self.view(x), o, out.dtype)
            at += xv.shape[dim]


def _keep_broadcast(sizes, strides, full):
    """A keepdim reduction's output viewed at the input's full shape (reduced dims broadcast)."""
    return list(full), [0 if s == 1 and f != 1 else st for s, st, f in zip(sizes, strides, full, strict=True)]


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
