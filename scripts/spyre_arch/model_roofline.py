"""An analytical roofline of a decoder LLM's inference from its HuggingFace config and the card's.

Independent of the simulator and of the modelling code: the work is counted from the config's
numbers (hidden size, layers, heads, experts...) as the arithmetic of a Llama-style decoder
(grouped-query attention, gated MLP or a mixture of gated experts, an LM head), and the card's
peak and bandwidth come from its config (`stats.peak_flops`, `stats.memory_roof`). Each phase's
bound is max(flops / peak, compulsory bytes / bandwidth). `spyre-sim model` holds the simulated
times against it (docs/architect-guide.md, "Full-size models without weights").

Counted: 2 flops per multiply-add of every projection, the causal attention's useful pairs
(QK^T and PV), the LM head on the tokens whose logits are kept (the last one of a prefill, as
`generate` asks). Compulsory bytes: every weight the phase touches once, the gathered embedding
rows (not the table), the KV cache read and written. Norms, rotary embedding and the softmax
are not counted: they are the work a perfect fused kernel hides under the projections.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KINDS = ("embedding", "attention", "mlp", "moe", "norm", "lm_head")


class RooflineError(ValueError):
    """The config lacks a number the count needs; the message names it."""


@dataclass(frozen=True)
class Shape:
    """The numbers of a Llama-style decoder that its inference work depends on."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    experts: int  # 0 for a dense MLP
    top_k: int
    expert_intermediate: int
    dtype_bytes: int = 2

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Shape:
        """Reads a HuggingFace config dict (Llama, Mistral, Mixtral, Granite, Qwen2 keys)."""

        def need(key: str) -> int:
            value = config.get(key)
            if not isinstance(value, int) or value < 1:
                raise RooflineError(f"the roofline needs '{key}' as a positive integer in the model config")
            return value

        hidden, heads = need("hidden_size"), need("num_attention_heads")
        experts = config.get("num_local_experts") or config.get("num_experts") or 0
        intermediate = need("intermediate_size")
        return cls(
            hidden=hidden,
            layers=need("num_hidden_layers"),
            heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or hidden // heads,
            intermediate=intermediate,
            vocab=need("vocab_size"),
            experts=int(experts),
            top_k=int(config.get("num_experts_per_tok") or 0) if experts else 0,
            expert_intermediate=int(config.get("moe_intermediate_size") or intermediate),
        )

    @property
    def mlp_kind(self) -> str:
        return "moe" if self.experts else "mlp"

    def kv_bytes_per_token(self) -> int:
        """Keys and values of one token in every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    def attention_weights(self) -> int:
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        return q + kv + self.heads * self.head_dim * self.hidden

    def expert_weights(self) -> int:
        return 3 * self.hidden * self.expert_intermediate


@dataclass(frozen=True)
class Work:
    """Flops and compulsory bytes of one phase, per layer kind."""

    flops: dict[str, float]
    bytes: dict[str, float]

    def total_flops(self) -> float:
        return sum(self.flops.values())

    def total_bytes(self) -> float:
        return sum(self.bytes.values())


def _experts_hit(shape: Shape, tokens: int) -> int:
    """Experts a layer's tokens reach under balanced routing (token t's choices t*k .. t*k+k-1 mod E)."""
    return min(shape.experts, tokens * shape.top_k)


def _work(shape: Shape, batch: int, new: int, pairs: int, context_read: int) -> Work:
    """One forward of `new` tokens per sequence that attend to `pairs` (query, key) pairs each and
    read `context_read` cached tokens, keeping the last token's logits."""
    s, b, d = shape, batch, shape.dtype_bytes
    tokens = b * new
    flops = dict.fromkeys(KINDS, 0.0)
    data = dict.fromkeys(KINDS, 0.0)
    flops["attention"] = s.layers * (2.0 * tokens * s.attention_weights() + 4.0 * b * s.heads * s.head_dim * pairs)
    kv = s.kv_bytes_per_token()
    data["attention"] = s.layers * s.attention_weights() * d + b * (context_read + new) * kv
    if s.experts:
        router = s.hidden * s.experts
        flops["moe"] = s.layers * 2.0 * tokens * (router + s.top_k * s.expert_weights())
        data["moe"] = s.layers * (router + _experts_hit(s, tokens) * s.expert_weights()) * d
    else:
        flops["mlp"] = s.layers * 2.0 * tokens * 3 * s.hidden * s.intermediate
        data["mlp"] = s.layers * 3.0 * s.hidden * s.intermediate * d
    flops["lm_head"] = 2.0 * b * s.hidden * s.vocab
    data["lm_head"] = float(s.hidden * s.vocab * d)
    data["embedding"] = float(tokens * s.hidden * d)
    return Work(flops, data)


def prefill(shape: Shape, batch: int, length: int) -> Work:
    """The prompt's forward: `length` tokens per sequence, causal attention among them."""
    return _work(shape, batch, length, length * (length + 1) // 2, 0)


def decode_step(shape: Shape, batch: int, context: int) -> Work:
    """One decode step: one new token per sequence attending to `context` cached tokens and itself."""
    return _work(shape, batch, 1, context + 1, context)


def bound(work: Work, peak_flops: float, bandwidth: float) -> dict[str, Any]:
    """The roofline time of a phase and its limit, in total and per layer kind."""
    compute, memory = work.total_flops() / peak_flops, work.total_bytes() / bandwidth
    kinds = {
        k: {
            "flops": work.flops[k],
            "bytes": work.bytes[k],
            "seconds": max(work.flops[k] / peak_flops, work.bytes[k] / bandwidth),
        }
        for k in KINDS
        if work.flops[k] or work.bytes[k]
    }
    return {
        "flops": work.total_flops(),
        "bytes": work.total_bytes(),
        "compute_seconds": compute,
        "memory_seconds": memory,
        "seconds": max(compute, memory),
        "limit": "compute" if compute >= memory else "memory",
        "kinds": kinds,
    }
