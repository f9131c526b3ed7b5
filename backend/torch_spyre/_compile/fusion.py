"""The planner's classification and fusion: what each node of a graph is (an input, a view, an op
of one of the op library's families, an eager step), what the library says of an op (does it take
the call, its temporaries, its compute type, which operands it reads), and which pointwise
producers become part of their consumer's expression instead of being written to memory.
"""

from __future__ import annotations

import json
import operator
from typing import NamedTuple

import torch
import torch.fx as fx

from .. import _C
from .nodes import (
    _DTYPES,
    _EMPTY,
    _TUPLE_VIEWS,
    _VIEWS,
    _arguments,
    _broadcast,
    _common,
    _constant_of,
    _is_tensor_node,
    _num,
    _scalar_arg,
    _val,
    catalogue,
    library_name,
    limits,
    node_cpu_refuses,
)

_NARROW = (torch.float16, torch.bfloat16)
# Reductions the op library fuses into an expression when they reduce its last dim (ops/pointwise.cpp
# row_reduction), and the conversions cheap enough to recompute in each expression that reads them.
_ROW_REDUCTIONS = {"sum", "prims::sum", "mean", "amax", "amin", "prims::var", "var"}
_CONVERSIONS = {"_to_copy", "prims::convert_element_type"}
# Matmuls whose epilogue applies an activation (ops/matmul.cpp activation_of), and those activations.
_EPILOGUE_MATMULS = {"mm", "addmm", "bmm", "baddbmm"}
_ACTIVATIONS = {"gelu", "relu", "silu", "sigmoid", "tanh"}
_RESHAPES = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
_RESIDUAL_FNS = {torch.ops.aten.add.Tensor: "add", torch.ops.aten.mul.Tensor: "mul"}


class Epilogue(NamedTuple):
    """What a matmul's epilogue applies (Fusion._epilogue_of)."""

    last: fx.Node  # the node whose value the matmul writes
    activation: str | None  # ops/matmul.cpp activation_of's name
    residual: fx.Node | None  # added to (or multiplying) the product or its activation
    residual_fn: str  # "add" or "mul"
    nodes: list  # the nodes the epilogue computes


class Fusion:
    """The planner's first pass, a base of lower.Planner: `classify` fills the state Planner's
    __init__ sets up (kind, root, inline_into, outputs, info, reads)."""

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
        if family in ("pointwise", "reduce"):
            # Types CPU refuses (abs of bool, argmax of bool) are refused as the eager kernel
            # refuses them: the node runs as an eager step, which raises CPU's error when the graph
            # runs. A reduction's stand-ins hold elements: CPU refuses to reduce an empty dim.
            if node_cpu_refuses(n, elements=family == "reduce"):
                return None
        spec, operands = self._probe(n, name)
        try:
            ((temp_bytes, compute, args),) = _C._examine_segment(spec)
        except _C.Unsupported:  # the library does not take this call: it runs eagerly (a Malformed raises)
            return None
        self.info[n] = (temp_bytes, compute)
        # What the lowering reads, and every tensor of a list argument (cat's empty inputs are read
        # by nothing, but the list names them all). Where an operand or the result is empty, the
        # lowering reads little or nothing, but its call still names every operand (a matmul's
        # shapes come from them: mm of [3, 0] and [0, 5] is a [3, 5] of zeros).
        listed = [y for v in n.args if isinstance(v, (list, tuple)) for y in v if _is_tensor_node(y)]
        tensors = [y for y in operands if _is_tensor_node(y)]
        empty = any(_val(y).numel() == 0 for y in tensors) or any(
            isinstance(x, torch.Tensor) and x.numel() == 0 for x in (v if isinstance(v, (tuple, list)) else [v])
        )
        reads = [operands[a] for a in args] + [y for y in listed if y in operands] + (tensors if empty else [])
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
                if not pointwise:
                    return {"view": view(x)}
                # A one-element tensor, however broadcast: CPU's mul, div and floor_divide read it
                # as a scalar (ops::exact_operand).
                one = {"one_element": True} if _val(x).numel() == 1 else {}
                return {"view": view(x, *_broadcast(x, root)), **one}
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
        """The memory-owning values node n's op writes: n (or the activation its epilogue applies),
        or the parts of a tuple result."""
        if n in self.epilogue:
            return [self.epilogue[n].last]
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
        type (fp16 and bf16 compute in fp32 inside an expression). An fp16 or bf16 value is rounded
        inside the expression as its store would round it (ops/pointwise.cpp fused_ref)."""
        widened = {"f16": "f32", "bf16": "f32"}
        a, b = self._compute(n), self._compute(u)
        return a is not None and b is not None and widened.get(a, a) == widened.get(b, b)

    def _row_nodes(self, n) -> list | None:
        """For a reduction n over the last dim of its input (shape S, fp32), the nodes that carry its
        value to pointwise consumers of shape S: at most one view to S's row shape (S with a last
        dim of 1), then pointwise nodes of that shape, every reader of each on the way one of them
        or a consumer. None when its value goes anywhere else: then n is not fused."""
        if self.kind.get(n) != "reduce" or library_name(n.target) not in _ROW_REDUCTIONS:
            return None
        x = n.args[0] if n.args else None
        if not _is_tensor_node(x) or _val(n).dtype != torch.float32:  # the library names no compute type
            return None
        shape = tuple(_val(x).shape)
        dims = _arguments(n).get("dims" if library_name(n.target).startswith("prims::") else "dim")
        if not shape or not isinstance(dims, (list, tuple)) or len(dims) != 1 or dims[0] % len(shape) != len(shape) - 1:
            return None
        row = (*shape[:-1], 1)
        if tuple(_val(n).shape) not in (row, shape[:-1]):
            return None
        nodes, frontier = [n], [n]  # frontier: nodes whose readers are still to be looked at
        while frontier:
            v = frontier.pop()
            if v in self.outputs or not v.users:
                return None
            for u in v.users:
                if self.kind.get(u) == "view" and v is n and tuple(_val(u).shape) == row:
                    frontier.append(u)  # keepdim's view: not a step
                    continue
                if self.kind.get(u) != "pointwise" or _constant_of(u) is not None:
                    return None
                if self._compute(u) not in ("f32", "f16", "bf16"):
                    return None
                if self.kind.get(v) == "pointwise" and not self._fusable(v, u):
                    return None
                if tuple(_val(u).shape) == row:
                    if u not in nodes:
                        nodes.append(u)
                        frontier.append(u)
                elif tuple(_val(u).shape) != shape:
                    return None
        return nodes

    def _fuse_row_reductions(self):
        """Reductions over a row whose value only pointwise nodes of the row's shape use (through
        per-row steps: a layer norm's mean and variance, an RMS norm's mean square, a softmax's
        max and sum written out) become steps of those nodes' expressions: the rows stay in the
        scratchpad, and nothing of the reduction is written to memory. A value read by several
        consumers is computed in each (in one expression, once: the op library shares a step)."""
        if not self.row_fusion:
            return
        for n in self.nodes:
            nodes = self._row_nodes(n)
            if nodes is None:
                continue
            self.row_reductions.add(n)
            for a in nodes:
                self.kind[a] = "inline"
                self.inline_into.setdefault(a, next(iter(a.users)))
                self.row_valued.add(a)

    def _recomputed(self, n) -> bool:
        """Whether conversion n of a tensor is recomputed in every expression that reads it, rather
        than written to memory: every reader is a fused reduction or a pointwise node of its shape."""
        if library_name(n.target) not in _CONVERSIONS or n in self.outputs or len(n.users) < 2:
            return False
        if _val(n).dtype in _NARROW or any(self.kind.get(x) == "inline" for x in n.all_input_nodes):
            return False
        for u in n.users:
            if u in self.row_reductions:
                continue
            if self.kind.get(u) != "pointwise" or _val(u).shape != _val(n).shape or not self._fusable(n, u):
                return False
        return True

    def _only_reader(self, v):
        """v's only reader, seen through one reshape of v; None when v is read elsewhere too."""
        if v in self.outputs or len(v.users) != 1:
            return None
        (u,) = v.users
        if self.kind.get(u) == "view":
            if u.target not in _RESHAPES or u in self.outputs or len(u.users) != 1:
                return None
            (u,) = u.users
        return u

    def _epilogue_of(self, n) -> Epilogue | None:
        """What matmul n's epilogue can apply. An activation is gelu (either form), relu, silu,
        sigmoid or tanh of the product; a residual is added to the product (or its activation) by
        `add`, or multiplies it by `mul` (a gated MLP's gate times its up projection). Each is the
        only reader of what it reads (through a reshape), and every value is contiguous, in the
        product's type. None when there is none."""
        if self.kind.get(n) != "matmul" or library_name(n.target) not in _EPILOGUE_MATMULS:
            return None
        mv = _val(n)

        def like(v) -> bool:  # the product's layout and type
            x = _val(v)
            return x.dtype == mv.dtype and x.numel() == mv.numel() and x.is_contiguous() and not x.storage_offset()

        if not like(n):
            return None
        last, name, residual, chain = n, None, None, []
        u = self._only_reader(n)
        if u is not None and self.kind.get(u) == "pointwise" and library_name(u.target) in _ACTIVATIONS and like(u):
            name = library_name(u.target)
            if name == "gelu" and _arguments(u).get("approximate", "none") == "tanh":
                name = "gelu_tanh"
            last = u
            chain.append(u)
            u = self._only_reader(u)
        fn = "add"
        if u is not None and self.kind.get(u) == "pointwise" and u.target in _RESIDUAL_FNS and like(u):
            fn = _RESIDUAL_FNS[u.target]
            args = _arguments(u)
            pair = (args["self"], args["other"])
            mine = [
                x for x in pair if x is last or isinstance(x, fx.Node) and x.target in _RESHAPES and x.args[0] is last
            ]
            others = [x for x in pair if x not in mine]
            if args.get("alpha", 1) == 1 and len(mine) == 1 and len(others) == 1:
                (other,) = others
                o = _val(other) if _is_tensor_node(other) else None
                # Made before the matmul (its epilogue reads it), in the product's layout and type.
                made = self.order.get(self.root.get(other, other), len(self.order)) < self.order[n]
                if made and o.shape == _val(u).shape and o.dtype == mv.dtype and o.is_contiguous():
                    last, residual = u, other
                    chain.append(u)
        return None if last is n else Epilogue(last, name, residual, fn, chain)

    def _fuse_epilogues(self):
        """An activation, a residual add, or both, that only a matmul's product feeds are applied
        in the matmul's epilogue before its result is stored: the matmul writes the last one's
        value, and the product never goes to memory."""
        for n in self.nodes:
            found = self._epilogue_of(n)
            if found is None:
                continue
            self.epilogue[n] = found
            for u in found.nodes:
                self.kind[u] = "epilogue"
            self.root[n] = found.last  # the product's memory is the last value's
            if found.residual is not None:
                self.reads[n] = [*self.reads.get(n, []), found.residual]

    def _choose_inlining(self):
        """A pointwise node with one user, a pointwise node of its shape that reads it directly,
        becomes part of that user's expression: it is never written to memory."""
        self._fuse_epilogues()
        self._fuse_row_reductions()
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
            if k == "pointwise" and self._recomputed(n):
                self.kind[n] = "inline"
                self.inline_into[n] = next(iter(n.users))
                continue
            if k != "pointwise" or n in self.outputs or len(n.users) != 1:
                continue
            (u,) = n.users
            # Into a pointwise reader of its shape, or into a fused row reduction (a mean of squares).
            if u in self.row_reductions:  # which reduces in fp32
                if self._compute(n) not in ("f32", "f16", "bf16"):
                    continue
            elif self.kind.get(u) != "pointwise" or _val(u).shape != _val(n).shape or not self._fusable(n, u):
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
                for x in map(self._fused_through_view, n.all_input_nodes):
                    if x in self.inline_into:
                        parts[x] = leaves[x]
                    elif self.kind.get(x) != "inline":
                        own.add(x)
                total = own.union(*parts.values()) if parts else own
                if len(total) <= most or not parts:
                    leaves[n] = total
                    break
                # Never a step of a fused row reduction's chain: its value is per row.
                movable = [x for x in parts if x not in self.row_valued]
                if not movable:
                    leaves[n] = total
                    break
                big = max(movable, key=lambda x: len(parts[x]))
                del self.inline_into[big]
                self.kind[big] = "pointwise"
