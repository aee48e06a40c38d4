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
from textual.widgets import Sparkline

BARS = "▁▂▃▄▅▆▇█"


class _StripRenderable:
    def __init__(
        self, data: Sequence[float], width: int, lo: float, hi: float, low: Style, high: Style
    ) -> None:
        self.data, self.width, self.lo, self.hi = data, width, lo, hi
        self.low, self.high = low, high
        self.track = Style(color=low.color, dim=True)

    def __rich_console__(self, console, options):  # noqa: ANN001 - rich protocol
        width = self.width
        data = list(self.data)[-width:] if width > 0 else []
        pad = width - len(data)
        if pad > 0:
            yield Segment("▁" * pad, self.track)
        extent = (self.hi - self.lo) or 1.0
        for v in data:
            if v is None or not math.isfinite(v):
                yield Segment(" ")
                continue
            r = min(max((v - self.lo) / extent, 0.0), 1.0)
            bar = BARS[min(int(r * len(BARS)), len(BARS) - 1)]
            yield Segment(bar, self.high if r >= 0.5 else self.low)


class StripSparkline(Sparkline):
    """`Sparkline(data)` with `lo`/`hi` bounds; newest reading in the rightmost column."""

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

    def render(self):
        _, base = self.background_colors
        low = base + self.get_component_styles("sparkline--min-color").color
        high = base + self.get_component_styles("sparkline--max-color").color
        return _StripRenderable(
            self.data or [],
            self.size.width,
            self.lo,
            self.hi,
            Style(color=low.rich_color),
            Style(color=high.rich_color),
        )
