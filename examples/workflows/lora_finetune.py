"""LoRA fine-tuning of a small Llama with PEFT and HuggingFace's Trainer on a spyre card.

    python examples/workflows/lora_finetune.py                 # a real size: 4 layers of 256, 60 steps
    python examples/workflows/lora_finetune.py --tiny --check  # what the test suite runs

The model code never names the device. accelerate takes the machine's accelerator from PyTorch's
public `torch.accelerator` API, which the spyre device answers; Trainer (transformers 5.24) asks
accelerate only for the devices it knows by name and otherwise reads `ACCELERATE_TORCH_DEVICE`,
accelerate's documented variable, so that is set to the accelerator (`spyre`) unless the user set
it. `--device cpu` runs the same fine-tuning on the CPU (Trainer's `use_cpu`); `--check` also runs
that, in a process of its own, and fails unless the losses fall, the two devices' losses agree
within fp32 tolerance and no op fell back to the CPU. The base model is random (nothing is
downloaded), and the task is one it can learn: continue a sequence that counts up by one or two.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import warnings

import torch
import transformers

try:
    import torch_spyre
except ImportError:  # the CPU run needs no spyre
    torch_spyre = None

SIZES = {
    # layers, hidden, heads, kv heads, tokens per sample, samples, batch, steps, learning rate (the
    # real size at 1e-2 trains chaotically: a 1e-7 change of the weights moves its losses by 0.2)
    "tiny": dict(layers=2, hidden=64, heads=4, kv_heads=2, tokens=24, samples=32, batch=8, steps=20, lr=1e-2),
    "real": dict(layers=4, hidden=256, heads=8, kv_heads=4, tokens=128, samples=256, batch=8, steps=60, lr=3e-3),
}
VOCAB = 32


class CountingTask(torch.utils.data.Dataset):
    """Sequences start, start+step, start+2*step, ... (mod VOCAB): learnable from the first two."""

    def __init__(self, samples: int, tokens: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(0, VOCAB, (samples, 1), generator=g)
        step = torch.randint(1, 3, (samples, 1), generator=g)
        self.ids = (start + step * torch.arange(tokens)) % VOCAB

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def base_model(size: dict, seed: int = 0) -> transformers.LlamaForCausalLM:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=size["hidden"],
        intermediate_size=size["hidden"] * 11 // 4,
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["kv_heads"],
        max_position_embeddings=size["tokens"],
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config)


def finetune(size: dict, device: str, out_dir: str) -> tuple[list[float], str]:
    """LoRA on the attention and MLP projections; the loss of every step and the device it ran on."""
    import peft

    lora = peft.LoraConfig(
        r=8,
        lora_alpha=16,
        lora_dropout=0.0,  # no dropout: the CPU run draws the same numbers
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        task_type="CAUSAL_LM",
    )
    model = peft.get_peft_model(base_model(size), lora)
    args = transformers.TrainingArguments(
        output_dir=out_dir,
        per_device_train_batch_size=size["batch"],
        max_steps=size["steps"],
        learning_rate=size["lr"],
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        use_cpu=device == "cpu",
        dataloader_pin_memory=False,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=CountingTask(size["samples"], size["tokens"]))
    trainer.remove_callback(transformers.PrinterCallback)  # the losses are printed below
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, str(trainer.args.device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="the test suite's size")
    parser.add_argument("--device", choices=["accelerator", "cpu"], default="accelerator")
    parser.add_argument("--check", action="store_true", help="also run on the CPU and compare the losses")
    parser.add_argument("--json", action="store_true", help="print the losses as JSON")
    parser.add_argument("--out", default="out/lora_finetune", help="Trainer's output folder")
    args = parser.parse_args(argv)
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")  # its own deprecations
    size = SIZES["tiny" if args.tiny else "real"]

    if args.device == "accelerator" and torch.accelerator.is_available():
        os.environ.setdefault("ACCELERATE_TORCH_DEVICE", torch.accelerator.current_accelerator().type)
    if torch_spyre is not None:
        torch_spyre.fallback_counts(reset=True)
    losses, device = finetune(size, args.device, args.out)
    fallbacks = torch_spyre.fallback_counts() if torch_spyre is not None and device.startswith("spyre") else {}
    result = {"device": device, "losses": losses, "fallbacks": fallbacks}
    if args.check:
        # Its own process: accelerate's state is one per process, and it now holds the accelerator.
        cpu_run = [sys.executable, __file__, "--device", "cpu", "--json", "--out", args.out]
        env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_TORCH_DEVICE"}
        cpu = subprocess.run(cpu_run + (["--tiny"] if args.tiny else []), capture_output=True, text=True, env=env)
        if cpu.returncode != 0:
            sys.exit(f"the CPU run failed:\n{cpu.stderr}")
        result["cpu_losses"] = json.loads(cpu.stdout.splitlines()[-1])["losses"]
    if args.json:
        print(json.dumps(result))
    else:
        print(f"LoRA fine-tuning on {device}: {len(losses)} steps")
        for i, loss in enumerate(losses):
            cpu = f"   cpu {result['cpu_losses'][i]:.4f}" if args.check else ""
            print(f"  step {i + 1:3d}  loss {loss:.4f}{cpu}")
        print(f"ops that fell back to the CPU: {fallbacks or 'none'}")
    if not args.check:
        return 0
    # fp32 on both; the device's matmuls accumulate in another order, so the losses agree closely,
    # not bit for bit, and the gap may grow a little with the steps.
    far = [
        (i, a, b)
        for i, (a, b) in enumerate(zip(losses, result["cpu_losses"], strict=True))
        if not math.isclose(a, b, rel_tol=2e-3, abs_tol=2e-3)
    ]
    fell = losses[-1] < 0.85 * losses[0]
    if far or not fell or fallbacks or not device.startswith("spyre"):
        print(
            f"check failed: device {device}, steps far from the CPU {far}, loss fell: {fell}, fallbacks {fallbacks}",
            file=sys.stderr,
        )
        return 1
    print("check passed: the loss fell and matches the CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
