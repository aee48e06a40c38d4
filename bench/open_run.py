"""How long opening a long finished run takes: its curves (read_curves, what an overlay draws), its
replay (RecordedRun + drain_events, what reopening it in the app draws), and the app itself opened
on it as `cockpit compare RUN` opens it, until its loss panel has drawn the whole run.

    python bench/open_run.py [--steps 1000000] [--repeats 3]

Writes one run directory in a temporary directory the way the engine writes it: one
MetricsWriter given real events (a run_started, STEPS steps, an eval and a sample every 250
steps, a checkpoint every 5,000, a few LR changes, the memory breakdown, a final state). Then
times each reader (the median of REPEATS) against the goal: < 2 s for a million steps.

The app's figure (issue 16: "< 2 s to a drawn screen"): `CockpitApp(lambda _p: RecordedRun(run_dir),
name)` headless at 160x48 (Textual's headless driver: layout, plots and compositing run, only the
terminal writes are dropped), timed from constructing the app until the loss panel has drawn the
run's curve with every step routed (`draw_count > 0` and `app.view.step == STEPS`). The app's
imports are not in it (they happen once, before).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.events import (  # noqa: E402
    CheckpointSaved,
    Eval,
    LrChanged,
    MemoryBreakdown,
    RunStarted,
    Sample,
    StateChanged,
    Step,
)
from engine.rundir import MetricsWriter, RecordedRun, read_curves  # noqa: E402

GOAL_S = 2.0
SIZE = (160, 48)  # the terminal the app draws in
APP_TIMEOUT_S = 120.0  # a drawn screen later than this is a failure, not a figure
EVAL_EVERY, CHECKPOINT_EVERY, LR_CHANGE_EVERY = 250, 5000, 200_000
TOKENS_PER_STEP = 16384


def float32(x: float) -> float:
    """What a loss read off a float32 tensor looks like once written (4.598853588104248)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def write_run(run_dir: Path, steps: int, seed: int = 0) -> float:
    """The run's metrics.jsonl (its noise drawn from `seed`); returns the seconds it took."""
    t0 = time.perf_counter()
    rng = random.Random(seed)
    now = 1.8e9
    run_dir.mkdir(parents=True)
    writer = MetricsWriter(run_dir / "metrics.jsonl")
    writer(StateChanged(state="starting", step=0, time=now))
    writer(RunStarted(
        run_dir=str(run_dir), preset="bench", description="bench/open_run.py", config={},
        device="cuda", dtype="bfloat16", n_params=124_000_000, n_params_non_embedding=85_000_000,
        vocab_size=50304, tokenizer="gpt2", train_tokens=9_000_000_000, val_tokens=10_000_000,
        start_step=0, max_steps=steps, tokens_per_step=TOKENS_PER_STEP,
        planned_lr=((0, 0.0), (steps // 100, 6e-4), (steps, 6e-5)), time=now + 1,
    ))  # fmt: skip
    writer(MemoryBreakdown(step=0, device="cuda", capacity=80 << 30, weights=1 << 29, gradients=1 << 29,
                           optimizer=1 << 30, activations=20 << 30, activations_measured=True,
                           cache=1 << 28, other=1 << 29, time=now + 2))  # fmt: skip
    writer(StateChanged(state="running", step=0, time=now + 2))
    train_s, lr = 0.0, 6e-4
    for n in range(1, steps + 1):
        step_time = 0.05 + rng.random() * 0.002
        train_s += step_time
        now += step_time
        loss = float32(2.8 + 8.0 / math.sqrt(n) + rng.random() * 0.05)
        writer(Step(
            step=n, loss=loss, lr=lr, grad_norm=float32(0.3 + rng.random()), step_time_s=step_time,
            tokens_per_s=TOKENS_PER_STEP / step_time, tokens=n * TOKENS_PER_STEP,
            mfu=0.4 + rng.random() * 0.01, data_time_s=rng.random() * 1e-4,
            update_ratio=rng.random() * 1e-3 if n % 100 == 0 else math.nan, time=now,
        ))  # fmt: skip
        if n % EVAL_EVERY == 0:
            writer(Eval(step=n, train_loss=loss, val_loss=float32(loss + 0.05), train_time_s=train_s, time=now + 0.01))
            writer(Sample(step=n, prompt="The ", text="The quick brown fox", time=now + 0.02))
        if n % CHECKPOINT_EVERY == 0:
            writer(CheckpointSaved(step=n, path=str(run_dir / f"ckpt-{n:08d}.pt"), reason="interval", time=now + 0.03))
        if n % LR_CHANGE_EVERY == 0:
            writer(LrChanged(step=n, old_lr=lr, new_lr=lr / 2, scale=0.5, time=now + 0.04))
            lr /= 2
    writer(StateChanged(state="finished", step=steps, time=now + 1))
    writer.close()
    return time.perf_counter() - t0


def median_time(action: Callable[[], object], repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


async def open_in_app(run_dir: Path, steps: int) -> float:
    """Seconds from constructing the app on the finished run in `run_dir` until its loss panel
    has drawn the run: every step routed (the view is at the run's last step) and a plot built."""
    from cockpit.app.cockpit_app import CockpitApp  # here: bench/compare.py imports write_run alone

    t0 = time.perf_counter()
    app = CockpitApp(lambda _p: RecordedRun(run_dir), run_dir.name)
    async with app.run_test(size=SIZE):
        panel = app.main_screen.loss_panel
        # polled with plain sleeps: pilot.pause() would add a round trip through every widget
        while not (panel.draw_count > 0 and app.view.step == steps):
            if time.perf_counter() - t0 > APP_TIMEOUT_S:
                raise RuntimeError(
                    f"the app drew no loss curve at step {steps:,} within {APP_TIMEOUT_S:.0f} s "
                    f"(view at step {app.view.step:,}, {panel.draw_count} draws)"
                )
            await asyncio.sleep(0.005)
        return time.perf_counter() - t0


def verdict(seconds: float, steps: int) -> str:
    if steps < 1_000_000:
        return f"(the goal, < {GOAL_S:g} s, is for 1,000,000 steps)"
    return f"(goal < {GOAL_S:g} s: {'PASS' if seconds < GOAL_S else 'FAIL'})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="steps in the run (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=3, help="times each reader runs (the median counts)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        print("open_run: --steps and --repeats must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="open-run-") as tmp:
        run_dir = Path(tmp) / "long-run"
        built = write_run(run_dir, args.steps)
        size = (run_dir / "metrics.jsonl").stat().st_size
        print(f"wrote a run of {args.steps:,} steps ({size / 1e6:,.1f} MB of metrics.jsonl) in {built:.1f} s")
        seconds, curves = median_time(lambda: read_curves(run_dir), args.repeats)
        points = len(curves.step) + len(curves.val_step)  # type: ignore[attr-defined]
        print(f"read_curves: {points:,} points, median of {args.repeats} {seconds:.2f} s {verdict(seconds, args.steps)}")

        def reopen() -> int:
            return len(RecordedRun(run_dir).drain_events())

        seconds, events = median_time(reopen, args.repeats)
        print(
            f"RecordedRun + drain_events: {events:,} events, median of {args.repeats} {seconds:.2f} s "
            f"{verdict(seconds, args.steps)}"
        )
        times = [asyncio.run(open_in_app(run_dir, args.steps)) for _ in range(args.repeats)]
        print(
            f"the app opened on it ({SIZE[0]}x{SIZE[1]}, headless) to a drawn loss curve: median of "
            f"{args.repeats} {statistics.median(times):.2f} s (each {', '.join(f'{t:.2f}' for t in times)} s) "
            f"{verdict(statistics.median(times), args.steps)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
