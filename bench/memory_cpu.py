"""The planner's activation estimate against a measurement on the CPU, with and without
gradient checkpointing.

    python bench/memory_cpu.py [INDEX ...]
    python bench/memory_cpu.py --recompute [INDEX ...]   # model.grad_checkpoint's modes
    python bench/memory_cpu.py --head-loss [BATCH BLOCK]  # chunked loss against full logits

Each configuration runs in a fresh process, twice:
- "live": glibc's mmap threshold lowered, so freed tensor memory goes straight back to the OS
  and RSS follows live tensors. This is what `activation_bytes_estimate` models.
- "process": glibc as it comes, as in a real run. Its heap keeps freed buffers, so the RSS can
  peak above the live tensors; with checkpointing by about one block of activations (the
  recomputed blocks' buffers), which `plan_memory` adds to the CPU overhead.
The process first makes the gradients and optimizer state exist with a one-sequence step, then
records its RSS; the high-water mark (ru_maxrss) over three training steps of the real batch,
minus that baseline, is the memory the steps' activations took. Goal: each estimate within 15%
of its measurement.

--head-loss: one micro-batch (forward and backward) of gpt2-small's model with a short block
(default batch 16, block 128: 2,048 tokens), its loss computed in chunks (`head_loss`, as
training does) and from the full logits (`full_logits=True`, the path before), each in a fresh
process in both modes, beside the plan's figure for each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CONFIGS = [
    # (n_layer, n_head, n_embd, block_size, batch, vocab, grad_checkpoint)
    (4, 4, 128, 64, 12, 65, False),  # nanogpt-cpu
    (6, 6, 384, 256, 16, 65, False),  # shakespeare-char's shape, smaller batch
    (4, 8, 512, 512, 4, 50257, False),  # a BPE model: the logits dominate
    # gradient checkpointing: the block inputs, plus one block recomputed with its backward
    # issue 10's case: the default preset with block 256, n_embd 256 (`cockpit plan` was 19-28%
    # under the run's peak RSS); without checkpointing for comparison
    (4, 4, 256, 256, 32, 103, True),
    (4, 4, 256, 256, 64, 103, True),
    (4, 4, 256, 256, 32, 103, False),
    (4, 8, 512, 512, 4, 50257, True),  # checkpointed with large logits
]

# --recompute: each model.grad_checkpoint mode on one shape with a small vocabulary, so the
# blocks' activations are most of the step: (..., mode, recompute_blocks)
RECOMPUTE_CONFIGS = [
    (4, 4, 256, 256, 32, 103, mode, blocks)
    for mode, blocks in (("none", 0), ("mlp", 0), ("mlp", 2), ("full", 1), ("full", 3), ("full", 0))
]

CHILD = r"""
import json, resource, sys
import psutil, torch
from engine.config.run_config import ModelConfig, OptimConfig
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.plan.memory import activation_bytes_estimate, layer_activation_bytes, mlp_recompute_saving

n_layer, n_head, n_embd, block, batch, vocab, ckpt, *rest = json.loads(sys.argv[1])
blocks = rest[0] if rest else 0  # --recompute: how many blocks the mode applies to
torch.manual_seed(0)
cfg = ModelConfig(
    n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block, grad_checkpoint=ckpt,
    recompute_blocks=blocks,
)
model = GPT(cfg, vocab)
opt = build_optimizer(model, OptimConfig(), "cpu")
x1 = torch.randint(vocab, (1, block))
model(x1, x1)[1].backward()
opt.step()
opt.zero_grad(set_to_none=False)  # gradients stay allocated, as during a real step
x = torch.randint(vocab, (batch, block))
y = torch.randint(vocab, (batch, block))
baseline = psutil.Process().memory_info().rss
for _ in range(3):
    model(x, y)[1].backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
estimate = activation_bytes_estimate(
    batch, block, n_embd, n_head, n_layer, vocab, 4, grad_checkpoint=ckpt, recompute_blocks=blocks
)
# what plan_memory adds to the CPU overhead for the glibc heap under recompute
retained = 0
if cfg.grad_checkpoint == "full":
    retained = layer_activation_bytes(batch, block, n_embd, n_head, 4)
elif cfg.grad_checkpoint == "mlp":
    retained = mlp_recompute_saving(batch, block, n_embd, 4)
print(json.dumps({"measured": peak - baseline, "estimate": estimate, "retained": retained}))
"""


HEAD_LOSS_CHILD = r"""
import dataclasses, json, resource, sys
import psutil, torch
from engine.config import load_preset
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.plan.memory import activation_bytes_estimate, head_loss_bytes

batch, block, full = json.loads(sys.argv[1])
torch.manual_seed(0)
preset = load_preset("gpt2-small")
cfg = dataclasses.replace(preset.model, block_size=block)
model = GPT(cfg, 50257)  # r50k_base
vocab = model.lm_head.weight.size(0)  # the padded rows are computed too
opt = build_optimizer(model, preset.optim, "cpu")
x1 = torch.randint(50257, (1, block))
model(x1, x1, full_logits=full)[1].backward()
opt.step()
opt.zero_grad(set_to_none=False)  # gradients and moments exist, as during a real step
x, y = torch.randint(50257, (2, batch, block))
baseline = psutil.Process().memory_info().rss
model(x, y, full_logits=full)[1].backward()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
estimate = activation_bytes_estimate(batch, block, cfg.n_embd, cfg.n_head, cfg.n_layer, vocab, 4)
if full:  # the plan before: 12 bytes per logit of the whole micro-batch
    estimate += batch * block * vocab * 12 - head_loss_bytes(batch, block, cfg.n_embd, vocab, 4)
print(json.dumps({"measured": peak - baseline, "estimate": estimate}))
"""


def head_loss_comparison(batch: int, block: int) -> None:
    mi = 2**20
    print(
        f"gpt2-small, batch {batch} x block {block}: one micro-batch's activations "
        f"(forward + backward), fp32 on the CPU"
    )
    print(f"{'loss':<24} {'plan':>9} {'live: measured':>15} {'ratio':>6}   {'process: measured':>18}")
    rows = {}
    for full in (False, True):
        live = measure([batch, block, full], True, HEAD_LOSS_CHILD)
        process = measure([batch, block, full], False, HEAD_LOSS_CHILD)
        rows[full] = (live, process)
        name = "full logits (before)" if full else "chunked (head_loss)"
        est = live["estimate"]
        print(
            f"{name:<24} {est / mi:>7.0f}Mi {live['measured'] / mi:>13.0f}Mi {est / live['measured']:>6.2f}"
            f"   {process['measured'] / mi:>16.0f}Mi"
        )
    (live_c, proc_c), (live_f, proc_f) = rows[False], rows[True]
    print(
        f"drop: plan {(live_f['estimate'] - live_c['estimate']) / mi:.0f}Mi, live "
        f"{(live_f['measured'] - live_c['measured']) / mi:.0f}Mi, process "
        f"{(proc_f['measured'] - proc_c['measured']) / mi:.0f}Mi"
    )


def measure(config: tuple | list, live: bool, child: str = CHILD) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if live:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    out = subprocess.run(
        [sys.executable, "-c", child, json.dumps(config)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--head-loss"]:
        batch, block = (int(a) for a in sys.argv[2:4]) if len(sys.argv) >= 4 else (16, 128)
        head_loss_comparison(batch, block)
        return
    recompute = "--recompute" in sys.argv[1:]
    configs = RECOMPUTE_CONFIGS if recompute else CONFIGS
    only = [a for a in sys.argv[1:] if a != "--recompute"]  # optional: indices to run
    mi = 2**20
    print(f"{'configuration':<52} {'live: estimate':>15} {'measured':>9} {'ratio':>6}   {'process: estimate':>18} {'measured':>9} {'ratio':>6}")
    for i, config in enumerate(configs):
        if only and str(i) not in only:
            continue
        live, process = measure(config, True), measure(config, False)
        n_layer, n_head, n_embd, block, batch, vocab, ckpt, *rest = config
        label = f"{n_layer}x{n_embd} h{n_head} block {block} batch {batch} vocab {vocab}"
        if recompute:
            label += f" {ckpt} x{rest[0] or n_layer}"
        else:
            label += " grad-ckpt" if ckpt else ""
        est = live["estimate"]
        est_process = est + process["retained"]
        print(
            f"{label:<52} {est / mi:>13.1f}Mi {live['measured'] / mi:>7.1f}Mi {est / live['measured']:>6.2f}"
            f"   {est_process / mi:>16.1f}Mi {process['measured'] / mi:>7.1f}Mi {est_process / process['measured']:>6.2f}"
        )


if __name__ == "__main__":
    main()
