"""How the differential fuzzer (fuzz/tensor_programs.py) runs a program: each line on CPU and on
spyre, every live value compared after every line (values, dtype, shape, the strides of views,
aliasing), and the checks that tell a real difference from one CPU's own rounding or layout
explains.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys


def _simulator_out_of_memory(e: Exception) -> bool:
    """Whether spyre refused for want of host memory to back the card's (torch.OutOfMemoryError,
    user guide): an 8.6 GB result that CPU could still allocate beside two workers' memory says as
    little about the op as a line CPU cannot allocate; the program ends there."""
    return "OutOfMemory" in type(e).__name__ and "host has no memory left" in str(e)


TOL = {"float32": (1e-4, 1e-4), "float16": (2e-2, 2e-3), "bfloat16": (2e-2, 1e-2)}


_ASSIGN = re.compile(r"^(v\d+) = (.*)$")


def through_compile(line: str, device: str) -> str:
    """`line` as the torch.compile front door runs it: its expression is the body of a function
    compiled with dynamic=False, by the spyre backend on spyre and by AOTAutograd over CPU's own
    kernels on CPU ("aot_eager"), so that what torch.compile itself does to a call
    (functionalization, a view regenerated from its base) is done on both sides and the values
    still come from CPU's kernels. The lines that make inputs (from a generator) and the autograd
    lines run eagerly."""
    m = _ASSIGN.match(line)
    if not m or "generator=" in line:
        return line
    backend = "spyre" if device == "spyre" else "aot_eager"
    return f"{m.group(1)} = torch.compile(lambda: ({m.group(2)}), backend={backend!r}, dynamic=False)()"


def run(lines: list, front_door: str = "eager") -> str | None:
    """Runs a program on CPU and on spyre, line by line, through the front door named ("eager",
    or "compile": each line through torch.compile); the first difference, or None."""
    import torch

    if front_door == "compile":
        torch._dynamo.reset()  # each program's graphs are its own: a long run's caches stay small
    envs = {d: {"torch": torch, "dev": d} for d in ("cpu", "spyre")}
    for i, line in enumerate(lines):
        errors = {}
        # What the line reads, for the checks below that replay it: a line that writes in place
        # overwrites its own inputs, so those are kept first.
        before = {d: _small_tensors(env) for d, env in envs.items()} if _WRITES.search(line) else envs
        for d, env in envs.items():
            try:
                exec(through_compile(line, d) if front_door == "compile" else line, env)  # noqa: S102
            except Exception as e:  # noqa: BLE001
                errors[d] = e
        if "cpu" in errors:
            # An integer division by zero is not checked on the device (0, where CUDA gives an
            # undefined value: docs/user-guide.md).
            if "ZeroDivisionError" in str(errors["cpu"]):
                return None
            if "spyre" not in errors and _pending_fault():
                return None  # an index out of range faults the launch: raised at the next sync, as CUDA does
            if "spyre" not in errors:
                return (
                    f"line {i}: CPU raises {type(errors['cpu']).__name__} ({str(errors['cpu'])[:80]}), spyre does not"
                )
            # Both refuse the line, and the program goes on, unless either changed something before
            # refusing (CPU resizes an out= first): that is torch's accident, and the program ends.
            if _compare(envs["cpu"], envs["spyre"]):
                return None
            continue
        if "spyre" in errors:
            e = errors["spyre"]
            if _simulator_out_of_memory(e):
                return None
            if "to a single memory location" in str(e):
                return None  # an output overlapping itself or an input where CPU's check cannot see it (docs)
            if isinstance(e, NotImplementedError) and "CPU fallback is disabled" in str(e):
                return f"line {i}: needs the CPU fallback ({str(e).split(chr(39))[1]})"
            return f"line {i}: spyre raises {type(e).__name__}: {str(e)[:160]}"
        diff = _compare(envs["cpu"], envs["spyre"])
        if diff:
            if _amplified(line, envs, diff, before):
                return None  # earlier, tolerated differences blown up by this line: nothing more to check
            if _accumulator_range(line, envs, diff, before):
                return None  # CPU's product left its accumulator's range, or its variance cancelled: spyre's is exact
            if _summation_order(line, envs, diff, before):
                return None  # a matmul that cancels: both sums are within rounding of the exact one
            if _gradient_nearer_exact(lines[: i + 1], envs, diff):
                return None  # a gradient summed over many rows: spyre's is nearer the float64 one than CPU's
            if _cpu_layout_dependent(line, envs, diff, before):
                return None  # CPU's own answer for these values changes with their layout; spyre gives one
            return f"line {i}: {diff}"
    return None


def _pending_fault() -> bool:
    """Whether the device's queued work raises when waited for (a launch that faulted)."""
    import torch

    try:
        torch.spyre.synchronize()
    except RuntimeError as e:
        return "core fault" in str(e)
    return False


def _replay(line: str, values: dict, name: str, torch_module=None):
    """Line `line` run on CPU over `values` (name -> tensor): its value `name`, or None."""
    import torch

    env = {"torch": torch_module or torch, "dev": "cpu", **values}
    try:
        exec(line, env)  # noqa: S102
    except Exception:  # noqa: BLE001
        return None
    out = env.get(name)
    return out if isinstance(out, torch.Tensor) else None


def _close(got, want) -> bool:
    """Whether spyre's `got` is `want` (a CPU tensor of the same shape) within got's tolerance."""
    if want is None or not hasattr(got, "shape") or want.shape != got.shape:
        return False
    rtol, atol = TOL.get(str(got.dtype).removeprefix("torch."), (0, 0))
    a, b = got.detach().cpu().double(), want.detach().double()
    return bool(a.isclose(b, rtol=rtol, atol=atol, equal_nan=True).all())


def _usable(v) -> bool:
    """Whether torch lets v be read: a view that a multi-output op (split) returned is refused once
    its base has been written in place (autograd raises on any use of it), on every device alike."""
    try:
        v.grad_fn  # noqa: B018 - reading it is the check
    except RuntimeError:
        return False
    return True


def _tensors(env: dict, f) -> dict:
    import torch

    return {k: f(v) for k, v in env.items() if isinstance(v, torch.Tensor) and _usable(v)}


# A line that writes a tensor in place: a method ending in _, out=, or a setitem.
_WRITES = re.compile(r"_\(|out=|\]\s*=[^=]")


def _host_copy(v):
    """v on the host, a leaf that requires grad still one (for a replay of the line on CPU)."""
    x = v.detach().cpu().clone()
    return x.requires_grad_(v.requires_grad) if v.is_leaf and (x.is_floating_point() or x.is_complex()) else x


def _small_tensors(env: dict) -> dict:
    """Host copies of env's tensors that share memory as the originals do (a replayed write through
    a view reaches its base), but for tensors too large to copy (an unfold's 10^10 elements)."""
    import torch

    storages, copies = {}, {}
    for k, v in _tensors(env, lambda v: v).items():
        if v.layout != torch.strided or v.is_conj() or v.is_neg() or v.untyped_storage().nbytes() > 1 << 26:
            if v.numel() <= 1 << 22:
                copies[k] = _host_copy(v)  # a clone, which resolves the conjugate and negative bits
            continue
        key = (str(v.device), v.untyped_storage().data_ptr())
        if key not in storages:
            whole = torch.empty(0, dtype=torch.uint8, device=v.device).set_(v.untyped_storage())
            storages[key] = whole.cpu().clone().untyped_storage()
        x = torch.empty(0, dtype=v.dtype).set_(storages[key], v.storage_offset(), v.shape, v.stride())
        copies[k] = x.requires_grad_(v.requires_grad) if v.is_leaf and (x.is_floating_point() or x.is_complex()) else x
    return copies


def _amplified(line: str, envs: dict, diff: str, before: dict) -> bool:
    """Whether a value that differs is what CPU itself computes from spyre's inputs: an op such as
    remainder of a large number turns an ulp of an earlier, tolerated difference into any value, and
    nonzero turns a denormal that CPU's vector loop flushes (softplus of -103) into another shape."""
    if "values differ" not in diff and ": shape" not in diff:
        return False
    name = diff.split(":", 1)[0]
    values = _small_tensors({k: v for k, v in before["spyre"].items() if k != "loss"})
    return _close(envs["spyre"].get(name), _replay(line, values, name))


# A float32 variance or standard deviation (var_mean, std_mean, nanvar, ... too).
_VARIANCE = re.compile(r"\b(std|var)(_mean)?\(")


def _accumulator_range(line: str, envs: dict, diff: str, before: dict) -> bool:
    """Whether a product (cumulative or not) differs only where CPU's accumulator overflowed or
    underflowed midway (fp16 and bf16 accumulate in fp32, fp32 in fp64) and spyre's blocked order
    did not, or a float32 variance differs where CPU's loses digits to cancellation (values of 4e8
    that differ by 100, whose mean CPU's float32 loop rounds) and spyre's, over values less their
    first, does not: spyre's value is then the one the line gives in float64, rounded to the
    result's type."""
    import torch

    name, got = diff.split(":", 1)[0], envs["spyre"].get(diff.split(":", 1)[0])
    if "values differ" not in diff or not hasattr(got, "dtype"):
        return False
    if "prod(" not in line and not (_VARIANCE.search(line) and got.dtype == torch.float32):
        return False
    exact = _replay(
        line, _tensors(before["cpu"], lambda v: v.detach().double() if v.is_floating_point() else v.detach()), name
    )
    return exact is not None and _close(got, exact.to(got.dtype))


def _gradient_nearer_exact(lines: list, envs: dict, diff: str) -> bool:
    """Whether a loss or gradient that differs is nearer the float64 answer than CPU's: the whole
    program run again on CPU with float32 made float64. A gradient that gathers many rows into few
    (the backward of indexing) sums thousands of float32 terms, whose order changes the last digits:
    CPU adds them one by one, spyre in blocks. Where CPU's own answer is outside the tolerance of the
    float64 one, float32 does not determine the value (a cancellation: the backward of log_softmax
    under pow(x, -3) subtracts two products of 1e26 whose last bits differ with the order of
    rounding): any two float32 implementations then differ by the order of CPU's own error, and
    spyre's is accepted within four times that distance."""
    import torch

    name = diff.split(":", 1)[0]
    if "values differ" not in diff or not (name == "loss" or name.startswith("grads[")):
        return False
    env = {"torch": torch, "dev": "cpu"}
    for line in lines:
        try:
            exec(line.replace("torch.float32", "torch.float64").replace(".float()", ".double()"), env)  # noqa: S102
        except Exception:  # noqa: BLE001 - a line both devices refused: the program goes on, as in run()
            pass
    exact = _values(env).get(name)
    got, want = _values(envs["spyre"]).get(name), _values(envs["cpu"]).get(name)
    if exact is None or got is None or want is None or exact.shape != got.shape:
        return False
    rtol, atol = TOL.get(str(got.dtype).removeprefix("torch."), (0, 0))
    x, g, w = exact.detach().double(), got.detach().cpu().double(), want.detach().double()
    cpu_error, tol = (w - x).abs(), atol + rtol * x.abs()
    bound = torch.where(cpu_error > tol, 4 * cpu_error, cpu_error + tol)
    same = torch.isclose(g, w, rtol=0, atol=0, equal_nan=True)  # where CPU's answer is spyre's (NaN, inf)
    return bool(((g - x).abs() <= bound).logical_or(same).all())


def _cpu_layout_dependent(line: str, envs: dict, diff: str, before: dict) -> bool:
    """Whether CPU gives spyre's value itself when the same inputs are laid out otherwise: CPU's
    vectorized and scalar loops differ at some edges (gelu of inf is NaN in one, inf in the other),
    so a non-contiguous copy of each input takes the scalar loop; where broadcasting keeps the
    vector loop, its portable kernels are asked in another process."""
    import torch

    if "values differ" not in diff:
        return False
    name = diff.split(":", 1)[0]

    def strided(v):
        x = v.detach()
        return torch.stack([x, x], -1)[..., 0] if x.dim() > 0 else x

    if _close(envs["spyre"].get(name), _replay(line, _tensors(before["cpu"], strided), name)):
        return True
    # Over spyre's own inputs: the edge may sit where earlier tolerated ulps are blown up (remainder).
    spyre_inputs = _tensors(before["spyre"], lambda v: v.detach().cpu())
    return _close(envs["spyre"].get(name), _replay_portable(line, spyre_inputs, name))


_PORTABLE = """
import sys, torch
values = torch.load(sys.argv[1])
env = {"torch": torch, "dev": "cpu", **values}
exec(sys.argv[2], env)
torch.save(env.get(sys.argv[3]), sys.argv[1])
"""


def _replay_portable(line: str, values: dict, name: str):
    """Line `line` run on CPU over `values` with ATen's portable kernels (ATEN_CPU_CAPABILITY=default:
    no vector unit), in a fresh process: CPU's vectorised kernels and its scalar loop disagree at some
    edges (fmod of a quotient past the float range is NaN in the first, exact in the second, and the
    scalar loop also takes each vector loop's tail), and the portable kernels are the scalar ones."""
    import tempfile

    import torch

    with tempfile.NamedTemporaryFile(suffix=".pt") as f:
        torch.save(values, f.name)
        env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
        p = subprocess.run([sys.executable, "-c", _PORTABLE, f.name, line, name], env=env, capture_output=True)
        if p.returncode != 0:
            return None
        out = torch.load(f.name)
    return out if isinstance(out, torch.Tensor) else None


EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


class _AbsRandom:
    """torch, but with random operands drawn as their magnitudes: a line run with it and with every
    variable's absolute value gives sum |a| |b| for its matmul."""

    def __init__(self, torch):
        self._torch = torch

    def __getattr__(self, name):
        f = getattr(self._torch, name)
        return (lambda *a, **k: f(*a, **k).abs()) if name in ("randn", "rand") else f


def _summation_order(line: str, envs: dict, diff: str, before: dict) -> bool:
    """Whether a matmul's values differ by no more than its sums' rounding allows: two fp32 sums of
    the same products in different orders differ by up to about K eps sum|a b|, which cancellation
    makes large beside the result. Both are held to 32 eps sum|a b| of the exact (float64) result.
    Where that result overflows the type, the order decides whether a partial sum overflows first
    (CPU's inf of a 1.5e38 product less spyre's earlier -5e36, then NaN with a -inf term): spyre's
    must be the exact result's infinity, CPU's may be anything."""
    import torch

    if "values differ" not in diff or not any(k in line for k in ("matmul", "linear", "mm(", "@")):
        return False
    name = diff.split(":", 1)[0]
    exact_values = _tensors(before["cpu"], lambda v: v.detach().double() if v.is_floating_point() else v.detach())
    abs_values = {k: x if x.dtype == torch.bool else x.abs() for k, x in exact_values.items()}
    exact = _replay(line, exact_values, name)
    size = _replay(line, abs_values, name, _AbsRandom(torch))
    got, want = envs["spyre"].get(name), envs["cpu"].get(name)
    if exact is None or size is None or not hasattr(got, "shape") or exact.shape != got.shape:
        return False
    dtype = str(got.dtype).removeprefix("torch.")
    rtol, atol = TOL.get(dtype, (0, 0))
    bound = rtol * exact.abs() + atol + 32 * EPS.get(dtype, 0) * size.double()
    g, w = got.detach().cpu().double(), want.detach().double()
    overflow = exact.to(got.dtype).double()
    overflow = torch.where(overflow.isinf(), overflow, torch.nan)  # the exact result's infinity, where it has one
    undefined = exact.isnan()  # inf - inf in float64 too: NaN is the answer
    spyre_ok = torch.where(overflow.isnan(), (g - exact).abs() <= bound, g == overflow) | (undefined & g.isnan())
    cpu_ok = overflow.isinf() | ((w - exact).abs() <= bound) | (undefined & w.isnan())
    return bool(spyre_ok.all() and cpu_ok.all())


def _values(env):
    import torch

    out = {}
    for k, v in env.items():
        if isinstance(v, torch.Tensor) and _usable(v):
            out[k] = v
        elif isinstance(v, tuple) and k == "grads":
            out.update({f"grads[{i}]": g for i, g in enumerate(v) if isinstance(g, torch.Tensor)})
    return out


def _addressing(t) -> list:
    """The strides that address memory: those of the dims longer than 1 (a stride of a dim of one
    element never moves; torch.compile's outputs do not keep CPU's there, seed 10 program 259)."""
    return [st for n, st in zip(t.shape, t.stride(), strict=True) if n > 1]


def _compare(cpu_env, dev_env) -> str | None:
    import torch

    cpu, dev = _values(cpu_env), _values(dev_env)
    # The loss and the gradients sum values of every type in the program: they are held to the
    # tolerance of its least precise floating type.
    kinds = {str(w.dtype).removeprefix("torch.") for w in cpu.values()}
    loosest = max((TOL[t] for t in kinds if t in TOL), default=(0, 0))
    if set(cpu) != set(dev):
        return f"values {sorted(set(cpu) ^ set(dev))} exist on one side only"
    for k, w in cpu.items():
        g = dev[k]
        if g.dtype != w.dtype:
            return f"{k}: dtype {g.dtype}, CPU {w.dtype}"
        if g.shape != w.shape:
            return f"{k}: shape {tuple(g.shape)}, CPU {tuple(w.shape)}"
        # A view of a tensor the program never sees (an intermediate of a compiled graph) refuses
        # an in-place op under autograd that CPU's tensor of its own takes.
        if w._base is None and g._base is not None:
            return f"{k}: a view on spyre, a tensor of its own on CPU"
        if w._base is not None and w.numel() > 1 and _addressing(g) != _addressing(w):
            return f"{k}: a view with strides {g.stride()}, CPU {w.stride()}"
        if w.numel() > 10_000_000:  # a view of a huge span (unfold): its layout is checked, not its values
            continue
        gc = g.detach().cpu()
        wd = w.detach()
        rtol, atol = TOL.get(str(w.dtype).removeprefix("torch."), (0, 0))
        if k == "loss" or k.startswith("grads["):
            rtol, atol = max((rtol, atol), loosest)
        a, b = (gc, wd) if wd.is_complex() else (gc.double(), wd.double())
        close = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(close.all()):
            bad = int((~close).reshape(-1).nonzero()[0])
            got, want = a.reshape(-1)[bad].item(), b.reshape(-1)[bad].item()
            return f"{k}: values differ (at flat {bad}: spyre {got}, CPU {want})"
    names = [k for k, w in cpu.items() if w.numel() > 0 and w.layout == torch.strided]
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            c_shared = cpu[a].untyped_storage().data_ptr() == cpu[b].untyped_storage().data_ptr()
            d_shared = dev[a].untyped_storage().data_ptr() == dev[b].untyped_storage().data_ptr()
            if c_shared != d_shared:
                return f"{a} and {b}: {'share' if c_shared else 'do not share'} memory on CPU, not so on spyre"
    return None
