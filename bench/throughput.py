"""Engine bookkeeping cost: tokens/s of the engine against a minimal PyTorch loop.

Both train the same model (engine.model.gpt.GPT) on the same batches of the `nanogpt-cpu` preset;
the runs alternate so machine noise hits both alike. Tokens/s is measured from the wall clock
between step `warmup` and the last step, so everything the engine does per step is included
(events, metrics file, loss read-back, telemetry thread).

    python bench/throughput.py [--steps 300] [--rounds 3] [--data PATH]

Goal: ratio (engine / minimal) >= 0.98.

Both run at the same fixed thread count (the engine's `train.threads` set to it): the engine's
measured choice of threads (engine/train/thread_tuner.py) would change the arithmetic, not the
bookkeeping. What the tuner adds to a step when nothing changes is timed on its own, last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from engine.config import load_preset
from engine.data import prepare
from engine.data.batches import BatchSampler
from engine.model import GPT
from engine.optim import build_optimizer
from engine.train import Trainer, apply_threads
from engine.train.thread_tuner import ThreadTuner

SHAKESPEARE = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare" / "input.txt"
)


def minimal_loop(cfg, data, steps: int, warmup: int) -> float:
    """The plainest loop that does the same work: tokens/s after `warmup` steps."""
    torch.manual_seed(cfg.train.seed)
    model = GPT(cfg.model, data.tokenizer.vocab_size)
    optimizer = build_optimizer(model, cfg.optim, "cpu")
    batches = BatchSampler(
        data.train, cfg.model.block_size, cfg.train.batch_size, torch.device("cpu"), 0
    )
    for step in range(steps):
        if step == warmup:
            t0 = time.perf_counter()
        x, y = batches.next()
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()  # the engine reads every loss back too (log_every=1 on CPU)
    return (steps - warmup) * cfg.tokens_per_step / (time.perf_counter() - t0)


def engine_run(cfg, data_path: str, steps: int, warmup: int) -> float:
    times: dict[int, float] = {}

    def clock(event) -> None:
        if event.kind == "step":
            times[event.step] = time.perf_counter()

    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(cfg, run_dir=run_dir, data_path=data_path, sinks=[clock])
        assert trainer.run() == "finished"
    return (steps - warmup) * cfg.tokens_per_step / (times[steps] - times[warmup])


def tuner_cost_s(step_time_s: float, calls: int = 200_000) -> float:
    """Seconds the thread tuner adds to a step when nothing changes: settled, fed a steady step
    time (the loop around it included: an upper bound)."""
    tuner = ThreadTuner((1, 2), 1, lambda choice: None, set_threads=lambda n: None)
    while tuner.measuring:
        tuner.step_done(step_time_s)
    t0 = time.perf_counter()
    for _ in range(calls):
        tuner.step_done(step_time_s)
    return (time.perf_counter() - t0) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--data", default=os.environ.get("COCKPIT_TINYSHAKESPEARE", str(SHAKESPEARE))
    )
    args = parser.parse_args()

    overrides = [
        f"train.max_steps={args.steps}",
        "eval.interval=0",
        "sample.interval=0",
        "checkpoint.interval=0",
    ]
    cfg = load_preset("nanogpt-cpu", overrides)
    data = prepare(cfg.data, data_path=args.data)
    # the engine sets its threads when it trains; the minimal loop runs with the same count,
    # from its first round on
    apply_threads(cfg.train.threads, "cpu")
    cfg = load_preset("nanogpt-cpu", [*overrides, f"train.threads={torch.get_num_threads()}"])
    print(
        f"nanogpt-cpu: {args.steps} steps x {cfg.tokens_per_step} tokens, {torch.get_num_threads()} threads"
    )
    engine, minimal = [], []
    for r in range(args.rounds):
        minimal.append(minimal_loop(cfg, data, args.steps, args.warmup))
        engine.append(engine_run(cfg, args.data, args.steps, args.warmup))
        print(f"round {r + 1}: minimal {minimal[-1]:,.0f} tok/s   engine {engine[-1]:,.0f} tok/s")
    m, e = statistics.median(minimal), statistics.median(engine)
    print(
        f"median: minimal {m:,.0f} tok/s   engine {e:,.0f} tok/s   ratio {e / m:.3f} (goal >= 0.98)"
    )
    step_s = cfg.tokens_per_step / e
    cost = tuner_cost_s(step_s)
    print(
        f"thread tuner, settled: {cost * 1e6:.2f} us a step ({cost / step_s:.4%} of the engine's step)"
    )


if __name__ == "__main__":
    main()
