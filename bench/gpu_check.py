"""One prepared GPU check: CUDA path, bf16, torch.compile, NVML, memory against the allocator.

    python bench/gpu_check.py --data PATH/input.txt [--steps 5000] [--out DIR]

Prints, on a CUDA machine:
1. NVML telemetry as the cockpit's poller reads it;
2. `shakespeare-char` trained on the GPU in bf16 with torch.compile (tokens/s, val loss on the
   whole val split, train time) and a short uncompiled run for comparison;
3. for 3 model/batch configurations: the peak memory of one AdamW training step measured by
   `torch.cuda.max_memory_allocated`, against the engine's exact tensor sizes and its
   activation estimate.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from engine.config import ModelConfig, OptimConfig, load_preset
from engine.model import GPT
from engine.optim import build_optimizer
from engine.plan import memory
from engine.telemetry import select_backend
from engine.train import Trainer


def telemetry() -> None:
    backend = select_backend()
    reading = backend.read()
    print(f"telemetry source: {reading.source} {reading.reason}")
    for gpu in reading.gpus:
        print(f"  {gpu}")
    backend.close()


def train(preset: str, data: str, overrides: list[str], out: Path) -> dict:
    cfg = load_preset(preset, overrides)
    steps: list = []
    evals: list = []

    def sink(event) -> None:
        if event.kind == "step":
            steps.append(event)
        elif event.kind == "eval":
            evals.append(event)
            print(f"  eval {event.step}: val {event.val_loss:.4f} train {event.train_loss:.4f} train_time {event.train_time_s:.1f}s", flush=True)
        elif event.kind == "alert":
            print(f"  alert: {event.message}", flush=True)

    t0 = time.perf_counter()
    trainer = Trainer(cfg, run_dir=out / f"{preset}-{int(t0)}", data_path=data, sinks=[sink], telemetry=False)
    state = trainer.run()
    wall = time.perf_counter() - t0
    late = [s.tokens_per_s for s in steps[len(steps) // 2 :]]
    result = {
        "preset": preset,
        "overrides": overrides,
        "state": state,
        "wall_s": round(wall, 1),
        "tokens_per_s_median": sorted(late)[len(late) // 2] if late else None,
        "final_val": evals[-1].val_loss if evals else None,
        "train_time_s": evals[-1].train_time_s if evals else None,
        "peak_mem_gb": torch.cuda.max_memory_allocated() / 1e9,
    }
    print(json.dumps(result), flush=True)
    return result


def memory_check(cfg: ModelConfig, batch: int, vocab: int = 50304) -> dict:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    device = torch.device("cuda")
    model = GPT(cfg, vocab).to(device)
    opt = build_optimizer(model, OptimConfig(), "cuda")
    x = torch.randint(vocab, (batch, cfg.block_size), device=device)
    # one warm step creates gradients and optimizer state
    for warm in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, loss = model(x, x)
        loss.backward()
        opt.step()
        if warm == 0:
            opt.zero_grad(set_to_none=False)  # keep grads allocated: the steady state
    torch.cuda.synchronize()
    static = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _, loss = model(x, x)
    loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    exact = memory.weight_bytes(model) + memory.gradient_bytes(model) + memory.optimizer_bytes(opt)
    estimate = memory.activation_bytes_estimate(
        batch, cfg.block_size, cfg.n_embd, cfg.n_head, cfg.n_layer, vocab, 2, grad_checkpoint=cfg.grad_checkpoint
    )
    result = {
        "config": f"{cfg.n_layer}x{cfg.n_embd} block {cfg.block_size} batch {batch} ckpt {cfg.grad_checkpoint}",
        "static_allocated_gb": static / 1e9,
        "exact_weights_grads_opt_gb": exact / 1e9,
        "activations_measured_gb": (peak - static) / 1e9,
        "activations_estimate_gb": estimate / 1e9,
        "ratio_estimate_over_measured": estimate / max(1, peak - static),
    }
    print(json.dumps(result), flush=True)
    del model, opt, x, loss
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--out", default="/tmp/gpu-runs")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bf16 {torch.cuda.is_bf16_supported()}")
    telemetry()
    print("memory: one bf16 AdamW step, measured vs estimated")
    for cfg, batch in (
        (ModelConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024), 8),
        (ModelConfig(n_layer=6, n_head=6, n_embd=384, block_size=256), 64),
        (ModelConfig(n_layer=24, n_head=16, n_embd=1024, block_size=1024, grad_checkpoint=True), 8),
    ):
        memory_check(cfg, batch)
    print("shakespeare-char, uncompiled, 300 steps")
    train("shakespeare-char", args.data, ["train.max_steps=300", "eval.interval=0", "sample.interval=0", "checkpoint.interval=0", "eval.full_val=true"], out)
    print(f"shakespeare-char, compiled, {args.steps} steps")
    train("shakespeare-char", args.data, [f"train.max_steps={args.steps}", "train.compile=true", "eval.interval=500", "eval.full_val=true", "sample.interval=2500"], out)


if __name__ == "__main__":
    main()
