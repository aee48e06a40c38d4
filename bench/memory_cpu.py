"""The planner's activation estimate against a measurement on the CPU, for 3 configurations.

    python bench/memory_cpu.py

Each configuration runs in a fresh process with glibc's mmap threshold lowered, so freed tensor
memory goes straight back to the OS and RSS follows live tensors. The process first makes the
gradients and optimizer state exist with a one-sequence step, then records its RSS; the
high-water mark (ru_maxrss) after one forward-backward of the real batch, minus that baseline,
is the memory the step's activations took. Goal: the estimate within 15% of the measurement.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CONFIGS = [
    # (n_layer, n_head, n_embd, block_size, batch, vocab)
    (4, 4, 128, 64, 12, 65),  # nanogpt-cpu
    (6, 6, 384, 256, 16, 65),  # shakespeare-char's shape, smaller batch
    (4, 8, 512, 512, 4, 50257),  # a BPE model: the logits dominate
]

CHILD = r"""
import json, resource, sys
import psutil, torch
from engine.config import ModelConfig, OptimConfig
from engine.model import GPT
from engine.optim import build_optimizer
from engine.memory import activation_bytes_estimate

n_layer, n_head, n_embd, block, batch, vocab = json.loads(sys.argv[1])
torch.manual_seed(0)
cfg = ModelConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block)
model = GPT(cfg, vocab)
opt = build_optimizer(model, OptimConfig(), "cpu")
x1 = torch.randint(vocab, (1, block))
model(x1, x1)[1].backward()
opt.step()
opt.zero_grad(set_to_none=False)  # gradients stay allocated, as during a real step
x = torch.randint(vocab, (batch, block))
y = torch.randint(vocab, (batch, block))
baseline = psutil.Process().memory_info().rss
model(x, y)[1].backward()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
estimate = activation_bytes_estimate(batch, block, n_embd, n_head, n_layer, vocab, 4)
print(json.dumps({"measured": peak - baseline, "estimate": estimate}))
"""


def main() -> None:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    print(f"{'configuration':<42} {'estimate':>10} {'measured':>10} {'est/meas':>9}")
    for config in CONFIGS:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(config)], capture_output=True, text=True, env=env, check=True
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        n_layer, n_head, n_embd, block, batch, vocab = config
        label = f"{n_layer}x{n_embd} h{n_head} block {block} batch {batch} vocab {vocab}"
        print(f"{label:<42} {r['estimate'] / 2**20:>8.1f}Mi {r['measured'] / 2**20:>8.1f}Mi {r['estimate'] / r['measured']:>9.2f}")


if __name__ == "__main__":
    main()
