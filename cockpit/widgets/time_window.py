"""History over a window of time: readings as they came, turned into one value per chart column.

The zoomed Device panel charts the last minutes whatever the panel's width: each column covers
`span / columns` seconds and shows the mean of the readings taken in it. A column without a
reading repeats the reading before it while that is younger than `hold_s` (readings come about
once a second; a column can be narrower than that); past it the column is a gap (no readings:
the app was away, the machine stalled, between runs). Columns before the first reading are
left out, so the chart draws them as "no history yet".
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

SPAN_S = 300.0  # the zoomed panel's window: the last 5 minutes
HOLD_S = 5.0  # a reading stands for a column this long after it; longer without one: a gap


class TimeSeries:
    """(time, value) readings of one figure, oldest first, kept for `keep_s` seconds back from
    the newest. A value of None is a reading that could not tell (a gap where it is alone)."""

    def __init__(self, keep_s: float = SPAN_S + HOLD_S) -> None:
        self.keep_s = keep_s
        self.readings: deque[tuple[float, float | None]] = deque()
        self.version = 0  # bumped on every change: what a chart caches its columns by

    def add(self, t: float, value: float | None) -> None:
        if self.readings and t < self.readings[-1][0]:
            self.readings.clear()  # another clock (an older run's readings): start over
        self.readings.append((t, value))
        while self.readings[0][0] < t - self.keep_s:
            self.readings.popleft()
        self.version += 1

    @property
    def latest(self) -> float | None:
        return self.readings[-1][1] if self.readings else None

    @property
    def end(self) -> float | None:
        """The newest reading's time: where the window ends."""
        return self.readings[-1][0] if self.readings else None


def window_columns(
    readings: Sequence[tuple[float, float | None]],
    end: float,
    columns: int,
    span_s: float = SPAN_S,
    hold_s: float = HOLD_S,
) -> list[float | None]:
    """One value per column for the `span_s` seconds up to `end`, newest last: the mean of the
    finite readings in each column (column i covers (start + i*w, start + (i+1)*w], w =
    span_s / columns); without one, the previous reading's value where that reading is less
    than `hold_s` older than the column's start, else None (a gap). Leading columns before the first reading in the
    window are left out (the list is shorter than `columns`)."""
    if columns <= 0 or span_s <= 0:
        return []
    width = span_s / columns
    start = end - span_s
    sums = [0.0] * columns
    counts = [0] * columns
    newest: list[float | None] = [None] * columns  # the time of the newest reading in a column
    before: tuple[float, float | None] | None = None  # the newest reading older than the window
    for t, v in readings:
        if t <= start:
            before = (t, v)
            continue
        if t > end:
            continue
        i = min(columns - 1, max(0, math.ceil((t - start) / width) - 1))
        newest[i] = t
        if v is not None and math.isfinite(v):
            sums[i] += v
            counts[i] += 1
    out: list[float | None] = []
    last = before  # (time, value) of the reading a column without one may repeat
    first = (
        0
        if before is not None
        else next((i for i in range(columns) if newest[i] is not None), columns)
    )
    for i in range(first, columns):
        t_newest = newest[i]
        if t_newest is not None:  # readings in it: their mean (None if none could tell)
            value = sums[i] / counts[i] if counts[i] else None
            last = (t_newest, value)
        elif last is not None and start + i * width < last[0] + hold_s:
            value = last[1]  # the reading before it still stands
        else:
            value = None
        out.append(value)
    return out


def span_label(span_s: float) -> str:
    """'5 min', '90 s', '2 h': how the window's span is written above its charts."""
    if span_s >= 3600 and span_s % 3600 == 0:
        return f"{span_s / 3600:.0f} h"
    if span_s >= 60 and span_s % 60 == 0:
        return f"{span_s / 60:.0f} min"
    return f"{span_s:.0f} s"
