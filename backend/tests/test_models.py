"""Whole models on spyre against CPU: a GPT-style decoder, HuggingFace's Llama, and a Llama-style
decoder whose MLP is a mixture of experts; forward, 20 AdamW training steps and greedy generate,
all with TORCH_SPYRE_CPU_FALLBACK=error (every op native)."""

from __future__ import annotations

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_spyre

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the models are built from configs; nothing to fetch
import transformers  # noqa: E402

STEPS = 20


class GPTBlock(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2, self.heads = nn.LayerNorm(d), nn.LayerNorm(d), heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """GPT-2 shaped: learned positions, LayerNorm, GELU, tied input and output embeddings."""

    def __init__(self, vocab=96, d=64, heads=4, layers=2, context=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(GPTBlock(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class MoE(nn.Module):
    """DeepSeek-style top-k token-choice routing with a fixed capacity per expert: tokens are
    gathered to their experts by index, the experts run as one batched matmul, and the weighted
    results are added back to their tokens with index_add (overflowing tokens are dropped)."""

    def __init__(self, d: int, hidden: int, experts=4, top=2, capacity=24):
        super().__init__()
        self.router = nn.Linear(d, experts, bias=False)
        self.w_in = nn.Parameter(torch.randn(experts, d, hidden) * d**-0.5)
        self.w_out = nn.Parameter(torch.randn(experts, hidden, d) * hidden**-0.5)
        self.experts, self.top, self.capacity = experts, top, capacity

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        tokens, e, cap = x.shape[0], self.experts, self.capacity
        gates, chosen = torch.softmax(self.router(x), dim=-1).topk(self.top, dim=-1)  # [T, k]
        gates = gates / gates.sum(-1, keepdim=True)
        onehot = torch.zeros(tokens, e, device=x.device).scatter_(1, chosen, 1.0)  # [T, E]
        slot = (torch.cumsum(onehot, 0) - 1) * onehot  # the token's place in its expert's queue
        keep = (onehot > 0) & (slot < cap)
        flat_slot = torch.arange(e, device=x.device) * cap + slot.long()  # [T, E]
        dest = torch.where(keep, flat_slot, e * cap)  # the last row collects dropped tokens
        dest_k = dest.gather(1, chosen).reshape(-1)  # [T * k]
        token_k = torch.arange(tokens, device=x.device).repeat_interleave(self.top)
        buf = torch.zeros(e * cap + 1, shape[-1], device=x.device).index_add(0, dest_k, x[token_k])
        h = torch.bmm(F.silu(torch.bmm(buf[:-1].view(e, cap, -1), self.w_in)), self.w_out)
        h = torch.cat([h.reshape(e * cap, -1), torch.zeros(1, shape[-1], device=x.device)])
        out = torch.zeros_like(x).index_add(0, token_k, h[dest_k] * gates.reshape(-1, 1))
        return out.view(shape)


def _train(model, batches, device):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for inputs, targets in batches:
        logits = model(inputs.to(device))
        logits = logits if isinstance(logits, torch.Tensor) else logits.logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.to(device).reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _batches(vocab: int, seq: int, seed: int = 0):
    """STEPS steps over one fixed batch, so that the loss must fall as the model memorises it."""
    data = torch.randint(0, vocab, (2, seq + 1), generator=torch.Generator().manual_seed(seed))
    return [(data[:, :-1], data[:, 1:])] * STEPS


def _check_training(make_model, vocab: int, seq: int = 16):
    torch.manual_seed(0)
    cpu_model = make_model()
    spyre_model = copy.deepcopy(cpu_model)
    batches = _batches(vocab, seq)
    with torch.no_grad():
        ref = cpu_model(batches[0][0])
        ref = ref if isinstance(ref, torch.Tensor) else ref.logits
    torch_spyre.set_cpu_fallback("error")
    spyre_model = spyre_model.to("spyre")
    with torch.no_grad():
        out = spyre_model(batches[0][0].to("spyre"))
        out = out if isinstance(out, torch.Tensor) else out.logits
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-4)
    want = _train(cpu_model, batches, "cpu")
    got = _train(spyre_model, batches, "spyre")
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-4)
    assert want[-1] < want[0]  # the steps do train
    return spyre_model


def test_gpt_trains_like_cpu_and_keeps_tied_weights():
    model = _check_training(GPT, vocab=96)
    assert model.head.weight is model.wte.weight
    assert model.head.weight.device.type == "spyre"


def _llama_config(**extra):
    return transformers, transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        **extra,
    )


def test_hf_llama_trains_like_cpu():
    transformers, config = _llama_config()
    _check_training(lambda: transformers.LlamaForCausalLM(config), vocab=128)


def moe_llama():
    """The Llama-style decoder of _llama_config with a mixture of experts for each MLP."""
    transformers, config = _llama_config()
    model = transformers.LlamaForCausalLM(config)
    for layer in model.model.layers:
        layer.mlp = MoE(config.hidden_size, config.intermediate_size)
    return model


def test_llama_with_mixture_of_experts_trains_like_cpu():
    _check_training(moe_llama, vocab=128)


def test_hf_llama_generate_matches_cpu():
    transformers, config = _llama_config()
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(1))
    want = model.generate(prompt, max_new_tokens=16, do_sample=False)
    torch_spyre.set_cpu_fallback("error")
    got = copy.deepcopy(model).to("spyre").generate(prompt.to("spyre"), max_new_tokens=16, do_sample=False)
    assert got.shape == (1, 22)
    assert torch.equal(got.cpu(), want)
