"""The conformance driver: PyTorch's own op database (OpInfo) and module database (ModuleInfo), run on
spyre and on CPU and compared, as PyTorch's TestCommon and module tests check a device (our own
checks, written from what those test, not their code):

  compare    each sample's result against CPU's: values, dtype, shape, and for an op whose CPU
             result is a view of its input, a view of the spyre input with the same strides
  noncontig  the same sample made non-contiguous gives the contiguous sample's result
  variants   the method and in-place variants give the function's result (in place: in the input)
  out        out= of the result's dtype gives the result; out= of a dtype CPU refuses raises here too
  backward   float32: the gradients of every input that requires one, against CPU's

Each check of a sample has an outcome: "pass", "fallback" (it needs the CPU fallback: it raised the
fallback's NotImplementedError under TORCH_SPYRE_CPU_FALLBACK=error), "mismatch" (a wrong answer),
"error" (spyre raised where CPU did not), or "skip" (CPU itself raised, or nothing to check).

scripts/conformance.py runs the whole database (in worker processes, so that a crash is recorded,
not fatal) and writes the observed classification; test_conformance.py checks a fixed sample of it
against the reviewed file conformance_ops.json.
"""

from __future__ import annotations

import contextlib
import itertools

import torch
import torch_spyre
from torch.nn.modules.lazy import LazyModuleMixin
from torch.utils._pytree import tree_leaves, tree_map

S = "spyre"
DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
    "complex64": torch.complex64,  # stored on the card (views, copies); its arithmetic falls back
}
# Ops whose result is random or undefined: only shapes and dtypes are compared.
UNDEFINED = ("empty", "new_empty", "empty_like", "empty_strided", "new_empty_strided", "empty_permuted")
RANDOM = (
    "bernoulli", "multinomial", "normal", "rand", "randn", "randint", "randperm", "uniform", "exponential",
    "geometric", "cauchy", "log_normal", "dropout", "rrelu", "nn.functional.dropout", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.rrelu", "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "cuda.", "torch._", "sparse.", "to_sparse", "_segment_reduce", "jiterator", "_refs",
    "svd_lowrank", "pca_lowrank",  # random projections: the device's random stream is not CPU's
)  # fmt: skip


def primary_dtype(op) -> str | None:
    """The dtype an op is classified in: float32 when CPU has it, else the first of DTYPES it has."""
    supported = op.supported_dtypes("cpu")
    return next((name for name, dt in DTYPES.items() if dt in supported), None)


def full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def tolerance(dtype: torch.dtype) -> dict:
    """What CPU and spyre may differ by: fp32 sums in another order, fp16 and bf16 rounded once (the
    device computes in fp32) where CPU rounds some intermediates."""
    return {
        torch.float32: {"rtol": 1e-4, "atol": 1e-5},
        torch.float16: {"rtol": 2e-2, "atol": 2e-3},
        torch.bfloat16: {"rtol": 2e-2, "atol": 1e-2},
        torch.complex64: {"rtol": 1e-4, "atol": 1e-5},
    }.get(dtype, {"rtol": 0, "atol": 0})


class Mismatch(AssertionError):
    pass


# Ops whose tensor arguments torch wants on the CPU, and ops that read their input's storage
# (whose non-contiguous sample is another computation).
HOST_ARGS = ("tensor_split",)
STORAGE = ("as_strided", "as_strided_copy", "as_strided_scatter")


def _to(x, device):
    """x on `device` with the same storage layout (size, offset, strides), so that views and ops
    that read the storage see what CPU sees; a leaf that requires grad is moved whole."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.requires_grad or x.layout != torch.strided or device == "cpu":
        y = x.detach().to(device)
        return y.requires_grad_(x.requires_grad) if x.is_floating_point() or x.is_complex() else y
    n = x.untyped_storage().nbytes() // x.element_size()
    flat = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage(), 0, (n,), (1,)).to(device)
    return flat.as_strided(x.shape, x.stride(), x.storage_offset())


def on(sample, device, op_name: str = ""):
    keep = op_name.startswith(HOST_ARGS)
    moved = sample.transform(lambda t: t if keep and t is not sample.input else _to(t, device))
    if "device" in moved.kwargs:  # a factory function makes its result here
        moved.kwargs["device"] = device
    return moved


def random_sample(sample) -> bool:
    """A sample whose result is drawn at random (dropout at work)."""
    kw = sample.kwargs
    return kw.get("dropout_p", 0) > 0 or kw.get("training") is True and "p" not in kw


def _leaves(sample) -> list:
    out = []
    for x in itertools.chain([sample.input], sample.args, sample.kwargs.values()):
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out.extend(y for y in x if isinstance(y, torch.Tensor))
    return out


def compare(got, want, name: str, check_values: bool = True, where: str = "result", slack: float = 1.0):
    """Raises Mismatch naming what differs between a spyre result and CPU's (within `slack` times the
    dtype's tolerance)."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise Mismatch(f"{where}: a {type(got).__name__}, CPU gives a tensor")
        if got.dtype != want.dtype:
            raise Mismatch(f"{where}: dtype {got.dtype}, CPU {want.dtype}")
        if got.shape != want.shape:
            raise Mismatch(f"{where}: shape {tuple(got.shape)}, CPU {tuple(want.shape)}")
        if not check_values or want.layout != torch.strided:
            return
        g = got.detach().cpu()
        w = want.detach()
        if w.is_complex() or g.is_complex():
            g, w = torch.view_as_real(g.resolve_conj()), torch.view_as_real(w.resolve_conj())
        try:
            tol = {k: v * slack for k, v in tolerance(want.dtype).items()}
            torch.testing.assert_close(g, w, equal_nan=True, **tol)
        except AssertionError as e:
            raise Mismatch(f"{where}: {str(e).splitlines()[0]} {' '.join(str(e).splitlines()[1:4])}") from None
    elif isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            raise Mismatch(f"{where}: {type(got).__name__} of {len(got) if hasattr(got, '__len__') else '?'}")
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            compare(a, b, name, check_values, f"{where}[{i}]", slack)
    elif isinstance(want, (int, float, bool, complex)):
        if isinstance(got, torch.Tensor):
            got = got.item()
        if want != got and not (want != want and got != got):
            if not (isinstance(want, float) and abs(want - got) <= 1e-5 + 1e-4 * abs(want)):
                raise Mismatch(f"{where}: {got}, CPU {want}")
    elif want is None:
        if got is not None:
            raise Mismatch(f"{where}: {type(got).__name__}, CPU None")


def check_aliasing(got, got_in, want, want_in, where="result"):
    """A result that is a view of CPU's input must be a view of the spyre input, strided alike."""
    if not (isinstance(want, torch.Tensor) and isinstance(want_in, torch.Tensor)):
        return
    if want.layout != torch.strided or want_in.layout != torch.strided or want.numel() == 0:
        return
    cpu_view = want.untyped_storage().data_ptr() == want_in.untyped_storage().data_ptr()
    if not cpu_view:
        return
    if not isinstance(got, torch.Tensor) or got.untyped_storage().data_ptr() != got_in.untyped_storage().data_ptr():
        raise Mismatch(f"{where}: CPU returns a view of its input, spyre a copy")
    if got.stride() != want.stride() or got.storage_offset() != want.storage_offset():
        raise Mismatch(f"{where}: a view with strides {got.stride()} offset {got.storage_offset()}, CPU "
                       f"{want.stride()} {want.storage_offset()}")  # fmt: skip


def _is_fallback_refusal(e: BaseException) -> bool:
    return isinstance(e, NotImplementedError) and "CPU fallback is disabled" in str(e)


@contextlib.contextmanager
def fallback(mode: str):
    old = torch_spyre.get_cpu_fallback()
    torch_spyre.set_cpu_fallback(mode)
    try:
        yield
    finally:
        torch_spyre.set_cpu_fallback(old)


def _call(fn, sample):
    return fn(sample.input, *sample.args, **sample.kwargs)


def _outcome(run) -> tuple[str, str]:
    """Runs a check: ("pass" | "fallback" | "mismatch" | "error" | "skip", detail)."""
    try:
        run()
        return "pass", ""
    except _Skip as e:
        return "skip", str(e)
    except Mismatch as e:
        return "mismatch", str(e)[:300]
    except Exception as e:  # noqa: BLE001 - every error is an outcome to record
        if _is_fallback_refusal(e):
            return "fallback", str(e).split("'")[1] if "'" in str(e) else str(e)[:100]
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0][:250] if str(e) else ''}"


class _Skip(Exception):
    pass


def _cpu(fn, sample):
    try:
        return _call(fn, sample)
    except Exception as e:  # noqa: BLE001 - CPU refusing a sample is a skip
        raise _Skip(f"CPU raises {type(e).__name__}") from e


def _widened(sample):
    """The sample with its floating tensors in float64 (requires_grad kept): the exact answer."""
    return sample.transform(
        lambda t: t.detach().double().requires_grad_(t.requires_grad)
        if isinstance(t, torch.Tensor) and t.is_floating_point() else t
    )  # fmt: skip


NEARER = (torch.float32, torch.bfloat16, torch.float16)  # the types compare_or_closer judges by the exact answer


def compare_or_closer(got, want, name: str, fn, sample, where: str = "result", check_values: bool = True):
    """compare(), but a floating result that differs from CPU's is accepted where it is nearer the
    float64 answer than CPU's own: polygamma near a pole in float32, where CPU's float kernel loses
    digits; a bf16 or fp16 result the device rounds once where CPU rounds intermediates (addr,
    cross)."""
    try:
        compare(got, want, name, check_values, where)
    except Mismatch as mismatch:
        try:
            exact = _call(fn, _widened(sample))
        except Exception:  # noqa: BLE001
            raise mismatch from None
        trees = [r if isinstance(r, (tuple, list)) else [r] for r in (got, want, exact)]
        if len({len(t) for t in trees}) != 1 or not all(
            isinstance(g, torch.Tensor) and isinstance(w, torch.Tensor) and isinstance(x, torch.Tensor)
            and w.dtype in NEARER and (g.dtype, g.shape) == (w.dtype, w.shape) and _closer_than_cpu(g, w, x)
            for g, w, x in zip(*trees, strict=True)
        ):  # fmt: skip
            raise


def _gauge_free(fn, sample):
    """fn with the sample's output_process_fn_grad applied to its result, as PyTorch's TestCommon
    compares two implementations: a result that is not unique (the signs of singular vectors)
    is compared through what is (their absolute values, U @ Vh)."""
    return lambda *args, **kwargs: sample.output_process_fn_grad(fn(*args, **kwargs))


def check_compare(op, sample):
    name = full_name(op)
    fn = _gauge_free(op.op, sample)
    want = _cpu(op.op, sample)
    dev = on(sample, S, name)
    got = _call(op.op, dev)
    check_aliasing(got, dev.input, want, sample.input)
    got, want = sample.output_process_fn_grad(got), sample.output_process_fn_grad(want)
    compare_or_closer(got, want, name, fn, sample, check_values=not name.startswith(UNDEFINED))


def check_noncontig(op, sample):
    name = full_name(op)
    if name.startswith(STORAGE):
        raise _Skip("reads its input's storage")
    cpu = sample.noncontiguous()
    fn = _gauge_free(op.op, cpu)
    want = _cpu(fn, cpu)
    nc = on(cpu, S, name)
    compare_or_closer(_call(fn, nc), want, name, fn, cpu, where="non-contiguous",
                      check_values=not name.startswith(UNDEFINED))  # fmt: skip


def check_variants(op, sample):
    name = full_name(op)
    ran = False
    method = op.method_variant
    if method is not None and not name.startswith(UNDEFINED):
        method = _gauge_free(method, sample)
        want = _cpu(method, sample)
        compare_or_closer(_call(method, on(sample, S, name)), want, name, method, sample, where="method")
        ran = True
    inplace = op.inplace_variant
    if inplace is not None and isinstance(sample.input, torch.Tensor) and not name.startswith(UNDEFINED):
        cpu = sample.transform(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t)
        try:
            want = _call(inplace, cpu)
        except Exception as e:  # noqa: BLE001
            raise _Skip(f"CPU raises {type(e).__name__} in place") from e
        dev = sample.transform(lambda t: t.detach().clone().to(S) if isinstance(t, torch.Tensor) else t)
        got = _call(inplace, dev)
        compare(dev.input, cpu.input, name, where="in place (the input)")
        if isinstance(want, torch.Tensor) and want is cpu.input and got is not dev.input:
            raise Mismatch("in place: returns another tensor than its input")
        ran = True
    if not ran:
        raise _Skip("no variants")


def check_out(op, sample):
    if not op.supports_out:
        raise _Skip("no out=")
    name = full_name(op)
    want = _cpu(op.op, sample)
    if not isinstance(want, torch.Tensor) or name.startswith(UNDEFINED):
        raise _Skip("out= of a tuple")
    dev = on(sample, S, name)
    try:  # CPU's out= result (which may differ from its functional one)
        cpu_out = torch.empty(0, dtype=want.dtype)
        op.op(sample.input, *sample.args, out=cpu_out, **sample.kwargs)
        want = cpu_out
    except Exception as e:  # noqa: BLE001
        raise _Skip(f"CPU's out= raises {type(e).__name__}") from e
    out = torch.empty(0, dtype=want.dtype, device=S)
    res = op.op(dev.input, *dev.args, out=out, **dev.kwargs)
    compare(out, want, name, where="out=")
    if res is not out:
        raise Mismatch("out=: returns another tensor than out")
    # A dtype CPU cannot safely cast the result to must raise on spyre too.
    wrong = torch.int64 if want.is_floating_point() else (torch.bool if want.dtype != torch.bool else None)
    if wrong is None:
        return
    try:
        op.op(sample.input, *sample.args, out=torch.empty(0, dtype=wrong), **sample.kwargs)
        cpu_raises = False
    except Exception:  # noqa: BLE001
        cpu_raises = True
    try:
        op.op(dev.input, *dev.args, out=torch.empty(0, dtype=wrong, device=S), **dev.kwargs)
        spyre_raises = False
    except Exception as e:  # noqa: BLE001
        if _is_fallback_refusal(e):
            raise
        spyre_raises = True
    if cpu_raises and not spyre_raises:
        raise Mismatch(f"out= of {wrong}: CPU raises, spyre writes it")


def check_backward(op, sample):
    if not op.supports_autograd:
        raise _Skip("no autograd")
    leaves = [t for t in _leaves(sample) if t.requires_grad]
    if not leaves:
        raise _Skip("nothing requires grad")
    name = full_name(op)
    cpu = sample.transform(
        lambda t: t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
    )
    fn = _gauge_free(op.op, sample)
    want = _cpu(fn, cpu)
    outs = [t for t in (want if isinstance(want, (tuple, list)) else [want]) if isinstance(t, torch.Tensor)]
    outs = [t for t in outs if t.requires_grad and t.is_floating_point()]
    if not outs:
        raise _Skip("no differentiable output")
    g = torch.Generator().manual_seed(7)
    weights = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in outs]
    cpu_leaves = [t for t in _leaves(cpu) if t.requires_grad]
    try:
        want_grads = torch.autograd.grad(outs, cpu_leaves, weights, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        raise _Skip(f"CPU backward raises {type(e).__name__}") from e
    dev = on(sample, S, name)
    got = _call(fn, dev)
    gouts = [t for t in (got if isinstance(got, (tuple, list)) else [got]) if isinstance(t, torch.Tensor)]
    gouts = [t for t in gouts if t.requires_grad and t.is_floating_point()]
    if len(gouts) != len(outs):
        raise Mismatch(f"backward: {len(gouts)} differentiable results, CPU {len(outs)}")
    dev_leaves = [t for t in _leaves(dev) if t.requires_grad]
    got_grads = torch.autograd.grad(gouts, dev_leaves, [w.to(o.device) for w, o in zip(weights, gouts, strict=True)],
                                    allow_unused=True)  # fmt: skip
    exact = None
    for i, (a, b) in enumerate(zip(got_grads, want_grads, strict=True)):
        if b is None:
            continue
        if a is None:
            raise Mismatch(f"backward: no gradient for input {i}")
        try:
            compare(a, b, name, where=f"gradient of input {i}")
        except Mismatch:
            exact = _float64_grads(op, sample, weights) if exact is None else exact
            if exact is None or not _closer_than_cpu(a, b, exact[i]):
                raise


def _float64_grads(op, sample, weights):
    """The gradients of a float32 sample computed in float64 on the CPU (None if CPU cannot)."""
    wide = _widened(sample)
    try:
        outs = _call(_gauge_free(op.op, sample), wide)
        outs = [t for t in (outs if isinstance(outs, (tuple, list)) else [outs]) if isinstance(t, torch.Tensor)]
        outs = [t for t in outs if t.requires_grad and t.is_floating_point()]
        leaves = [t for t in _leaves(wide) if t.requires_grad]
        return torch.autograd.grad(outs, leaves, [w.double() for w in weights], allow_unused=True)
    except Exception:  # noqa: BLE001
        return None


def _closer_than_cpu(got, want, exact) -> bool:
    """A gradient that differs from CPU's float32 one but is nearer the float64 answer everywhere
    (CPU's own rounding is the difference: layer norm of one element)."""
    if exact is None:
        return False
    g, w, x = got.detach().cpu().double(), want.detach().double(), exact.detach()
    tol = tolerance(want.dtype)
    return bool(((g - x).abs() <= (w - x).abs() + tol["atol"] + tol["rtol"] * x.abs()).all())


CHECKS = {
    "compare": check_compare,
    "noncontig": check_noncontig,
    "variants": check_variants,
    "out": check_out,
    "backward": check_backward,
}


def samples(op, dtype: torch.dtype, limit: int | None, requires_grad: bool = False):
    try:
        it = op.sample_inputs("cpu", dtype, requires_grad=requires_grad)
        yield from itertools.islice(it, limit)
    except Exception:  # noqa: BLE001 - an OpInfo that cannot make samples has nothing to check
        return


def run_op(op, dtype_name: str, limit: int | None, mode: str) -> dict:
    """Every check over the first `limit` samples of `op` in `dtype`, with the fallback in `mode`:
    {check: [(outcome, detail), ...]}."""
    dtype = DTYPES[dtype_name]
    out: dict = {}
    for check, fn in CHECKS.items():
        grad = check == "backward"
        if grad and dtype != torch.float32:
            continue
        results = []
        for sample in samples(op, dtype, limit, requires_grad=grad and op.supports_autograd):
            if random_sample(sample):
                results.append(("skip", "random"))
                continue
            with fallback(mode):
                results.append(_outcome(lambda fn=fn, sample=sample: fn(op, sample)))
        out[check] = results
    return out


def summarise(results: dict) -> str:
    """One word for an op's results: the worst outcome among its checks."""
    seen = {outcome for rs in results.values() for outcome, _ in rs}
    for word in ("mismatch", "error", "fallback", "pass"):
        if word in seen:
            return word
    return "skip"


def ops(names=None) -> list:
    from torch.testing._internal.common_methods_invocations import op_db

    chosen = []
    for op in op_db:
        name = full_name(op)
        if name.startswith(RANDOM) or (names is not None and name not in names):
            continue
        chosen.append(op)
    return chosen


# ---- modules ---------------------------------------------------------------------------------------


def modules(names=None) -> list:
    from torch.testing._internal.common_modules import module_db

    return [m for m in module_db if names is None or m.name in names]


def check_module(info, module_input, training: bool, compiled: bool = False):
    """A module built from one constructor input: its forward and the gradients of its parameters
    and inputs, on spyre (eagerly, or through torch.compile with the spyre backend) against a copy
    on CPU."""
    import copy

    args, kwargs = module_input.constructor_input.args, dict(module_input.constructor_input.kwargs)
    # A fractional pooling is given its draws (so both sides pool alike), in float64 in module_db.
    samples = kwargs.get("_random_samples")
    if isinstance(samples, torch.Tensor):
        kwargs["_random_samples"] = samples.to(torch.float32)
    torch.manual_seed(0)
    try:
        cpu_module = info.module_cls(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        raise _Skip(f"CPU construction raises {type(e).__name__}") from e
    fin = module_input.forward_input
    cpu_in = tree_map(lambda a: _to(a, "cpu"), list(fin.args))
    cpu_kw = tree_map(lambda a: _to(a, "cpu"), dict(fin.kwargs))
    if isinstance(cpu_module, LazyModuleMixin) and cpu_module.has_uninitialized_params():
        cpu_module._infer_parameters(cpu_module, tuple(cpu_in), cpu_kw)  # same weights on both sides
    dev_module = copy.deepcopy(cpu_module).to(S)
    if isinstance(samples, torch.Tensor):  # a plain attribute, which Module.to leaves behind
        dev_module._random_samples = dev_module._random_samples.to(S)
    cpu_module.train(training), dev_module.train(training)
    try:
        want = cpu_module(*cpu_in, **cpu_kw)
    except Exception as e:  # noqa: BLE001
        raise _Skip(f"CPU forward raises {type(e).__name__}") from e
    dev_in = tree_map(lambda a: _to(a, S), list(fin.args))
    dev_kw = tree_map(lambda a: _to(a, S), dict(fin.kwargs))
    if compiled:
        torch._dynamo.reset()
    forward = torch.compile(dev_module, backend="spyre", dynamic=False) if compiled else dev_module
    got = forward(*dev_in, **dev_kw)
    compare(got, want, info.name, where="forward")
    outs = [t for t in tree_leaves(want) if isinstance(t, torch.Tensor)]
    douts = [t for t in tree_leaves(got) if isinstance(t, torch.Tensor)]
    pairs = [(a, b) for a, b in zip(douts, outs, strict=False) if b.requires_grad and b.is_floating_point()]
    if not pairs:
        return
    g = torch.Generator().manual_seed(7)
    weights = [torch.randn(b.shape, generator=g, dtype=b.dtype) for _, b in pairs]
    cpu_leaves = [t for t in tree_leaves(cpu_in) if isinstance(t, torch.Tensor) and t.requires_grad] + [
        p for p in cpu_module.parameters() if p.requires_grad
    ]
    dev_leaves = [t for t in tree_leaves(dev_in) if isinstance(t, torch.Tensor) and t.requires_grad] + [
        p for p in dev_module.parameters() if p.requires_grad
    ]
    want_g = torch.autograd.grad([b for _, b in pairs], cpu_leaves, weights, allow_unused=True)
    got_g = torch.autograd.grad([a for a, _ in pairs], dev_leaves, [w.to(S) for w in weights], allow_unused=True)
    for i, (a, b) in enumerate(zip(got_g, want_g, strict=True)):
        if b is not None:
            if a is None:
                raise Mismatch(f"backward: no gradient for leaf {i}")
            # A module's gradient sums over several reductions, each in another fp32 order.
            compare(a, b, info.name, where=f"gradient of leaf {i}", slack=10)


def run_module(info, mode: str, limit: int | None = None, compiled: bool = False) -> list:
    """(outcome, detail) per module input, training and eval, in float32."""
    results = []
    for training in (True, False):
        try:
            inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                             training=training)  # fmt: skip
        except Exception:  # noqa: BLE001
            continue
        for mi in itertools.islice(inputs, limit):
            with fallback(mode):
                check = lambda mi=mi, training=training: check_module(info, mi, training, compiled)  # noqa: E731
                results.append(_outcome(check))
    return results
