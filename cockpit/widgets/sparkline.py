"""A Textual `Sparkline` with a fixed value range, drawn as a rolling strip chart.

Textual's own sparkline scales between the data's min and max, so a GPU steady at 97% would
draw as a flat line at the bottom. Here the range is fixed (0-100 for percentages), one column is
one reading, newest on the right, and a short history leaves the left side blank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Sparkline

from cockpit.widgets.time_window import SPAN_S, TimeSeries, window_columns

BARS = "▁▂▃▄▅▆▇█"


def strip_chart(
    data: Sequence[float | None], width: int, lo: float, hi: float, low: Style, high: Style
) -> Strip:
    """One row: the last `width` readings as bars between lo and hi, newest on the right;
    a dim baseline where there is no history yet, a blank for a missing reading."""
    values = list(data)[-width:] if width > 0 else []
    segments = []
    pad = width - len(values)
    if pad > 0:
        segments.append(Segment("▁" * pad, Style(color=low.color, dim=True)))
    extent = (hi - lo) or 1.0
    for v in values:
        if v is None or not math.isfinite(v):
            segments.append(Segment(" "))
            continue
        r = min(max((v - lo) / extent, 0.0), 1.0)
        bar = BARS[min(int(r * len(BARS)), len(BARS) - 1)]
        segments.append(Segment(bar, high if r >= 0.5 else low))
    return Strip(Segment.simplify(segments), width)


def strip_rows(
    data: Sequence[float | None],
    width: int,
    height: int,
    lo: float,
    hi: float,
    low: Style,
    high: Style,
) -> list[Strip]:
    """`strip_chart` `height` rows tall, top row first: each bar stacks eighths of a row, so a
    taller chart tells finer differences; one row tall it is `strip_chart` exactly."""
    if height <= 1:
        return [strip_chart(data, width, lo, hi, low, high)]
    values = list(data)[-width:] if width > 0 else []
    pad = width - len(values)
    extent = (hi - lo) or 1.0
    # per column: (eighths filled, 1..height*8, style), or None for a missing reading
    cols: list[tuple[int, Style] | None] = []
    for v in values:
        if v is None or not math.isfinite(v):
            cols.append(None)
            continue
        r = min(max((v - lo) / extent, 0.0), 1.0)
        cols.append((min(int(r * height * 8), height * 8 - 1) + 1, high if r >= 0.5 else low))
    rows = []
    for row in range(height):
        above = (height - 1 - row) * 8  # eighths below this row's bottom
        segments = []
        if pad > 0:
            baseline = row == height - 1
            segments.append(
                Segment("▁" * pad, Style(color=low.color, dim=True))
                if baseline
                else Segment(" " * pad)
            )
        for col in cols:
            filled = 0 if col is None else min(max(col[0] - above, 0), 8)
            if filled == 0 or col is None:
                segments.append(Segment(" "))
            else:
                segments.append(Segment(BARS[filled - 1], col[1]))
        rows.append(Strip(Segment.simplify(segments), width))
    return rows


class WindowChart(Widget):
    """A `TimeSeries` over the last `span_s` seconds up to its newest reading, as many columns
    as the widget is wide and as tall as it is high, between `lo` and `hi`.

    Its columns are computed once per (reading, size, scale, colours), not per repaint.
    """

    COMPONENT_CLASSES = {"sparkline--max-color", "sparkline--min-color"}
    DEFAULT_CSS = """
    WindowChart {
        height: 1;
        width: 1fr;
    }
    WindowChart > .sparkline--max-color {
        color: $primary;
    }
    WindowChart > .sparkline--min-color {
        color: $primary 60%;
    }
    """

    def __init__(
        self, *, lo: float = 0.0, hi: float = 100.0, span_s: float = SPAN_S, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        self.lo, self.hi, self.span_s = lo, hi, span_s
        self.series: TimeSeries | None = None
        self._version = -1  # the series' version last shown
        self._rows: tuple[tuple[object, ...], list[Strip]] | None = None

    def show(self, series: TimeSeries, hi: float | None = None) -> None:
        """Draw `series` (on the scale up to `hi` where given)."""
        shown = (self.series, self._version, self.hi)
        if hi is not None:
            self.hi = hi
        self.series, self._version = series, series.version
        if (series, series.version, self.hi) != shown:  # nothing new: no repaint
            self.refresh()

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        base = self.visual_style.rich_style
        series = self.series
        if series is None or series.end is None:
            return Strip.blank(width, base)
        _, background = self.background_colors
        low = (background + self.get_component_styles("sparkline--min-color").color).rich_color
        high = (background + self.get_component_styles("sparkline--max-color").color).rich_color
        key = (id(series), series.version, width, height, self.lo, self.hi, low, high, base)
        if self._rows is None or self._rows[0] != key:
            values = window_columns(series.readings, series.end, width, self.span_s)
            rows = strip_rows(
                values, width, height, self.lo, self.hi, Style(color=low), Style(color=high)
            )
            self._rows = (key, [row.apply_style(base) for row in rows])
        rows = self._rows[1]
        return rows[y] if 0 <= y < len(rows) else Strip.blank(width, base)


class StripSparkline(Sparkline):
    """`Sparkline(data)` with `lo`/`hi` bounds; newest reading in the rightmost column.

    Drawn through Textual's line API, one Strip kept per (data, width, colours): a reading
    costs one row built from segments, not a pass through Rich's console.
    """

    DEFAULT_CSS = """
    StripSparkline {
        height: 1;
        width: 1fr;
    }
    StripSparkline > .sparkline--max-color {
        color: $primary;
    }
    StripSparkline > .sparkline--min-color {
        color: $primary 60%;
    }
    """

    def __init__(
        self, data: Sequence[float] | None = None, *, lo: float = 0.0, hi: float = 100.0, **kwargs
    ) -> None:
        super().__init__(data, **kwargs)
        self.lo, self.hi = lo, hi
        self._strip: tuple[tuple[object, ...], Strip] | None = None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.visual_style.rich_style
        if y != 0:
            return Strip.blank(width, base)
        _, background = self.background_colors
        low = (background + self.get_component_styles("sparkline--min-color").color).rich_color
        high = (background + self.get_component_styles("sparkline--max-color").color).rich_color
        data = tuple(self.data or ())
        key = (data, width, self.lo, self.hi, low, high, base)
        if self._strip is None or self._strip[0] != key:
            strip = strip_chart(data, width, self.lo, self.hi, Style(color=low), Style(color=high))
            self._strip = (key, strip.apply_style(base))
        return self._strip[1]
