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
from textual.widgets import Sparkline

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
