"""A plotext plot that redraws on the cockpit's terms, not on every refresh.

`PlotextPlot` rebuilds its plot in every `render()`. Here panels bump a version when their data
changes; the app's timer calls `flush()`, which lets a redraw through only when the data changed
and the `RedrawGovernor` says it is time (about once a second, slower if drawing is expensive:
the UI thread shares the GIL with training). The plot is drawn through Textual's line API
(`render_line`): strips are built straight from plotext's character and colour matrices and
cached by (size, version, theme), so resizes and screen changes never rebuild an unchanged plot.
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

from cockpit.history import RedrawGovernor, nice_ticks
from cockpit.widgets._format import fmt_tick
from cockpit.widgets.braille import line_cells

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


def build_strips(
    plt: Any, width: int, base: RichStyle, lines: Sequence[DenseLine] = ()
) -> list[Strip]:
    """The plot as one Strip per row, straight from plotext's character and colour matrices.

    `plt.build()` renders ANSI text that would then be parsed back and wrapped as Content,
    which costs more than plotext's own drawing; here each row's runs of one colour become
    segments directly. `lines` are laid over the canvas first (see `overlay_lines`). Raises
    PlotextChanged if plotext's internals differ from what this relies on.
    """
    try:
        plt._set_sizes()
        plt._build_matrix()
        if lines:
            overlay_lines(plt, lines)
        m = plt.monitor.matrix
        marker, fg, bg, st = m.marker, m.fullground, m.background, m.style
        strips: list[Strip] = []
        for row in range(m.rows - 1, -1, -1):
            chars = marker[row]
            keys = list(zip(fg[row], st[row], bg[row], strict=True))
            # where the colour changes: each run of one colour becomes one segment
            cuts = [i for i, (a, b) in enumerate(zip(keys, keys[1:], strict=False), 1) if a != b]
            segments: list[Segment] = []
            for start, end in zip([0, *cuts], [*cuts, len(chars)], strict=True):
                style = _style(*keys[start]) if end > start else None
                segments.append(Segment("".join(chars[start:end]), base + style if style else base))
            strips.append(Strip(segments).adjust_cell_length(width, base))
        return strips
    except (AttributeError, IndexError, TypeError, ValueError) as e:
        raise PlotextChanged(str(e)) from e


def build_strips_public(plt: Any, width: int, base: RichStyle) -> list[Strip]:
    """The slow path through plotext's public API: its ANSI output, parsed back."""
    rows = Text.from_ansi(plt.build()).split(allow_blank=True)
    console = Console(width=width)
    return [
        Strip(row.render(console), row.cell_len).adjust_cell_length(width, base) for row in rows
    ]


class PlotextChanged(Exception):
    """plotext's internals are not what the fast drawing path expects."""


DenseLine = tuple[np.ndarray, np.ndarray, Any]  # xs, ys, colour
_LINE_GLYPHS = frozenset("│─┼")  # grid and marker lines: data is drawn over them, as plotext does


def overlay_lines(plt: Any, lines: Sequence[DenseLine]) -> None:
    """Lay braille polylines over plotext's built canvas, under its markers.

    Reads the canvas area, limits and y scale plotext settled on, so the lines use its exact
    value-to-dot mapping; a later line covers an earlier one cell by cell, as in plotext."""
    monitor = plt.monitor
    m = monitor.matrix
    cols, rows = m.Cols_canvas, m.Rows_canvas
    width, height = len(cols), len(rows)
    if width <= 0 or height <= 0:
        return
    xlim, ylim = monitor.xlim[0], monitor.ylim[0]
    log_y = monitor.yscale[0] == "log"
    for xs, ys, color in lines:
        if log_y:
            positive = ys > 0
            xs, ys = xs[positive], np.log10(ys[positive])
        cx, cy, chars = line_cells(xs, ys, xlim, ylim, width, height)
        for c, r, ch in zip(cx.tolist(), cy.tolist(), chars, strict=True):
            row, col = rows.start + r, cols.start + c
            current = m.marker[row][col]
            if current == " " or "\u2800" <= current <= "\u28ff" or current in _LINE_GLYPHS:
                m.marker[row][col] = ch
                m.fullground[row][col] = color


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


class ThrottledPlot(PlotextPlot):
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
        self.last_draw_s = 0.0
        self._lines: list[DenseLine] = []  # this build's dense lines (see `line`)
        self._plotext_lines = False  # True once plotext's internals proved different

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
        self.refresh()
        return True

    # drawing side ----------------------------------------------------------------------------
    def has_data(self) -> bool:
        return False

    def update_labels(self) -> None:
        """Refresh the border title/subtitle; called with each redraw (setting either one
        re-renders the whole widget, so they change at the plot's pace, not the data's)."""

    def set_labels(self, title: str, subtitle: str) -> None:
        if title != self.border_title:
            self.border_title = title
        if subtitle != self.border_subtitle:
            self.border_subtitle = subtitle

    def set_empty_message(self, message: str) -> None:
        """What the panel says while it has no data (e.g. why there will be none)."""
        self.empty_message = message
        self.flush(force=True)

    def draw(self, plt: Any, width: int, height: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def line(self, plt: Any, xs: Any, ys: Any, color: Any) -> None:
        """A dense series as a braille polyline (what plotext's `plot(..., marker="braille")`
        draws), rasterised with numpy over plotext's frame. plotext sees only its end points:
        set the plot's limits with `plt.xlim` / `plt.ylim`."""
        xs = np.asarray(xs, dtype=np.float64)
        ys = np.asarray(ys, dtype=np.float64)
        if len(xs) == 0:
            return
        if self._plotext_lines:
            plt.plot(xs.tolist(), ys.tolist(), marker="braille", color=color)
            return
        self._lines.append((xs, ys, color))
        ends = [0, len(xs) - 1]
        plt.scatter(xs[ends].tolist(), ys[ends].tolist(), marker="braille", color=color)

    def render_line(self, y: int) -> Strip:
        """Textual's line API: the plot's row y (built once per data version and size)."""
        strips = self._strips()
        if 0 <= y < len(strips):
            return strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

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
            try:
                strips = build_strips(self._draw_figure(width, height), width, base, self._lines)
            except PlotextChanged:  # draw everything through plotext's public API from now on
                self._plotext_lines = True
                strips = build_strips_public(self._draw_figure(width, height), width, base)
            strips = strips[:height]
            cost = time.perf_counter() - t0
            self.governor.record(time.monotonic(), cost)
            self.draw_count += 1
            self.last_draw_s = cost
        blank = Strip.blank(width, base)
        strips = [*strips, *[blank] * (height - len(strips))]
        self._cache, self._cache_key = strips, key
        return strips

    def _draw_figure(self, width: int, height: int) -> Any:
        plt = self.plt
        plt.clear_figure()
        plt.plotsize(width, height)
        plt._set_size(width, height)  # see PlotextPlot.render: plotsize alone is not enough
        plt.theme(self._get_plotext_theme_name(self.app.theme))
        plt.ticks_color(palette(self)["muted"])
        self._lines = []
        self.draw(plt, width, height)
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
