"""A plotext plot that redraws on the cockpit's terms, not on every refresh.

`PlotextPlot` rebuilds its plot in every `render()`. Here panels bump a version when their data
changes; the app's timer calls `flush()`, which lets a redraw through only when the data changed
and the `RedrawGovernor` says it is time (about once a second, slower if drawing is expensive:
the UI thread shares the GIL with training). The plot is drawn through Textual's line API
(`render_line`), cached by (size, version, theme), so resizes and screen changes never rebuild
an unchanged plot.

Drawing is split: plotext draws the frame (axes, ticks, labels) from the calls a panel makes on
`plt`, and that frame is kept until those calls change; the data (`line`, `points`, `vline`) is
laid over a copy of it with numpy (braille.py), using plotext's own value-to-cell mapping. A
redraw with new data but the same axes therefore never runs plotext. If plotext's internals
ever differ from what this relies on, the panel falls back to drawing everything with plotext.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.color import Color
from textual.content import Content
from textual.geometry import Size
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget
from textual_plotext import PlotextPlot

from cockpit.axes import nice_ticks
from cockpit.pacing import RedrawGovernor
from cockpit.widgets._format import fmt_tick
from cockpit.widgets._repaint import QuietBorderLabels, RowStrips
from cockpit.widgets.braille import line_cells, to_dots

try:  # plotext's colour names and 256-colour codes to RGB (private, hence the fallback)
    from plotext._utility import to_rgb as plotext_to_rgb
except ImportError:  # pragma: no cover - plotext changed

    def plotext_to_rgb(color: Any) -> Any:
        return color


RGB = tuple[int, int, int]


_PALETTES: dict[str, dict[str, RGB]] = {}
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
            # vertical lines under the data lines, markers on top (plotext's own order)
            for kind in ("vline", "line", "points"):
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
        if self.log_y and kind != "vline":
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


class _Recorder:
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


def palette(widget: Widget) -> dict[str, RGB]:
    """Plot colours derived from the app's theme (semantic names, RGB tuples for plotext)."""
    theme = widget.app.theme
    if theme not in _PALETTES:
        _PALETTES[theme] = _make_palette(widget.app.theme_variables)
    return _PALETTES[theme]


def _make_palette(v: dict[str, str]) -> dict[str, RGB]:

    def rgb(name: str, fallback: str) -> Color:
        try:
            return Color.parse(v.get(name, fallback))
        except Exception:  # noqa: BLE001 - a theme without the variable
            return Color.parse(fallback)

    surface = rgb("surface", "#1e1e1e")
    fg = rgb("foreground", "#e0e0e0")
    out = {
        "primary": rgb("primary", "#0178D4"),
        "secondary": rgb("secondary", "#004578"),
        "accent": rgb("accent", "#ffa62b"),
        "warning": rgb("warning", "#ffa62b"),
        "error": rgb("error", "#ba3c5b"),
        "success": rgb("success", "#4EBF71"),
        "foreground": fg,
        "muted": surface.blend(fg, 0.45),
        "faint": surface.blend(fg, 0.25),
    }
    return {k: c.rgb for k, c in out.items()}


class ThrottledPlot(QuietBorderLabels, RowStrips, PlotextPlot):
    """Base class: subclasses implement `draw(plt, width, height)` and call `touch()`."""

    DEFAULT_CSS = """
    ThrottledPlot {
        width: 1fr;
        height: 1fr;
        min-height: 3;
    }
    """

    EMPTY_MESSAGE = "waiting for data..."

    def __init__(self, *, min_interval: float = 1.0, budget: float = 0.015, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.governor = RedrawGovernor(min_interval=min_interval, budget=budget)
        self._version = 0  # bumped when the data changes
        self._drawn_version = -1  # the version the next render shows
        self._cache_key: tuple[Any, ...] | None = None
        self._cache: Any = None
        self.empty_message = self.EMPTY_MESSAGE
        self.draw_count = 0  # how many times the plot was actually built (for tests/benches)
        self._items: list[tuple[Any, ...]] = []  # this build's data (line, points, vline)
        self._frame: Frame | None = None  # plotext's last frame, and the calls that made it
        self._frame_key: tuple[Any, ...] | None = None
        self.frame_builds = 0  # how often plotext actually ran (for tests and benches)
        self._plotext_only = False  # True once plotext's internals proved different

    # data side -------------------------------------------------------------------------------
    def touch(self) -> None:
        """The data changed: the next due flush redraws."""
        self._version += 1

    @property
    def stale(self) -> bool:
        return self._version != self._drawn_version

    def flush(self, now: float | None = None, force: bool = False) -> bool:
        """Redraw if the data changed and the governor allows it; `force` redraws regardless.

        Returns True if a redraw was requested.
        """
        if force:
            self.touch()
        if not self.stale:
            return False
        now = time.monotonic() if now is None else now
        if not force and (not self.governor.due(now) or not self.is_on_screen):
            return False
        self._drawn_version = self._version
        self.update_labels()
        self._repaint_changed_rows()
        return True

    def _repaint_changed_rows(self) -> None:
        """Draw now and ask Textual to repaint only the rows that differ from what is on
        screen: with steady axes a new step changes a few rows at the right end of a line."""
        on_screen, key = self._cache, self._cache_key
        if on_screen is None or key is None or key[:2] != tuple(self.size):
            self.refresh()  # nothing comparable on screen: draw when Textual renders
            return
        self.repaint_changed_rows(on_screen, self._strips())

    # drawing side ----------------------------------------------------------------------------
    def has_data(self) -> bool:
        return False

    def update_labels(self) -> None:
        """Refresh the border title/subtitle (`set_labels`); called with each redraw, so the
        figures in them change at the plot's pace, not the data's."""

    def set_labels(self, title: str, subtitle: str) -> None:
        """Title and legend; a change repaints only its border row (QuietBorderLabels)."""
        self.set_border_labels(title, subtitle)

    def set_empty_message(self, message: str) -> None:
        """What the panel says while it has no data (e.g. why there will be none)."""
        self.empty_message = message
        self.flush(force=True)

    def draw(self, plt: Any, width: int, height: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def line(self, plt: Any, xs: Any, ys: Any, color: Any) -> None:
        """A series as a braille polyline (plotext's `plot(..., marker="braille")`)."""
        xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        if self._plotext_only:
            plt.plot(xs.tolist(), ys.tolist(), marker="braille", color=color)
        elif len(xs):
            self._items.append(("line", xs, ys, None, color))

    def points(self, plt: Any, xs: Any, ys: Any, marker: str, color: Any) -> None:
        """One marker character per point (plotext's `scatter`), drawn over the lines."""
        xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
        if self._plotext_only:
            plt.scatter(xs.tolist(), ys.tolist(), marker=marker, color=color)
        elif len(xs):
            self._items.append(("points", xs, ys, marker, color))

    def vline(self, plt: Any, x: float, color: Any) -> None:
        """A vertical line across the canvas (plotext's `vertical_line`), under the lines."""
        if self._plotext_only:
            plt.vertical_line(x, color=color)
        else:
            self._items.append(("vline", np.array([float(x)]), np.array([0.0]), "│", color))

    def _strips(self) -> list[Strip]:
        width, height = self.size.width, self.size.height
        base = self.visual_style.rich_style
        key = (width, height, self._drawn_version, self.app.theme, base)
        if key == self._cache_key and self._cache is not None:
            return self._cache
        if not self.has_data() or width < 12 or height < 4:
            message = Content.styled(self.empty_message, "$foreground-muted")
            strips = Visual.to_strips(self, message, width, height, self.visual_style)
        else:
            t0 = time.perf_counter()
            strips = self._draw(width, height, base)[:height]
            cost = time.perf_counter() - t0
            self.governor.record(time.monotonic(), cost)
            self.draw_count += 1
        blank = Strip.blank(width, base)
        strips = [*strips, *[blank] * (height - len(strips))]
        self._cache, self._cache_key = strips, key
        return strips

    def _draw(self, width: int, height: int, base: RichStyle) -> list[Strip]:
        if not self._plotext_only:
            try:
                return self._draw_over_frame(width, height, base)
            except PlotextChanged:  # from now on, everything through plotext's public API
                self._plotext_only = True
        plt = self._new_figure(width, height)
        self.draw(plt, width, height)
        return build_strips_public(plt, width, base)

    def _draw_over_frame(self, width: int, height: int, base: RichStyle) -> list[Strip]:
        recorder = _Recorder()
        self._items = []
        self.draw(recorder, width, height)
        key = (width, height, self.app.theme, palette(self)["muted"], tuple(recorder.calls))
        if key != self._frame_key or self._frame is None:
            plt = self._new_figure(width, height)
            recorder.replay(plt)
            for _kind, xs, ys, _glyph, _color in self._items[:1]:
                # an invisible point of the data, so that plotext draws the axes it would
                plt.scatter(xs[:1].tolist(), ys[:1].tolist(), marker=" ")
            self._frame, self._frame_key = Frame(plt), key
            self.frame_builds += 1
        return self._frame.draw(self._items, width, base)

    def _new_figure(self, width: int, height: int) -> Any:
        plt = self.plt
        plt.clear_figure()
        plt.plotsize(width, height)
        plt._set_size(width, height)  # see PlotextPlot.render: plotsize alone is not enough
        plt.theme(self._get_plotext_theme_name(self.app.theme))
        plt.ticks_color(palette(self)["muted"])
        return plt

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return container.height  # a plot takes the height it is given; never built to measure

    # helpers for subclasses --------------------------------------------------------------------
    def set_x_ticks(self, plt: Any, lo: float, hi: float, width: int, fmt=fmt_tick) -> None:
        n = max(2, min(6, width // 14))
        ticks = [t for t in nice_ticks(lo, hi, n) if lo <= t <= hi]
        if ticks:
            plt.xticks(ticks, [fmt(t) for t in ticks])

    def set_y_ticks(self, plt: Any, lo: float, hi: float, height: int, fmt) -> None:
        n = max(3, min(6, height // 3))
        ticks = [t for t in nice_ticks(lo, hi, n) if lo <= t <= hi]
        if ticks:
            plt.yticks(ticks, [fmt(t) for t in ticks])
