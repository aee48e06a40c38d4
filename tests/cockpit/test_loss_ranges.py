"""The loss panel's smoothing, x window and y range (issue 16, item 4), on the panel itself."""

from __future__ import annotations

import collections
import math
from typing import Any

import pytest

from cockpit.widgets import loss as loss_widget
from cockpit.widgets.loss import LossPanel


def fed(n: int = 400) -> LossPanel:
    panel = LossPanel()
    panel.tokens_per_step = 100
    for step in range(1, n + 1):
        loss = 4.6 if step <= 5 else 2.0 + math.sin(step / 7) * 0.1  # ln(vocab) first
        panel.add_step(step, loss, step * 100)
    return panel


def debiased_ema(values: list[float], beta: float) -> float:
    m = 0.0
    for v in values:
        m = beta * m + (1 - beta) * v
    return m / (1 - beta ** len(values))


def test_smoothing_cycles_light_heavy_off_and_each_is_exact_from_the_first_step() -> None:
    panel = fed()
    losses = list(panel.raw.ys)
    assert panel.ema.value == pytest.approx(debiased_ema(losses, 0.9))
    assert panel.cycle_smoothing() == "heavy"
    assert panel.ema.value == pytest.approx(debiased_ema(losses, 0.99))  # not recomputed late
    assert "ema:heavy" in panel.border_title
    assert panel.cycle_smoothing() == "off"
    assert panel.ema_beta == 0.0 and "ema:off" in panel.border_title
    assert panel.cycle_smoothing() == "light" and "ema:" not in panel.border_title  # the default


def test_the_x_window_offers_only_windows_shorter_than_the_run() -> None:
    short = fed(400)
    assert short.cycle_x_window() is None  # 400 steps: no window is shorter
    long = fed(25_000)
    assert [long.cycle_x_window() for _ in range(4)] == [1_000, 10_000, None, 1_000]
    assert "last 1k" in long.border_title


def test_the_y_range_leaves_the_first_steps_out_unless_asked() -> None:
    panel = fed()
    xs = [float(x) for x in panel.raw.xs]
    ys = [float(y) for y in panel.raw.ys]
    kept = panel._y_range_points(xs, ys, 0.0, 400.0)
    assert max(kept) < 2.2  # the 4.6 of the first steps is not in the range
    assert panel.toggle_y_all() and "y:all" in panel.border_title
    assert max(panel._y_range_points(xs, ys, 0.0, 400.0)) == pytest.approx(4.6)


def test_lr_changes_and_rollbacks_are_marked_on_the_curve_the_newest_fifty() -> None:
    panel = fed(100)
    panel.add_marker(40, "lr")
    panel.add_marker(60, "rollback")
    assert panel.markers[-2:] == [(40, 4000, "lr"), (60, 6000, "rollback")]
    for step in range(100):
        panel.add_marker(step, "lr")
    assert len(panel.markers) == 50 and panel.markers[-1][0] == 99


class RecordedPlot:
    """Stands in for plotext's module in `LossPanel.draw`: keeps the limits it was given."""

    def __init__(self) -> None:
        self.limits: dict[str, tuple[float, ...]] = {}

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **_kwargs: Any) -> None:
            if name in ("xlim", "ylim"):
                self.limits[name] = args

        return record


def test_after_a_rollback_the_abandoned_branch_leaves_the_curve_and_the_y_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    panel = fed(300)
    panel.add_eval(300, 2.1)
    for step in range(301, 331):  # the branch that diverged: losses of 1.7k
        panel.add_step(step, 1700.0 + step, step * 100, step_time_s=0.1)
    panel.add_eval(320, 1650.0)
    panel.add_marker(325, "lr")
    panel.add_marker(300, "rollback")  # back to the checkpoint of step 300
    for step in range(301, 401):
        panel.add_step(step, 1.9, step * 100, step_time_s=0.1)
    for series in (panel.raw, panel.raw_tok, panel.smooth, panel.smooth_tok):
        xs = series.xs.tolist()
        assert xs == sorted(set(xs)), "a step drawn twice"
        assert max(series.ys) < 5
    assert panel.raw.xs[-1] == 400 and len(panel.raw) == 400
    assert panel.val.xs.tolist() == [300] and panel.best_val == pytest.approx(2.1)
    assert panel.markers[-1] == (300, 30_000, "rollback") and (325, 32_500, "lr") not in panel.markers
    assert panel.ema.value == pytest.approx(1.9, abs=0.05)  # not pulled up by the 1.7k
    monkeypatch.setattr(loss_widget, "palette", lambda _panel: collections.defaultdict(str))
    plot = RecordedPlot()
    panel.draw(plot, 100, 30)
    low, high = plot.limits["ylim"]
    assert high < 5, plot.limits  # the real curve fills the panel, not 0-1.5e3
