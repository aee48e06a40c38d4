"""The device strip chart: fixed range, newest reading on the right, one row."""

from __future__ import annotations

import math

from rich.style import Style

from cockpit.widgets.sparkline import strip_chart

LOW, HIGH = Style(color="blue"), Style(color="red")


def test_bars_follow_a_fixed_range_newest_on_the_right() -> None:
    strip = strip_chart([0.0, 50.0, 100.0, 99.0], 4, 0.0, 100.0, LOW, HIGH)
    # 0 -> lowest bar, 50 -> the 5th of 8 (r = 0.5), 100 and 99 -> the full bar
    assert strip.text == "▁▅██"
    assert strip.cell_length == 4
    styles = [seg.style for seg in strip for _ in seg.text]
    assert styles == [LOW, HIGH, HIGH, HIGH]  # the upper half is drawn in the high colour


def test_a_steady_97_percent_is_near_the_top_not_flat_at_the_bottom() -> None:
    assert strip_chart([97.0] * 3, 3, 0.0, 100.0, LOW, HIGH).text == "███"


def test_short_history_leaves_a_dim_baseline_and_long_history_keeps_the_latest() -> None:
    short = strip_chart([100.0], 5, 0.0, 100.0, LOW, HIGH)
    assert short.text == "▁▁▁▁█"
    assert next(iter(short)).style.dim
    long = strip_chart([0.0] * 10 + [100.0], 3, 0.0, 100.0, LOW, HIGH)
    assert long.text == "▁▁█"


def test_missing_readings_are_blank_and_values_are_clamped() -> None:
    strip = strip_chart([None, math.nan, -5.0, 250.0], 4, 0.0, 100.0, LOW, HIGH)
    assert strip.text == "  ▁█"
