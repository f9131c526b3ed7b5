"""The process that runs a weightless model on the simulated card (`spyre_arch.model` starts it).

It reads a job (JSON on stdin), builds the HuggingFace causal LM on meta tensors, checks that its
weights and KV cache fit the card's memory, moves it to the spyre device without writing a value
(`to_empty`: device memory is sparse, so nothing of it costs host pages), compiles every
attention, MLP, norm, embedding and LM-head module with `torch.compile(backend="spyre")`, and runs
a prefill and the decode steps with a static KV cache. `$SPYRE_CONFIG` (written by the parent)
puts the card in timing mode, so no floating-point arithmetic is done and no float byte moves.

Device time comes from the card's cycle counter around synchronized regions: per phase, per
decode step, and per layer kind (forward hooks around each module; the host waits, the card's
clock does not move). Each kind's launches are counted too, so the parent can attribute the
stats file's per-launch stall breakdown to kinds. The result is one JSON line on stdout.

Mixture-of-experts routers are given balanced routing: in timing mode the router's logits are
never computed, and a weightless model has no routing of its own (docs/architect-guide.md).
"""

from __future__ import annotations

import gc
import itertools
import json
import resource
import sys
import time
from collections import defaultdict
from typing import Any

import torch
import torch_spyre
import transformers
from torch import nn

# Exit status of a job refused before it ran (the model does not fit, the config is unusable).
REFUSED = 3


class Refused(Exception):
    """The job cannot run; the message says why."""


def resolve_config(source: Any) -> transformers.PretrainedConfig:
    """A HuggingFace config from a dict (with "model_type"), a config.json or model folder, or a
    model id whose config is already in the local HuggingFace cache (nothing is downloaded)."""
    if isinstance(source, dict):
        fields = dict(source)
        model_type = fields.pop("model_type", None)
        if not model_type:
            raise Refused('the model config needs a \'model_type\' (e.g. "llama", "mixtral")')
        return transformers.AutoConfig.for_model(model_type, **fields)
    if str(source).endswith(".json"):
        with open(source, encoding="utf-8") as f:
            return resolve_config(json.load(f))
    try:
        return transformers.AutoConfig.from_pretrained(source, local_files_only=True)
    except OSError as e:
        raise Refused(f"no config for {source!r} here: give a config.json, a model folder or a dict ({e})") from e


def kv_cache_bytes(config: transformers.PretrainedConfig, batch: int, tokens: int, dtype: torch.dtype) -> int:
    """A static cache's keys and values for `tokens` positions of `batch` sequences in every layer."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return 2 * config.num_hidden_layers * batch * tokens * kv_heads * head_dim * dtype.itemsize


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def _kind(name: str, module: nn.Module) -> str | None:
    """The layer kind a module's time is booked to, or None for one that is not measured alone."""
    cls = type(module).__name__.lower()
    if isinstance(module, nn.Embedding):
        return "embedding"
    if name == "lm_head":
        return "lm_head"
    for word, kind in (("attention", "attention"), ("moe", "moe"), ("sparse", "moe"), ("mlp", "mlp"), ("norm", "norm")):
        if word in cls:
            return kind
    return None


def measured_modules(model: nn.Module) -> list[tuple[str, nn.Module, str]]:
    """(name, module, kind) of the base model's and each decoder layer's direct children, and the LM head."""
    base = model.base_model
    parents = [base, *(layer for layer in getattr(base, "layers", []))]
    found = [(n, m, _kind(n, m)) for p in parents for n, m in p.named_children()]
    head = model.get_output_embeddings()
    if head is not None:
        found.append(("lm_head", head, "lm_head"))
    return [(n, m, k) for n, m, k in found if k is not None]


def balance_routing(module: nn.Module, _inputs: Any, output: Any) -> Any:
    """Forward hook of a top-k router: token t's choices become experts t*k .. t*k+k-1 (mod E).

    The router still runs (its projection, softmax and top-k are timed); only the indices it
    returns are replaced, computed on the device with integer ops (which timing mode does run).
    """
    if not isinstance(output, tuple):
        return output
    k, experts = module.top_k, module.num_experts
    replaced = []
    for item in output:
        if isinstance(item, torch.Tensor) and not item.is_floating_point() and item.dim() == 2 and item.shape[-1] == k:
            slots = torch.arange(item.numel(), device=item.device, dtype=item.dtype)
            item = (slots % experts).view(item.shape)
        replaced.append(item)
    return tuple(replaced)


class Meter:
    """Device cycles and launches per (phase, kind), read around each measured module's forward."""

    def __init__(self) -> None:
        self.phase = ""
        self.cycles: dict[tuple[str, str], int] = defaultdict(int)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self.launch_ranges: list[tuple[str, str, int, int]] = []
        self._open: tuple[int, int] | None = None

    @staticmethod
    def now() -> tuple[int, int]:
        torch.spyre.synchronize()
        return torch_spyre.sim.device_cycles(), torch_spyre.launch_count()

    def attach(self, module: nn.Module, kind: str) -> None:
        module.register_forward_pre_hook(lambda *_: self._start())
        module.register_forward_hook(lambda *_: self._stop(kind))

    def _start(self) -> None:
        self._open = self.now()

    def _stop(self, kind: str) -> None:
        assert self._open is not None, "a measured module ended that never started"
        cycles, launches = self.now()
        key = (self.phase, kind)
        self.cycles[key] += cycles - self._open[0]
        self.calls[key] += 1
        if launches > self._open[1]:
            self.launch_ranges.append((self.phase, kind, self._open[1], launches))
        self._open = None


def _progress(text: str) -> None:
    """One line on stderr, which the parent shows when asked to (`spyre-sim model` does)."""
    print(f"spyre-sim model: {text}", file=sys.stderr, flush=True)


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Runs one job: {"source", "prefill", "decode", "batch", "dtype", "weights"}; returns the measured result.

    "weights" is "none" (meta tensors: the prediction) or "random" (the model's own initialization,
    uploaded: for checking, on a small model in the timed mode, that the weightless run times the same).
    """
    started = time.process_time()
    torch_spyre.set_cpu_fallback("error")  # a fallback would leave work off the card's clock
    config = resolve_config(job["source"])
    dtype = getattr(torch, job.get("dtype", "bfloat16"))
    batch, prefill, decode = job["batch"], job["prefill"], job["decode"]
    random_weights = job.get("weights", "none") == "random"
    torch.manual_seed(0)
    with torch.device("cpu" if random_weights else "meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    weights = sum(t.numel() * t.element_size() for t in itertools.chain(model.parameters(), model.buffers()))
    kv = kv_cache_bytes(config, batch, prefill + decode, dtype)
    info = torch_spyre.sim.device_info()
    capacity = info["memory_bytes"]
    if weights + kv > capacity:
        raise Refused(
            f"{config.model_type} at batch {batch} needs {_gb(weights + kv)} of device memory (weights "
            f"{_gb(weights)} + KV cache {_gb(kv)}), and the card has {_gb(capacity)} (memory.usable_bytes)"
        )
    model = model.to("spyre") if random_weights else model.to_empty(device="spyre")

    meter = Meter()
    modules = measured_modules(model)
    for _, module, kind in modules:
        module.forward = torch.compile(module.forward, backend="spyre", dynamic=False)
        meter.attach(module, kind)
    for module in model.modules():
        if hasattr(module, "top_k") and hasattr(module, "num_experts") and not isinstance(module, nn.ModuleList):
            module.register_forward_hook(balance_routing)
    # Each layer's attention indexes the cache with its own layer number, so Dynamo specializes
    # one graph per layer and phase; allow them all rather than falling back to eager.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 4 * config.num_hidden_layers)
    torch._dynamo.config.accumulated_recompile_limit = max(
        torch._dynamo.config.accumulated_recompile_limit, 16 * config.num_hidden_layers
    )

    cache = transformers.StaticCache(config=config, max_cache_len=prefill + decode)
    tokens = torch.zeros(batch, prefill, dtype=torch.long, device="spyre")
    phases: dict[str, Any] = {}
    with torch.no_grad():
        meter.phase = "prefill"
        _progress(f"prefill of {batch} x {prefill} tokens")
        h0 = time.process_time()
        c0, n0 = meter.now()
        out = model(input_ids=tokens, cache=cache, use_cache=True, logits_to_keep=1)
        following = out.logits[:, -1].argmax(-1, keepdim=True)
        c1, n1 = meter.now()
        h1 = time.process_time()
        phases["prefill"] = {"cycles": c1 - c0, "launches": n1 - n0, "host_cpu_seconds": h1 - h0}
        meter.phase = "decode"
        steps = []
        for step in range(decode):
            if step % 16 == 0:
                _progress(f"decode step {step + 1} of {decode}")
            out = model(input_ids=following, cache=cache, use_cache=True)
            following = out.logits[:, -1].argmax(-1, keepdim=True)
            if step == 0:
                # Every graph has now been compiled: millions of long-lived objects (graphs, guards,
                # the model) that each full garbage collection would walk again, a tenth of a
                # decode step's host time. Frozen, the collector leaves them alone.
                gc.freeze()
            c2, _ = meter.now()
            steps.append(c2 - c1)
            c1 = c2
        phases["decode"] = {
            "cycles": sum(steps),
            "step_cycles": steps,
            "launches": meter.now()[1] - n1,
            "host_cpu_seconds": time.process_time() - h1,
        }

    kinds: dict[str, dict[str, Any]] = {}
    for (phase, kind), cycles in meter.cycles.items():
        kinds.setdefault(phase, {})[kind] = {"cycles": cycles, "calls": meter.calls[(phase, kind)]}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "config": config.to_dict(),
        "model_type": config.model_type,
        "dtype": str(dtype).removeprefix("torch."),
        "parameters": sum(p.numel() for p in model.parameters()),
        "weight_bytes": weights,
        "kv_cache_bytes": kv,
        "device": info,
        "phases": phases,
        "kinds": kinds,
        "launch_ranges": meter.launch_ranges,
        "launches": torch_spyre.launch_count(),
        "compile": torch_spyre.compile_stats(),
        "host_cpu_seconds": usage.ru_utime + usage.ru_stime,
        "host_run_seconds": time.process_time() - started,
        "host_peak_rss_bytes": usage.ru_maxrss * 1024,
    }


def main() -> int:
    job = json.load(sys.stdin)
    try:
        result = run(job)
    except Refused as e:
        print(json.dumps({"refused": str(e)}))
        return REFUSED
    torch_spyre.sim.write_reports()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
