"""Axis maths: round ticks and steady limits, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from cockpit.figures.axes import nice_ticks, steady_limits

# nice_ticks -----------------------------------------------------------------------------------------


def test_nice_ticks() -> None:
    assert nice_ticks(0, 2000, 5) == [0, 500, 1000, 1500, 2000]
    assert nice_ticks(1.3, 4.5, 4) == [2, 4]
    assert nice_ticks(0, 1.3e-3, 4) == pytest.approx([0, 5e-4, 1e-3])
    assert nice_ticks(3, 3, 4) == [3]
    assert nice_ticks(0, float("nan"), 4) == []
    # ranges below floating-point resolution must not loop forever
    assert nice_ticks(1.9999999999999996, 2.0000000000000004, 9) == [1.9999999999999996]
    assert nice_ticks(1e9, 1e9 + 1e-6, 5) == [1e9]
    assert nice_ticks(1e9, 1e9 + 1e4, 5) == [1e9, 1e9 + 2500, 1e9 + 5000, 1e9 + 7500, 1e9 + 1e4]


# steady_limits --------------------------------------------------------------------------------------


def test_steady_limits_widen_to_round_steps_and_hold_still() -> None:
    # span 100,000 -> at least 1/64 of it (1,562.5) -> step 2,000
    assert steady_limits(1, 100_001) == (0, 102_000)
    # the frame holds while the data grows within the step
    assert steady_limits(1, 101_999) == (0, 102_000)
    # span 3.18 -> at least 0.0497 -> step 0.05
    lo, hi = steady_limits(1.43, 4.61)
    assert math.isclose(lo, 1.40) and math.isclose(hi, 4.65)
    assert steady_limits(2.0, 2.0) == (2.0, 2.0)
    assert steady_limits(0.0, float("nan"))[0] == 0.0
