"""``torch.compile(model, backend="spyre")``: Dynamo hands each captured graph to AOTAutograd, which
traces forward and backward into core-ATen graphs; each of those is planned (lower.py) into fused
programs and eager steps, and run by an executor. Compiled programs are kept on disk (cache.py).

The backend is found through the ``torch_dynamo_backends`` entry point, so it works after a plain
``import torch`` without slowing that import down. See docs/design-compile.md.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import torch
import torch.fx as fx

from .. import _C, _decomposed, _nn_losses
from . import cache, lower, passes
from .nodes import cpu_refuses

logger = logging.getLogger("torch_spyre.compile")

# How many shapes one graph compiles for before it runs its ops one by one (TORCH_SPYRE_RECOMPILE_LIMIT).
DEFAULT_RECOMPILE_LIMIT = 8

_stats = {
    "graphs": 0,  # FX graphs handed to the backend (forward and backward count apart)
    "plans": 0,  # (graph, shapes) pairs planned
    "segments": 0,  # programs in those plans
    "eager_steps": 0,  # ops the plans run as eager kernels
    "compile_seconds": 0.0,  # spent planning and compiling
    "shape_recompiles": 0,  # plans made for a new shape of a graph already planned
    "shape_limit_hits": 0,  # calls past the recompile limit, run op by op
    "programs_not_compiled": 0,  # programs the compiler refused: their ops ran one by one
    "graphs_run_eagerly": 0,  # graphs the planner failed on: run op by op, with a warning
    "kv_repeats_folded": 0,  # attention ops that read unrepeated key heads (passes.fold_repeated_kv)
    "rotations_fused": 0,  # rotary embeddings' rotate_half cats made one elementwise op (passes)
    "empties_defined": 0,  # empty tensors zero-filled before a scatter keeps part of them (passes)
    "inputs_updated_in_place": 0,  # row updates of an input written into it, not a copy (passes)
    "row_reductions_fused": 0,  # reductions over a row computed inside their consumer's expression
}
_graph_ids = 0


def compile_stats(reset: bool = False) -> dict:
    """What the spyre torch.compile backend has done in this process: graphs, plans, programs,
    eager steps, compile time, recompilations per shape, and the program cache on disk (hits,
    misses). ``reset`` zeroes the counts after reading them."""
    out = dict(_stats)
    out.update({f"disk_{k}": v for k, v in cache.stats().items()})
    if reset:
        for k in _stats:
            _stats[k] = 0.0 if isinstance(_stats[k], float) else 0
        cache.reset_stats()
    return out


def launch_count(device=None) -> int:
    """Kernel launches queued on a device by this process so far (every launch looks its program up
    in the device's program cache): the figure that shows a compiled step's fusion."""
    from ..debug import program_cache_info

    s = program_cache_info(device)
    return s["hits"] + s["misses"]


def _recompile_limit() -> int:
    return int(os.environ.get("TORCH_SPYRE_RECOMPILE_LIMIT", DEFAULT_RECOMPILE_LIMIT))


def _debug_dir() -> Path | None:
    d = os.environ.get("TORCH_SPYRE_COMPILE_DEBUG")
    return Path(d) if d else None


def _shape_key(args) -> tuple:
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((tuple(a.shape), tuple(a.stride()), a.dtype, a.device.type))
        else:
            key.append(a if isinstance(a, (int, float, bool)) else type(a).__name__)
    return tuple(key)


def _is_static(gm: fx.GraphModule) -> bool:
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor):
            if any(not isinstance(s, int) for s in v.shape) or any(not isinstance(s, int) for s in v.stride()):
                return False
        elif isinstance(v, torch.SymInt):
            return False
    return True


def _concrete(gm: fx.GraphModule, args) -> fx.GraphModule:
    """gm with its nodes' fake values replaced by those of these concrete inputs (a dynamic
    graph's plan is made per shape)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    # The nodes' metadata is overwritten: a plan keeps what it needs of it, and the next shape
    # propagates again.
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fakes)
    return gm


class CompiledGraph:
    """One FX graph of the backend: its plans by input shapes, and the executor that runs one."""

    def __init__(self, gm: fx.GraphModule, name: str):
        self.gm, self.name = gm, name
        self.plans: dict = {}
        self.told_limit = False  # the shape-limit warning was given
        self.static = _is_static(gm)
        if self.static:
            self.plans[None] = self._make_plan(gm)

    def _make_plan(self, gm: fx.GraphModule):
        try:
            return self._plan(gm)
        except Exception:  # a planner bug must cost speed, not the user's run
            _stats["graphs_run_eagerly"] += 1
            logger.warning("%s: planning failed; the graph runs op by op", self.name, exc_info=True)
            return lambda args: _eager(gm, args)

    def _plan(self, gm: fx.GraphModule, row_fusion: bool = True) -> _Runner:
        t0 = time.perf_counter()
        planner = lower.Planner(gm, self.name, row_fusion)
        plan = planner.plan()
        steps = []
        for kind, s in plan.steps:
            if kind == "segment":
                s.key = cache.program_key(s.spec)
                try:
                    s.program = cache.program(s)
                except _C.Unsupported as e:  # a shape the lowerings do not take: its ops run eagerly
                    if planner.row_reductions.intersection(planner.segment_nodes(s)):
                        # Rows too long for the scratchpad with their steps: planned again, the
                        # reductions apart (each a pass of its own over memory).
                        logger.info(
                            "%s: program s%d does not compile with its row reductions fused (%s)", self.name, s.index, e
                        )
                        return self._plan(gm, row_fusion=False)
                    _stats["programs_not_compiled"] += 1
                    logger.warning(
                        "%s: program s%d does not compile (%s); its ops run one by one", self.name, s.index, e
                    )
                    steps.extend(("eager", n) for n in planner.segment_nodes(s))
                    continue
            steps.append((kind, s))
        plan.steps = steps
        segments = [s for kind, s in plan.steps if kind == "segment"]
        dt = time.perf_counter() - t0
        _stats["plans"] += 1
        _stats["row_reductions_fused"] += len(planner.row_reductions)
        _stats["segments"] += len(segments)
        _stats["eager_steps"] += sum(1 for kind, _ in plan.steps if kind == "eager")
        _stats["compile_seconds"] += dt
        logger.info(
            "%s: %d programs, %d eager steps, planned in %.3f s",
            self.name,
            len(segments),
            len(plan.steps) - len(segments),
            dt,
        )
        _dump(self.name if self.static else f"{self.name}_shape{len(self.plans)}", gm, plan)
        return _Runner(gm, plan)

    def __call__(self, args):
        if self.static:
            return self.plans[None](args)
        key = _shape_key(args)
        runner = self.plans.get(key)
        if runner is None:
            if len(self.plans) >= _recompile_limit():
                _stats["shape_limit_hits"] += 1
                if not self.told_limit:  # once per graph, not once per call
                    self.told_limit = True
                    logger.warning(
                        "%s: more than %d shapes; running its ops one by one (for every further shape)",
                        self.name,
                        _recompile_limit(),
                    )
                return _eager(self.gm, args)
            if self.plans:
                _stats["shape_recompiles"] += 1
            runner = self.plans[key] = self._make_plan(_concrete(self.gm, args))
        return runner(args)


def _eager(gm: fx.GraphModule, args):
    return fx.Interpreter(gm).run(*args)


class _Runner:
    """Runs a plan: eager steps call their op on spyre tensors, segments launch their program."""

    def __init__(self, gm: fx.GraphModule, plan: lower.Plan):
        self.plan = plan
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.output = next(n for n in gm.graph.nodes if n.op == "output")
        self.constants = {}
        self.unwritten = []  # results their op does not write (attention's seed): never read
        for n in gm.graph.nodes:
            if plan.kinds.get(n) == "static":  # a number an op with a tuple result returns, known now
                self.constants[n] = n.meta.get("val")
            if plan.kinds.get(n) == "unwritten":
                v = n.meta["val"]
                self.unwritten.append((n, tuple(v.shape), v.dtype, v.device))
            if n.op == "get_attr":
                obj = gm
                for part in n.target.split("."):
                    obj = getattr(obj, part)
                self.constants[n] = obj

    def __call__(self, args):
        env = dict(zip(self.placeholders, args, strict=True))
        env.update(self.constants)
        for n, shape, dtype, dev in self.unwritten:  # made now: the plan was made under fake tensors
            env[n] = torch.empty(shape, dtype=dtype, device=dev)

        def get(x):
            if not isinstance(x, fx.Node):
                return x
            if x not in env:  # a view (or a tuple of views) evaluated on demand, never a launch
                env[x] = call(x)
            return env[x]

        def call(n):
            return n.target(*fx.node.map_aggregate(n.args, get), **fx.node.map_aggregate(n.kwargs, get))

        try:
            return self._run(env, get, call)
        finally:
            # get and call refer to each other, and both to env: a cycle that would keep every
            # tensor of the call alive until Python's garbage collector runs. Breaking it frees
            # the intermediates as soon as the call returns.
            env.clear()
            get = call = None  # noqa: F841

    def _run(self, env: dict, get, call):
        device = None
        pending: list = []  # segments not yet queued: consecutive ones go in one launch sequence
        for kind, s in self.plan.steps:
            if kind == "eager":
                if pending:
                    _C._launch_graphs(pending)
                    pending = []
                env[s] = call(s)
                continue
            tensors: list = [None] * (len(s.inputs) + (1 if s.out_slot >= 0 else 0) + (1 if s.arena_slot >= 0 else 0))
            for slot, node in s.inputs:
                tensors[slot] = get(node)
                device = tensors[slot].device
            if device is None:
                device = torch.device("spyre", torch.spyre.current_device())
            if s.out_slot >= 0:
                block = tensors[s.out_slot] = torch.empty(s.out_bytes, dtype=torch.uint8, device=device)
                # Each a tensor of its own (not a view: autograd lets the user modify it in place)
                # over a storage of its own, its part of the block (as CPU's results share no
                # storage; the block is freed when its last part is).
                parts = _C._block_parts(block, s.out_parts)
                env.update(zip(s.outputs, parts, strict=True))
            if s.arena_slot >= 0:
                tensors[s.arena_slot] = torch.empty(s.arena_bytes, dtype=torch.uint8, device=device)
            pending.append((s.program, tensors, s.label))
        if pending:
            _C._launch_graphs(pending)
        return fx.node.map_aggregate(self.output.args[0], get)


def _place(s: lower.Segment, v) -> str | None:
    """Where segment s keeps value v (arena or out block), for the plan dump; None when it does not."""
    if v in s.arena:
        return f"{v.name} in the arena +{s.arena[v]}"
    return f"{v.name} in arg {s.out_slot} +{s.out_offsets[v]}" if v in s.out_offsets else None


def _dump(name: str, gm: fx.GraphModule, plan: lower.Plan) -> None:
    d = _debug_dir()
    if d is None:
        return
    d = d / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "graph.py").write_text(gm.code)
    lines = [f"# {name}: {len(plan.steps)} steps, {plan.launches()} launches"]
    for kind, s in plan.steps:
        if kind == "eager":
            lines.append(f"eager   {s.name} = {s.format_node()}")
            continue
        lines.append(f"program s{s.index} '{s.label}' key {s.key[:16]} arena {s.arena_bytes} B")
        for slot, node in s.inputs:
            lines.append(f"    arg {slot}: reads {node.name}")
        for node, (offset, _, sizes, _strides, dtype) in zip(s.outputs, s.out_parts, strict=True):
            lines.append(f"    arg {s.out_slot} +{offset}: writes {node.name} {list(sizes)} {dtype}")

        for n in s.nodes:
            fused = ", ".join(x.name for x in s.fused.get(n, []))
            values = (
                [x for x in s.fused.get(n, []) if plan.kinds.get(x) == "epilogue"] or [n]
                if isinstance(n.meta.get("val"), torch.Tensor)
                else [u for u in n.users if plan.kinds.get(u) == "part"]
            )
            places = [w for w in (_place(s, v) for v in values) if w]
            lines.append(f"    {n.name} ({n.target}) -> {', '.join(places)}" + (f"  fuses {fused}" if fused else ""))
        (d / f"s{s.index}.nodes.json").write_text(cache.pretty(s.spec))
        (d / f"s{s.index}.json").write_text(cache.pretty(_C._graph_ir(s.spec)))
        (d / f"s{s.index}.txt").write_text(cache.listing(s))
    (d / "plan.txt").write_text("\n".join(lines) + "\n")


def _graph_compiler(kind: str):
    def compile_fn(gm: fx.GraphModule, example_inputs):
        global _graph_ids
        _graph_ids += 1
        _stats["graphs"] += 1
        _stats["kv_repeats_folded"] += passes.fold_repeated_kv(gm)
        _stats["empties_defined"] += passes.define_scattered_empties(gm)
        _stats["rotations_fused"] += passes.fuse_rotate_half(gm)
        _stats["inputs_updated_in_place"] += passes.update_inputs_in_place(gm)
        cg = CompiledGraph(gm, f"graph{_graph_ids}_{kind}")

        def run(args):
            out = cg(args)
            args.clear()  # boxed calling convention: the caller's list may be freed as we go
            return out

        run._boxed_call = True
        return run

    return compile_fn


def _decompositions() -> dict:
    from torch._decomp import core_aten_decompositions, decomposition_table, get_decompositions

    table = dict(core_aten_decompositions())
    # The planner lowers embedding's backward to one scatter-add; decomposed, it is an index_put.
    table.pop(torch.ops.aten.embedding_dense_backward.default, None)
    # silu stays one op (the SFP has it): a matmul's epilogue can apply it (fusion.py).
    table.pop(torch.ops.aten.silu.default, None)
    # _unsafe_view stays: as a view its result would alias the tensor it reshapes, and a compiled
    # result made that way (kron's, matmul's) would be a view made inside AOTAutograd's autograd
    # Function, where CPU's is a tensor of its own. The planner treats it as the view it is.
    table.pop(torch.ops.aten._unsafe_view.default, None)
    # These decompositions end in a view of a tensor they made (roll's of its gather): AOTAutograd
    # then hands the caller a view made inside its autograd Function, which an in-place op under
    # autograd may not modify, where CPU's op returns a tensor of its own (fuzzer, seed 9 program
    # 124; the rest from a scan of op_db). Whole, each is its eager kernel's; stack is a cat.
    aten = torch.ops.aten
    for op in (aten.roll, aten.index_add, aten.index_copy, aten.rot90, aten.kron, aten.im2col, aten.max_unpool2d,
               aten.max_unpool3d):  # fmt: skip
        for overload in op.overloads():
            table.pop(getattr(op, overload), None)
    # A CompositeImplicit op with a spyre kernel of its own (matrix_rank's) is not decomposed by
    # functionalization, as autograd would not decompose it: core ATen's entry would then run its
    # C++ composite below functionalization, where an in-place step (matrix_rank of an empty
    # matrix fills its result) breaks AOTAutograd's graph. Such an op stays whole, as in eager.
    cia, spyre = torch._C.DispatchKey.CompositeImplicitAutograd, torch._C.DispatchKey.PrivateUse1
    for op in list(table):
        if op not in decomposition_table and all(
            torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), k) for k in (cia, spyre)
        ):
            del table[op]
    table[aten.stack.default] = _stack
    # round with decimals is its eager kernel's decomposition here too: whole, the planner would
    # take it for the library's round, which rounds to an integer (a scan of op_db).
    table[aten.round.decimals] = decomposition_table[aten.round.decimals]
    # logspace as its eager kernel computes it: the exponents' ends in the result's type first, as
    # CPU takes them (torch's reference does not: 10 ** 4.3 in bf16, a scan of op_db).
    # Integer linspace as its eager kernel computes it too: CPU's float64 points, which the float32
    # reference puts on the other side of an integer (linspace(-64, 74, 11)[5] in int64).
    for overload in ("default", "Tensor_Tensor", "Tensor_Scalar", "Scalar_Tensor"):
        table[getattr(aten.logspace, overload)] = _decomposed.OWN["logspace"]
        table[getattr(aten.linspace, overload)] = _decomposed.OWN["linspace"]
    # Norms and softmax become reductions and elementwise steps the planner fuses (core ATen
    # decomposes their backwards already); their eager kernels would be one launch each.
    table.update(
        get_decompositions(
            [
                torch.ops.aten.native_layer_norm,
                torch.ops.aten._softmax,
                torch.ops.aten._log_softmax,
                torch.ops.aten.var_mean,
            ]
        )
    )
    table[aten.native_layer_norm.default] = _layer_norm
    # A decomposition computes in whatever types it is given: where CPU's kernel refuses the types
    # of a call (lerp of integers, log_softmax of int32), the call stays whole instead, and its
    # eager kernel raises CPU's error when the graph runs (nodes.cpu_refuses), as CPU's
    # does. Only for calls whose types the check can judge alone, without their shapes: pointwise
    # ops and those along a dim.
    along_dim = {aten._softmax.default, aten._log_softmax.default, aten.softmax.int, aten.log_softmax.int}
    return {
        op: _type_checked(op, fn, op in along_dim)
        if op in along_dim or torch.Tag.pointwise in getattr(op, "tags", ())
        else fn
        for op, fn in table.items()
    }


def _layer_norm(x, normalized_shape, weight, bias, eps):
    """torch's decomposition of native_layer_norm, with the mean and rstd in the input's type, as
    CPU's kernel and the eager one give them (torch's keeps them so on CPU only; they are what the
    backward reads)."""
    from torch._decomp import decomposition_table

    out, mean, rstd = decomposition_table[torch.ops.aten.native_layer_norm.default](
        x, normalized_shape, weight, bias, eps
    )
    return out, mean.to(x.dtype), rstd.to(x.dtype)


def _stack(tensors, dim=0):
    """stack as one cat of the inputs each with the new dim: a tensor of its own, not a view."""
    dim = dim if dim >= 0 else dim + tensors[0].dim() + 1
    return torch.ops.aten.cat.default([t.unsqueeze(dim) for t in tensors], dim)


def _type_checked(op, decomposition, elements: bool):
    # NotImplemented is the decomposition table's "not decomposed": the call stays whole.
    def run(*args, **kwargs):
        if cpu_refuses(op, args, kwargs, elements):
            return NotImplemented
        try:
            return decomposition(*args, **kwargs)
        except ValueError:  # torch's reference refuses what CPU's kernel takes (addcmul of int by 0.5)
            return NotImplemented

    return run


def _multilabel_margin_loss_forward(x, target, reduction):
    """Its eager kernel's computation (float64 too); of an empty input torch's decomposition, its
    loss given CPU's shape."""
    if x.numel() != 0:
        return _nn_losses.multilabel_margin_loss(x, target, reduction)
    op = torch.ops.aten.multilabel_margin_loss_forward.default
    loss, is_target = op.py_kernels[torch._C.DispatchKey.Autograd](x, target, reduction)
    return loss.reshape(_nn_losses.multilabel_loss_shape(x, reduction)), is_target


def _trace_as_eager() -> None:
    """Ops torch decomposes above autograd while a compile traces (a Python kernel at the Autograd
    key, which Dynamo and AOTAutograd run for every device) into something other than its CPU
    kernel computes take their eager kernel's computation for spyre tensors instead: a kernel of
    ours at AutogradPrivateUse1, which the tracer prefers. multilabel_margin_loss of one sample
    without reduction is 0-dim on CPU; torch's decomposition made it [1] (a sweep of module_db),
    and in float64 it got the values wrong where a target list ends early (-1)."""
    op = torch.ops.aten.multilabel_margin_loss_forward.default
    key = torch._C.DispatchKey.AutogradPrivateUse1
    if key not in op.py_kernels:
        op.py_impl(key)(_multilabel_margin_loss_forward)


_trace_as_eager()


def spyre_backend(gm: fx.GraphModule, example_inputs):
    """The Dynamo backend: AOTAutograd over core ATen, each graph planned and compiled for spyre."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    from . import device_interface

    device_interface.register()
    return aot_autograd(
        fw_compiler=_graph_compiler("fw"),
        bw_compiler=_graph_compiler("bw"),
        inference_compiler=_graph_compiler("inf"),
        decompositions=_decompositions(),
        # Saves fewer activations for the backward (recomputing cheap elementwise ones): fewer
        # values leave the forward's programs, so fewer launch arguments and fewer programs.
        partition_fn=min_cut_rematerialization_partition,
        # An inference graph's updates of its inputs stay in it (a trailing copy_), where
        # passes.update_inputs_in_place can make them write the inputs themselves.
        keep_inference_input_mutations=True,
    )(gm, example_inputs)
