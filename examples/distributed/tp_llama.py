"""Tensor-parallel inference of a small Llama (HuggingFace's LlamaForCausalLM) on spyre cards.

    SPYRE_CONFIG=configs/server4.json torchrun --standalone --nproc-per-node 4 examples/distributed/tp_llama.py

(configs/server4.json declares a server of four cards: each process takes the card its LOCAL_RANK
names, as on a real server.)

Each process holds a quarter of every attention and MLP layer on its own card: the query, key,
value, gate and up projections split by output column, the output and down projections by input
row (torch.distributed.tensor.parallel on a DeviceMesh of spyre devices), so each card computes a
quarter of the heads and of the MLP and one all_reduce per block joins them, through the
``spyre`` backend of torch.distributed. Rank 0 prints the logits' largest difference from the
whole model on the CPU and the greedily generated tokens of both.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.distributed as dist
import torch_spyre  # the device and the backend
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def model_and_prompt(seed: int = 0):
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=64,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(seed))
    return model, prompt


def shard(model, mesh) -> None:
    """Megatron-style: column-parallel into each block, row-parallel out of it."""
    plan = {
        "self_attn.q_proj": ColwiseParallel(),
        "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(),
    }
    for layer in model.model.layers:
        parallelize_module(layer, mesh, plan)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new-tokens", type=int, default=8)
    p.add_argument("--json", help="rank 0 writes its findings here")
    a = p.parse_args()
    dist.init_process_group("spyre")
    world = dist.get_world_size()
    model, prompt = model_and_prompt()
    reference = None
    mask = torch.ones_like(prompt)
    pad = model.config.eos_token_id
    if dist.get_rank() == 0:
        with torch.no_grad():
            logits = model(input_ids=prompt, attention_mask=mask).logits
            tokens = model.generate(
                prompt, attention_mask=mask, max_new_tokens=a.new_tokens, do_sample=False, pad_token_id=pad
            )
        reference = (logits, tokens)
    # One card per process: LOCAL_RANK picks it (the config's sim.devices must cover the processes).
    mesh = init_device_mesh("spyre", (world,))
    model = model.to("spyre")
    shard(model, mesh)
    prompt, mask = prompt.to("spyre"), mask.to("spyre")
    with torch.no_grad():
        logits = model(input_ids=prompt, attention_mask=mask).logits.cpu()
        tokens = model.generate(
            prompt, attention_mask=mask, max_new_tokens=a.new_tokens, do_sample=False, pad_token_id=pad
        )
        tokens = tokens.cpu()
    if reference is not None:
        diff = (logits - reference[0]).abs().max().item()
        same = torch.equal(tokens, reference[1])
        print(f"{world} cards: logits within {diff:.2e} of the CPU's; generated tokens {'equal' if same else 'DIFFER'}")
        print(tokens.tolist())
        if a.json:
            with open(a.json, "w") as f:
                report = {"world": world, "max_logit_diff": diff, "tokens_equal": same}
                # Collectives the cards ran themselves (ranks that are clients of one spyre-simd).
                report["on_cards"] = torch_spyre.distributed.device_collectives()
                json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
