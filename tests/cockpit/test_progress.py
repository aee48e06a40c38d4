"""Elapsed time, rate and ETA from event times, against hand-computed values."""

from __future__ import annotations

import pytest

from cockpit.progress import ProgressTracker

# ProgressTracker ------------------------------------------------------------------------------------


def test_progress_tracker_from_event_times() -> None:
    p = ProgressTracker(window=10)
    assert p.elapsed is None and p.rate is None
    p.start(100.0)
    p.add_step(102.0, 10)
    assert p.rate is None  # one point
    p.add_step(112.0, 60)
    assert p.rate == pytest.approx(5.0)
    assert p.elapsed == pytest.approx(12.0)
    assert p.eta(60, 110) == pytest.approx(10.0)
    p.observe(120.0)  # e.g. telemetry while paused: elapsed moves on
    assert p.elapsed == pytest.approx(20.0)
    p.forget_rate()
    assert p.rate is None
    p.add_step(130.0, 70)
    assert p.rate is None
    p.add_step(131.0, 75)
    assert p.rate == pytest.approx(5.0)


def test_progress_tracker_of_a_resumed_run_counts_the_time_trained_before() -> None:
    p = ProgressTracker(window=10)
    p.start(1000.0, before=600.0)  # 10 minutes trained in earlier sessions
    assert p.elapsed == pytest.approx(600.0)
    p.add_step(1002.0, 251)
    p.add_step(1004.0, 252)
    assert p.elapsed == pytest.approx(604.0)
    assert p.rate == pytest.approx(0.5)  # the rate is this session's own
    p.start(2000.0)  # a new run: nothing before
    assert p.elapsed == pytest.approx(0.0)
