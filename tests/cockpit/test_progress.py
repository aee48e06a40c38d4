"""Rate and ETA from event times, against hand-computed values."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cockpit.cli import headless
from cockpit.figures.durations import fmt_duration
from cockpit.figures.progress import ProgressTracker
from engine.events import Step

# ProgressTracker ------------------------------------------------------------------------------------


def test_progress_tracker_from_event_times() -> None:
    p = ProgressTracker(window=10)
    assert p.rate is None
    p.start(100.0)
    p.add_step(102.0, 10)
    assert p.rate is None  # one point
    p.add_step(112.0, 60)
    assert p.rate == pytest.approx(5.0)
    assert p.eta(60, 110) == pytest.approx(10.0)
    p.observe(120.0)  # e.g. telemetry while paused
    p.forget_rate()
    assert p.rate is None
    p.add_step(130.0, 70)
    assert p.rate is None
    p.add_step(131.0, 75)
    assert p.rate == pytest.approx(5.0)


def test_progress_tracker_of_a_resumed_run_measures_this_sessions_rate() -> None:
    p = ProgressTracker(window=10)
    p.start(1000.0)
    p.add_step(1002.0, 251)
    p.add_step(1004.0, 252)
    assert p.rate == pytest.approx(0.5)  # the rate is this session's own
    p.start(2000.0)  # a new run: its rate afresh
    assert p.rate is None


def test_the_eta_of_a_growing_batch_weighs_each_step_by_its_tokens() -> None:
    schedule = ((0, 100), (10, 200), (20, 400))  # tokens a step: x1, x2 from step 10, x4 from 20
    p = ProgressTracker(window=10)
    p.start(0.0)
    p.tokens_schedule = schedule
    p.add_step(1.0, 1)
    p.add_step(5.0, 5)  # 4 steps of 100 tokens in 4 s: 100 tokens/s
    # ahead: 5 steps of 100, 10 of 200, 10 of 400 = 6,500 tokens at 100/s (steps alone: 25 s)
    assert p.eta(5, 30) == pytest.approx(65.0)
    p.tokens_schedule = ()
    assert p.eta(5, 30) == pytest.approx(25.0)  # without one: the step rate, as before


def test_the_headless_eta_of_a_growing_batch_counts_tokens(monkeypatch) -> None:
    now = [0.0]
    monkeypatch.setattr(headless.time, "monotonic", lambda: now[0])
    lines: list[str] = []
    printer = headless.ProgressPrinter(out=lines.append, interval_s=0.0, clock=lambda: now[0])
    started = SimpleNamespace(
        kind="run_started", max_steps=30, start_step=0, preset="tiny", n_params=1e5, device="cpu",
        dtype="float32", tokenizer="char", vocab_size=65, train_tokens=1000, run_dir="runs/x",
        resumed_from=None, notes=(), tokens_schedule=((0, 100), (10, 200), (20, 400)),
    )  # fmt: skip
    printer(started)
    now[0] = 5.0  # 5 steps of 100 tokens in 5 s; ahead: 5 x 100 + 10 x 200 + 10 x 400 tokens
    printer(Step(step=5, loss=3.0, lr=1e-3, grad_norm=1.0, tokens_per_s=100.0, step_time_s=1.0, tokens=500))
    assert lines[-1].endswith(f"ETA {fmt_duration(65.0)}")  # steps alone: 25 s
