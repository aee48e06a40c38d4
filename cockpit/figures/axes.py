"""Axis maths for the plots: round tick positions and axis limits that move in round steps.

Pure functions (no Textual, no plotext), so the plot widget and its tests share one definition.
"""

from __future__ import annotations

import math


def steady_limits(lo: float, hi: float, grain: float = 1 / 64) -> tuple[float, float]:
    """[lo, hi] widened outwards to multiples of a round step (1, 2 or 5 x 10^k) of at least
    `grain` of the span, so that axes drawn from them stay put while the data grows a little
    (a plot's frame is then reused instead of rebuilt). An empty span is returned as is."""
    span = hi - lo
    if not (math.isfinite(lo) and math.isfinite(hi)) or span <= 0:
        return lo, hi
    step = round_step(span * grain, (1, 2, 5))
    return math.floor(lo / step) * step, math.ceil(hi / step) * step


def round_step(at_least: float, multiples: tuple[float, ...]) -> float:
    """The smallest m x 10^k >= at_least, m one of `multiples` (within [1, 10)) or 10."""
    mag = 10 ** math.floor(math.log10(at_least))
    return next(m * mag for m in (*multiples, 10) if m * mag >= at_least)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick positions covering [lo, hi] with about n ticks (1, 2, 2.5, 5 x 10^k steps).

    A range too narrow to tell apart in floating point gives just [lo]; never more than 4n ticks.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or n < 2:
        return []
    if hi < lo:
        lo, hi = hi, lo
    if hi - lo <= 1e-12 * max(abs(lo), abs(hi), 1e-300):
        return [lo]
    step = round_step((hi - lo) / (n - 1), (1, 2, 2.5, 5))
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    if last - first > 4 * n:
        return [lo]
    return [round(k * step, 12) for k in range(first, last + 1)]
