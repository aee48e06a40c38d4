"""The one place that depends on plotext's internals: the frame, the call recorder, the styles.

The plot widget (plot.py) has plotext draw only the frame (axes, ticks, labels) and lays the data
over a copy of it with numpy (braille.py). That needs plotext's private matrices and sizing
(`_set_sizes`, `_build_matrix`, `monitor.matrix`, `_set_size`, `_utility.to_rgb`); they are used
here and nowhere else. If they ever differ from what this expects, `Frame` raises
`PlotextChanged` and the widget falls back to plotext's public API (`build_strips_public`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.color import Color
from textual.strip import Strip

from cockpit.widgets.braille import line_cells, to_dots

try:  # plotext's colour names and 256-colour codes to RGB (private, hence the fallback)
    from plotext._utility import to_rgb as plotext_to_rgb
except ImportError:  # pragma: no cover - plotext changed

    def plotext_to_rgb(color: Any) -> Any:
        return color


_STYLE_CACHE: dict[tuple[Any, Any, Any], RichStyle | None] = {}


def _color(value: Any) -> Color | None:
    if value is None or value == "default":
        return None
    rgb = plotext_to_rgb(value)
    if isinstance(rgb, tuple) and len(rgb) == 3:
        return Color(*rgb)
    return None


def _style(fg: Any, st: Any, bg: Any) -> RichStyle | None:
    """plotext's (foreground, style, background) of a cell as a Rich style (None: plain)."""
    key = (fg, st, bg)
    if key not in _STYLE_CACHE:
        words = str(st).split() if st and st != "default" else []
        fg_color, bg_color = _color(fg), _color(bg)
        style = RichStyle(
            color=fg_color.rich_color if fg_color else None,
            bgcolor=bg_color.rich_color if bg_color else None,
            bold=True if "bold" in words else None,
            italic=True if "italic" in words else None,
            underline=True if "underline" in words else None,
            dim=True if "dim" in words else None,
        )
        _STYLE_CACHE[key] = None if style == RichStyle() else style
    return _STYLE_CACHE[key]


class PlotextChanged(Exception):
    """plotext's internals are not what the fast drawing path expects."""


class Frame:
    """plotext's drawing of everything but the data: its matrices and where the canvas is."""

    def __init__(self, plt: Any) -> None:
        try:
            plt._set_sizes()
            plt._build_matrix()
            monitor = plt.monitor
            m = monitor.matrix
            self.marker = [list(row) for row in m.marker]
            self.fullground = [list(row) for row in m.fullground]
            self.background = [list(row) for row in m.background]
            self.style = [list(row) for row in m.style]
            self.cols, self.rows = m.Cols_canvas, m.Rows_canvas
            self.xlim = tuple(float(v) for v in monitor.xlim[0])
            self.ylim = tuple(float(v) for v in monitor.ylim[0])
            self.log_y = monitor.yscale[0] == "log"
            # the last drawing: (marker rows, colour rows, strips, width, base style)
            self._last: tuple[list, list, list[Strip], int, RichStyle] | None = None
        except (AttributeError, IndexError, TypeError, ValueError) as e:
            raise PlotextChanged(str(e)) from e

    def draw(self, items: Sequence[tuple[Any, ...]], width: int, base: RichStyle) -> list[Strip]:
        """The frame with the data laid over it, as one Strip per row (top row first). Rows
        identical to the last drawing's keep their Strip: only changed rows are converted."""
        marker = [list(row) for row in self.marker]
        fullground = [list(row) for row in self.fullground]
        w, h = len(self.cols), len(self.rows)
        if w > 0 and h > 0:
            # vertical lines under the data lines, markers on top (plotext's own order); marks
            # on the x axis are outside the canvas and meet nothing
            for kind in ("vline", "line", "points", "axis_mark"):
                for item in items:
                    if item[0] == kind:
                        self._overlay(item, marker, fullground, w, h)
        last = self._last if self._last is not None and self._last[3:] == (width, base) else None
        strips: list[Strip] = []
        for r in range(len(marker)):
            if last is not None and marker[r] == last[0][r] and fullground[r] == last[1][r]:
                strips.append(last[2][r])
            else:
                strips.append(
                    _row_strip(
                        marker[r], fullground[r], self.style[r], self.background[r], width, base
                    )
                )
        self._last = (marker, fullground, strips, width, base)
        return strips[::-1]  # plotext's row 0 is the bottom one

    def _overlay(self, item: tuple[Any, ...], marker: list, fg: list, w: int, h: int) -> None:
        kind, xs, ys, glyph, color = item
        if self.log_y and kind not in ("vline", "axis_mark"):
            positive = ys > 0
            xs, ys = xs[positive], np.log10(ys[positive])
        c0, r0 = self.cols.start, self.rows.start
        if kind == "line":
            cx, cy, chars = line_cells(xs, ys, self.xlim, self.ylim, w, h)
            for c, r, ch in zip(cx.tolist(), cy.tolist(), chars, strict=True):
                current = marker[r0 + r][c0 + c]
                if current == " " or "\u2800" <= current <= "\u28ff" or current in _LINE_GLYPHS:
                    marker[r0 + r][c0 + c] = ch
                    fg[r0 + r][c0 + c] = color
        elif kind == "points":
            keep = np.isfinite(xs) & np.isfinite(ys)
            cx = to_dots(xs[keep], *self.xlim, w)
            cy = to_dots(ys[keep], *self.ylim, h)
            for c, r in zip(cx.tolist(), cy.tolist(), strict=True):
                if 0 <= c < w and 0 <= r < h:
                    marker[r0 + r][c0 + c] = glyph
                    fg[r0 + r][c0 + c] = color
        elif kind == "axis_mark":  # one glyph on the x axis' line, just under the canvas
            (c,) = to_dots(xs, *self.xlim, w).tolist()
            if 0 <= c < w and r0 >= 1:
                marker[r0 - 1][c0 + c] = glyph
                fg[r0 - 1][c0 + c] = color
        else:  # vline: a column of the canvas
            (c,) = to_dots(xs, *self.xlim, w).tolist()
            if 0 <= c < w:
                for r in range(h):
                    marker[r0 + r][c0 + c] = "│"
                    fg[r0 + r][c0 + c] = color


_LINE_GLYPHS = frozenset("│─┼")  # grid and marker lines: data is drawn over them, as in plotext


def _row_strip(
    chars: list[str], fg: list, st: list, bg: list, width: int, base: RichStyle
) -> Strip:
    """One row of plotext-style matrices as a Strip: each run of one colour is one segment.
    (plotext's own `build()` renders ANSI text that Textual would then parse back, which costs
    more than the drawing itself.)"""
    keys = list(zip(fg, st, bg, strict=True))
    cuts = [i for i, (a, b) in enumerate(zip(keys, keys[1:], strict=False), 1) if a != b]
    segments: list[Segment] = []
    for start, end in zip([0, *cuts], [*cuts, len(chars)], strict=True):
        cell_style = _style(*keys[start]) if end > start else None
        segments.append(
            Segment("".join(chars[start:end]), base + cell_style if cell_style else base)
        )
    return Strip(segments).adjust_cell_length(width, base)


def build_strips_public(plt: Any, width: int, base: RichStyle) -> list[Strip]:
    """The slow path through plotext's public API: its ANSI output, parsed back."""
    rows = Text.from_ansi(plt.build()).split(allow_blank=True)
    console = Console(width=width)
    return [
        Strip(row.render(console), row.cell_len).adjust_cell_length(width, base) for row in rows
    ]


def _frozen(value: Any) -> Any:
    """A hashable copy of a plotting call's argument (lists and arrays become tuples)."""
    if isinstance(value, np.ndarray):
        return tuple(value.tolist())
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


class Recorder:
    """Stands in for the plotext figure while a panel draws: the calls are remembered (they
    decide the frame) and replayed on plotext only when they differ from the last frame's."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, Any]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, _frozen(args), _frozen(kwargs)))

        return record

    def replay(self, plt: Any) -> None:
        for name, args, kwargs in self.calls:
            getattr(plt, name)(*args, **dict(kwargs))


def reset_figure(plt: Any, width: int, height: int, theme: str, ticks_color: Any) -> Any:
    """`plt` cleared and sized to width x height cells, in the given plotext theme."""
    plt.clear_figure()
    plt.plotsize(width, height)
    plt._set_size(width, height)  # see PlotextPlot.render: plotsize alone is not enough
    plt.theme(theme)
    plt.ticks_color(ticks_color)
    return plt
