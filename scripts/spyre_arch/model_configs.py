"""Public model configs that `spyre-sim model` knows by name (no download, no HuggingFace cache).

The numbers that size each model, as its HuggingFace config.json publishes them; the rest of a
config takes transformers' defaults, which change no shape.
"""

from __future__ import annotations

from typing import Any

LLAMA3_8B: dict[str, Any] = {
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-05,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}
LLAMA3_70B: dict[str, Any] = {
    **LLAMA3_8B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
}
MIXTRAL_8X7B: dict[str, Any] = {
    "model_type": "mixtral",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-05,
    "hidden_act": "silu",
    "sliding_window": None,
    "tie_word_embeddings": False,
}

CONFIGS: dict[str, dict[str, Any]] = {
    "llama3-8b": LLAMA3_8B,
    "llama3-70b": LLAMA3_70B,
    "mixtral-8x7b": MIXTRAL_8X7B,
}
