"""Data-parallel training of a small Llama (HuggingFace's LlamaForCausalLM) on spyre cards.

    torchrun --standalone --nproc-per-node 4 examples/distributed/ddp_llama.py --steps 3

Each process trains on its share of every batch on its own card (``spyre``; one simulated card per
process), DistributedDataParallel averages the gradients through the ``spyre`` backend of
torch.distributed, and rank 0 prints the loss of the whole batch at every step. Because each
share has the same number of tokens, the averaged gradient is the whole batch's: the losses are
those of one process training on the whole batch (``--single`` runs that, on any device), which
test_distributed.py checks against the CPU.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
import torch_spyre  # noqa: F401  (the device and the backend)
import transformers

BATCH, TOKENS = 8, 33


def model_and_data(seed: int = 0):
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    data = torch.randint(0, config.vocab_size, (BATCH, TOKENS), generator=torch.Generator().manual_seed(seed))
    return model, data


def train(model, data, steps: int, device: str | torch.device, ddp: bool) -> list[float]:
    """`steps` AdamW steps over `data` (this process's share); the whole batch's loss at each."""
    model = model.to(device)
    net = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = data.to(device)
    losses = []
    for _ in range(steps):
        loss = net(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        whole = loss.detach().clone()
        if ddp:
            dist.all_reduce(whole, op=dist.ReduceOp.AVG)
        losses.append(whole.item())
    return losses


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--single", action="store_true", help="one process, the whole batch, no torch.distributed")
    p.add_argument("--device", default="spyre", help="with --single: where to train")
    p.add_argument("--json", help="rank 0 writes the losses here")
    a = p.parse_args()
    model, data = model_and_data()
    if a.single:
        losses = train(model, data, a.steps, a.device, ddp=False)
    else:
        dist.init_process_group("spyre")
        rank, world = dist.get_rank(), dist.get_world_size()
        if BATCH % world:
            raise SystemExit(f"the batch of {BATCH} does not split evenly over {world} processes")
        share = BATCH // world
        # The card LOCAL_RANK names when the config has that many (configs/server4.json), else card 0.
        device = torch.device("spyre", int(os.environ.get("LOCAL_RANK", "0")) % torch.spyre.device_count())
        losses = train(model, data[rank * share : (rank + 1) * share], a.steps, device, ddp=True)
        dist.destroy_process_group()
        if rank != 0:
            return
    for i, loss in enumerate(losses):
        print(f"step {i}: loss {loss:.6f}")
    if a.json:
        with open(a.json, "w") as f:
            report = {"losses": losses, "world": int(os.environ.get("WORLD_SIZE", "1"))}
            # Collectives the cards ran themselves (ranks that are clients of one spyre-simd).
            report["on_cards"] = torch_spyre.distributed.device_collectives()
            json.dump(report, f)


if __name__ == "__main__":
    main()
