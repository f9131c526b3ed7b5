"""The planner's classification and fusion: what each node of a graph is (an input, a view, an op
of one of the op library's families, an eager step), what the library says of an op (does it take
the call, its temporaries, its compute type, which operands it reads), and which pointwise
producers become part of their consumer's expression instead of being written to memory.
"""

from __future__ import annotations

import json
import operator

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
)

_NARROW = (torch.float16, torch.bfloat16)


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
