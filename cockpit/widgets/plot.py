"""A plotext plot that redraws on the cockpit's terms, not on every refresh.

`PlotextPlot` rebuilds its plot in every `render()`. Here panels bump a version when their data
changes; the app's timer calls `flush()`, which lets a redraw through only when the data changed
and the `RedrawGovernor` says it is time (about once a second, slower if drawing is expensive:
the UI thread shares the GIL with training). `render()` caches the built text by (size, version,
theme), so resizes and screen changes never rebuild an unchanged plot twice.
"""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.color import Color
from textual.content import Content, Span
from textual.style import Style as TextualStyle
from textual.widget import Widget
from textual_plotext import PlotextPlot

from cockpit.history import RedrawGovernor, nice_ticks
from cockpit.widgets._format import fmt_tick

try:  # plotext's colour names and 256-colour codes to RGB (private, hence the fallback)
    from plotext._utility import to_rgb as plotext_to_rgb
except ImportError:  # pragma: no cover - plotext changed

    def plotext_to_rgb(color: Any) -> Any:
        return color


RGB = tuple[int, int, int]


_PALETTES: dict[str, dict[str, RGB]] = {}
TEXTUAL_RENDER_FACTOR = 1.5
_STYLE_CACHE: dict[tuple[Any, Any, Any], TextualStyle | None] = {}


def _color(value: Any) -> Color | None:
    if value is None or value == "default":
        return None
    rgb = plotext_to_rgb(value)
    if isinstance(rgb, tuple) and len(rgb) == 3:
        return Color(*rgb)
    return None


def _style(fg: Any, st: Any, bg: Any) -> TextualStyle | None:
    key = (fg, st, bg)
    if key not in _STYLE_CACHE:
        words = str(st).split() if st and st != "default" else []
        style = TextualStyle(
            foreground=_color(fg),
            background=_color(bg),
            bold=True if "bold" in words else None,
            italic=True if "italic" in words else None,
            underline=True if "underline" in words else None,
            dim=True if "dim" in words else None,
        )
        _STYLE_CACHE[key] = None if style == TextualStyle() else style
    return _STYLE_CACHE[key]


def build_content(plt: Any) -> Content:
    """The plot as Textual Content, straight from plotext's character and colour matrices.

    `plt.build()` renders ANSI text that would then be parsed back (rich's from_ansi), which
    is about a third of the drawing time; this skips both steps. Falls back to that path if
    plotext's internals ever differ.
    """
    try:
        plt._set_sizes()
        plt._build_matrix()
        m = plt.monitor.matrix
        marker, fg, bg, st = m.marker, m.fullground, m.background, m.style
        lines: list[Content] = []
        for row in range(m.rows - 1, -1, -1):
            chars, fgs, bgs, sts = marker[row], fg[row], bg[row], st[row]
            spans: list[Span] = []
            start = 0
            prev = (fgs[0], sts[0], bgs[0]) if chars else None
            for col in range(1, len(chars) + 1):
                cur = (fgs[col], sts[col], bgs[col]) if col < len(chars) else None
                if cur != prev:
                    style = _style(*prev)  # type: ignore[misc]
                    if style is not None:
                        spans.append(Span(start, col, style))
                    start, prev = col, cur
            lines.append(Content("".join(chars), spans))
        return Content("\n").join(lines)
    except Exception:  # noqa: BLE001 - plotext changed: take the slower, public path
        return Content.from_rich_text(Text.from_ansi(plt.build()))


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

    def render(self) -> Any:
        width, height = self.size.width, self.size.height
        key = (width, height, self._drawn_version, self.app.theme)
        if key == self._cache_key and self._cache is not None:
            return self._cache
        if not self.has_data() or width < 12 or height < 4:
            self._cache = Content.styled(self.empty_message, "$foreground-muted")
            self._cache_key = key
            return self._cache
        t0 = time.perf_counter()
        plt = self.plt
        plt.clear_figure()
        plt.plotsize(width, height)
        plt._set_size(width, height)  # see PlotextPlot.render: plotsize alone is not enough
        plt.theme(self._get_plotext_theme_name(self.app.theme))
        plt.ticks_color(palette(self)["muted"])
        self.draw(plt, width, height)
        text = build_content(plt)
        # Textual then turns the Content into strips, which costs about half as much again
        # (measured); count it so the governor keeps the whole drawing within budget.
        cost = (time.perf_counter() - t0) * TEXTUAL_RENDER_FACTOR
        self.governor.record(time.monotonic(), cost)
        self.draw_count += 1
        self.last_draw_s = cost
        self._cache, self._cache_key = text, key
        return text

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
