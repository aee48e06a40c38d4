"""Rate and ETA from event times, against hand-computed values."""

from __future__ import annotations

import pytest

from cockpit.figures.progress import ProgressTracker

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
