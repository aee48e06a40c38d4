"""Redraw pacing: the per-plot and the whole-UI governors, against hand-computed values."""

from __future__ import annotations

import pytest

from cockpit.widgets.pacing import LoadGovernor, RedrawGovernor

# RedrawGovernor -------------------------------------------------------------------------------------


def test_governor_keeps_drawing_within_budget() -> None:
    g = RedrawGovernor(min_interval=1.0, max_interval=10.0, budget=0.02)
    assert g.due(0.0)
    g.record(0.0, 0.005)  # 5 ms: the minimum interval applies
    assert g.interval == 1.0
    assert not g.due(0.9) and g.due(1.0)
    g2 = RedrawGovernor(min_interval=1.0, max_interval=10.0, budget=0.02)
    g2.record(0.0, 0.06)  # 60 ms per draw: at most 2% of a core means every 3 s
    assert g2.interval == pytest.approx(3.0)
    g2.record(3.0, 1.0)
    assert g2.interval == 10.0  # capped


# LoadGovernor ---------------------------------------------------------------------------------------


def test_load_governor_slows_down_and_recovers() -> None:
    g = LoadGovernor(target=0.02, window=5.0, max_factor=8.0)
    assert g.sample(0.0, 0.0) == 1.0
    assert g.sample(4.0, 1.0) == 1.0  # window not over yet
    assert g.sample(5.0, 0.25) == pytest.approx(1.5)  # 5% > 2%
    assert g.share == pytest.approx(0.05)
    assert g.sample(10.0, 0.50) == pytest.approx(2.25)
    for i in range(3, 20):
        g.sample(5.0 * i, 0.25 * i)
    assert g.factor == 8.0  # capped
    assert g.sample(200.0, 5.0) == pytest.approx(8.0 / 1.25)  # 0.5% < 1%: speed back up
    cpu = 5.0
    for i in range(1, 40):
        cpu += 0.04  # 0.8% of 5 s
        g.sample(200.0 + 5 * i, cpu)
    assert g.factor == 1.0
    g.sample(400.0, cpu + 0.075)  # 1.5%: between half and target, holds
    assert g.factor == 1.0
