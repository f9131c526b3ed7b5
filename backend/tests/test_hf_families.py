"""HuggingFace model families off the plain-decoder path, from tiny random configs, against CPU with
TORCH_SPYRE_CPU_FALLBACK=error: a vision transformer (conv2d patches), the mixtures of experts on
transformers' default expert path (grouped_mm, histc), a Mamba hybrid (depthwise conv1d,
softplus), an encoder-decoder (T5) and Qwen3 without an attention mask. Each: forward, gradients,
AdamW steps, greedy generate (decoders), and the same model compiled, forward and training step."""

from __future__ import annotations

import copy
import os

import pytest
import torch
import torch_spyre

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import transformers as T  # noqa: E402

S = "spyre"
DECODER = dict(
    vocab_size=96,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)


def _tokens(shape):
    return torch.randint(0, 96, shape, generator=torch.Generator().manual_seed(3))


def vit():
    cfg = T.ViTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=96, num_labels=5,
    )  # fmt: skip
    return T.ViTForImageClassification(cfg), {"pixel_values": torch.randn(2, 3, 32, 32)}


def qwen3_moe():
    cfg = T.Qwen3MoeConfig(**DECODER, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, head_dim=16)
    return T.Qwen3MoeForCausalLM(cfg), {"input_ids": _tokens((2, 10))}


def mixtral():
    return T.MixtralForCausalLM(T.MixtralConfig(**DECODER, num_local_experts=4, num_experts_per_tok=2)), {
        "input_ids": _tokens((2, 10))
    }


def deepseek_v3():
    cfg = T.DeepseekV3Config(
        vocab_size=96, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
        topk_group=1, first_k_dense_replace=1, q_lora_rank=32, kv_lora_rank=16, qk_rope_head_dim=8, v_head_dim=16,
        qk_nope_head_dim=8, max_position_embeddings=64,
    )  # fmt: skip
    return T.DeepseekV3ForCausalLM(cfg), {"input_ids": _tokens((2, 10))}


def granite_moe():
    return T.GraniteMoeForCausalLM(T.GraniteMoeConfig(**DECODER, num_local_experts=4, num_experts_per_tok=2)), {
        "input_ids": _tokens((2, 10))
    }


def granite_moe_hybrid():
    cfg = T.GraniteMoeHybridConfig(
        **DECODER, num_local_experts=4, num_experts_per_tok=2, layer_types=["mamba", "attention"], mamba_n_heads=4,
        mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2,
        shared_intermediate_size=64,
    )  # fmt: skip
    return T.GraniteMoeHybridForCausalLM(cfg), {"input_ids": _tokens((2, 10))}


def t5():
    cfg = T.T5Config(
        vocab_size=96, d_model=64, d_kv=16, d_ff=96, num_layers=2, num_heads=4, decoder_start_token_id=0,
        dropout_rate=0.0,
    )  # fmt: skip
    return T.T5ForConditionalGeneration(cfg), {"input_ids": _tokens((2, 10)), "labels": _tokens((2, 6))}


def qwen3_unmasked():
    return T.Qwen3ForCausalLM(T.Qwen3Config(**DECODER, head_dim=16)), {"input_ids": _tokens((2, 10))}


FAMILIES = {f.__name__: f for f in (vit, qwen3_moe, mixtral, deepseek_v3, granite_moe, granite_moe_hybrid, t5,
                                    qwen3_unmasked)}  # fmt: skip
DECODERS = {"qwen3_moe", "mixtral", "deepseek_v3", "granite_moe", "granite_moe_hybrid", "qwen3_unmasked"}


def _loss(out):
    return out.loss if getattr(out, "loss", None) is not None else out.logits.float().square().mean()


def _on(inputs, device):
    return {k: v.to(device) for k, v in inputs.items()}


def _steps(model, inputs, device, n=2):
    # Adam moves a weight by about lr * g / (|g| + eps): for a gradient near eps that is a steep
    # function of g, so the default eps (1e-8) turns a gradient 1e-8 apart (within any float32
    # tolerance) into a step a quarter of lr apart (seen on T5 with CPU torch's AVX-512 kernels).
    # eps = 1e-6 keeps the comparison about the step, not about that cliff.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-6)
    for _ in range(n):
        opt.zero_grad()
        _loss(model(**_on(inputs, device))).backward()
        opt.step()


def _close(a, b, what, atol=1e-5):
    torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=atol, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_model_family_runs_natively_like_cpu(family):
    torch.manual_seed(0)
    model, inputs = FAMILIES[family]()
    torch_spyre.set_cpu_fallback("error")
    dev = copy.deepcopy(model).to(S)
    model.eval(), dev.eval()
    with torch.no_grad():
        _close(dev(**_on(inputs, S)).logits, model(**inputs).logits, "forward")
    model.train(), dev.train()
    _loss(model(**inputs)).backward()
    _loss(dev(**_on(inputs, S))).backward()
    for (name, a), b in zip(dev.named_parameters(), model.parameters(), strict=True):
        if b.grad is not None:
            _close(a.grad, b.grad, f"grad of {name}")
    _steps(model, inputs, "cpu")
    _steps(dev, inputs, S)
    # Adam divides by the root of tiny second moments: a gradient an ulp apart moves a weight by a
    # small fraction of the learning rate (1e-3).
    for (name, a), b in zip(dev.named_parameters(), model.parameters(), strict=True):
        _close(a, b, f"{name} after AdamW steps", atol=1e-4)
    if family in DECODERS:
        model.eval(), dev.eval()
        prompt = inputs["input_ids"][:1, :4]
        want = model.generate(prompt, max_new_tokens=6, do_sample=False)
        assert torch.equal(dev.generate(prompt.to(S), max_new_tokens=6, do_sample=False).cpu(), want)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_model_family_compiles_and_trains_like_cpu(family):
    from torch_spyre._compile import compile_stats

    torch.manual_seed(0)
    model, inputs = FAMILIES[family]()
    torch_spyre.set_cpu_fallback("error")
    torch._dynamo.reset()
    compile_stats(reset=True)
    dev = copy.deepcopy(model).to(S).train()
    model.train()
    compiled = torch.compile(dev, backend="spyre")
    out, ref = compiled(**_on(inputs, S)), model(**inputs)
    _close(out.logits, ref.logits, "compiled forward")
    _loss(out).backward()
    _loss(ref).backward()
    for (name, a), b in zip(dev.named_parameters(), model.parameters(), strict=True):
        if b.grad is not None:
            _close(a.grad, b.grad, f"compiled grad of {name}")
    s = compile_stats()
    assert s["segments"] > 0 and s["graphs_run_eagerly"] == 0 and s["programs_not_compiled"] == 0, s
    torch._dynamo.reset()
