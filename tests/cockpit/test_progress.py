"""Rate and ETA from event times, against hand-computed values."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cockpit.cli import headless
from cockpit.figures.durations import fmt_duration
from cockpit.figures.progress import ProgressTracker, schedule_eta, step_time_fit
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


def test_the_eta_of_a_growing_batch_models_a_steps_time_from_its_tokens() -> None:
    """A step costs a fixed time plus a time per token (QA: weighing steps by tokens alone put
    a small model's ETA 8 to 13 times too high). Hand count: steps of 100 tokens take 1 s, of
    200 tokens 1.5 s, so a = 0.5 s and b = 0.005 s a token, and a step of 400 tokens 2.5 s."""
    schedule = ((0, 100), (10, 200), (20, 400))  # tokens a step: x1, x2 from step 10, x4 from 20
    p = ProgressTracker(window=10)
    p.start(0.0)
    p.tokens_schedule = schedule
    for step in range(1, 11):
        p.add_step(float(step), step)  # steps 1-10: 100 tokens, 1 s each
    assert p.eta(10, 30) is None  # only one size measured, and sizes ahead not: no estimate yet
    for step in range(11, 13):
        p.add_step(10.0 + 1.5 * (step - 10), step)  # steps 11-12: 200 tokens, 1.5 s each
    # ahead: 8 steps of 200 at their measured 1.5 s, 10 of 400 at 0.5 + 0.005 x 400 = 2.5 s
    assert p.eta(12, 30) == pytest.approx(8 * 1.5 + 10 * 2.5)
    p.tokens_schedule = ()
    assert p.eta(12, 30) == pytest.approx(18 / p.rate)  # without one: the step rate, as before


def test_the_step_time_fit_keeps_its_terms_non_negative() -> None:
    assert step_time_fit({100: 1.0}) is None
    assert step_time_fit({100: 1.0, 200: 1.5}) == pytest.approx((0.5, 0.005))
    assert step_time_fit({100: 1.0, 200: 0.9}) == pytest.approx((0.95, 0.0))  # noise: fixed cost
    # a line through (100, 0.1) and (200, 1.0) crosses below 0: proportional through the origin
    assert step_time_fit({100: 0.1, 200: 1.0}) == pytest.approx((0.0, (10 + 200) / 50_000))


def test_a_schedules_steps_ahead_of_measured_sizes_take_their_own_times() -> None:
    schedule = ((0, 100), (10, 400))
    assert schedule_eta(schedule, {400: [2.0, 3.0, 2.5]}, 12, 30) == pytest.approx(18 * 2.5)  # median
    assert schedule_eta(schedule, {100: [1.0]}, 5, 30) is None  # 400 never measured, one size only
    assert schedule_eta(schedule, {100: [1.0]}, 5, 10) == pytest.approx(5.0)
    assert schedule_eta(schedule, {}, 30, 30) == 0.0


def test_the_headless_eta_of_a_growing_batch_models_each_sizes_step_time(monkeypatch) -> None:
    now = [0.0]
    monkeypatch.setattr(headless.time, "monotonic", lambda: now[0])
    lines: list[str] = []
    printer = headless.ProgressPrinter(out=lines.append, interval_s=0.0, clock=lambda: now[0])
    started = SimpleNamespace(
        kind="run_started", max_steps=30, start_step=0, preset="tiny", n_params=1e5, device="cpu",
        dtype="float32", tokenizer="char", vocab_size=65, train_tokens=1000, run_dir="runs/x",
        resumed_from=None, notes=(), tokens_schedule=((0, 100), (10, 200), (20, 400)), config={},
    )  # fmt: skip
    printer(started)

    def step(n: int) -> Step:
        return Step(step=n, loss=3.0, lr=1e-3, grad_norm=1.0, tokens_per_s=100.0, step_time_s=1.0, tokens=100)

    for n in range(1, 11):  # 100-token steps of 1 s; the first counts startup too (5 s)
        now[0] = 4.0 + n
        printer(step(n))
    assert lines[-1].endswith("ETA - (measuring)")  # one size measured, others ahead
    for n in (11, 12):  # 200-token steps of 1.5 s
        now[0] = 14.0 + 1.5 * (n - 10)
        printer(step(n))
    # 8 steps of 200 at 1.5 s, 10 of 400 at 0.5 + 0.005 x 400 s (proportional: 1.5 x 8 + 3 x 10)
    assert lines[-1].endswith(f"ETA {fmt_duration(8 * 1.5 + 10 * 2.5)}")
