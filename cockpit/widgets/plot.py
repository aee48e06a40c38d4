"""A plotext plot that redraws on the cockpit's terms, not on every refresh.

Panels bump a version when their data changes; `flush()` redraws only then, when the
`RedrawGovernor` says it is time (the UI thread shares the GIL with training). plotext draws the
frame, kept until its calls change; the data is laid over it with numpy (braille.py).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from rich.style import Style as RichStyle
from textual.color import Color, ColorParseError
from textual.content import Content
from textual.geometry import Size
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget
from textual_plotext import PlotextPlot

from cockpit.figures.axes import nice_ticks
from cockpit.figures.numbers import fmt_tick
from cockpit.widgets._repaint import QuietBorderLabels, RowStrips
from cockpit.widgets.pacing import RedrawGovernor
from cockpit.widgets.plotext_frame import (
    Frame,
    PlotextChanged,
    Recorder,
    build_strips_public,
    reset_figure,
)

RGB = tuple[int, int, int]


_PALETTES: dict[str, dict[str, RGB]] = {}


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
        except ColorParseError:  # a theme without the variable
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
        self.repaint_changed_rows(on_screen, self.row_strips())

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

    def axis_mark(self, plt: Any, x: float, glyph: str, color: Any) -> None:
        """One glyph on the x axis' line at `x`: an event marked without crossing the data
        (plotext's public API has no such thing: there, a vertical line)."""
        if self._plotext_only:
            plt.vertical_line(x, color=color)
        else:
            self._items.append(("axis_mark", np.array([float(x)]), np.array([0.0]), glyph, color))

    def row_strips(self) -> list[Strip]:
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
        recorder = Recorder()
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
        theme = self._get_plotext_theme_name(self.app.theme)
        return reset_figure(self.plt, width, height, theme, palette(self)["muted"])

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
