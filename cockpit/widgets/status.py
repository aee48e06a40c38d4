"""The status line (state badge, preset, progress, speed, times, checkpoint, grad norm) and the
alert line below it (errors, NaN, pending actions).

The status text is a list of segments with priorities; at narrow widths the least important
ones are dropped rather than wrapped or cut, so the line stays readable at 80 columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import Label, Static

from engine.events import RunState

STATE_LABELS = {
    "starting": "STARTING",
    "running": "RUNNING",
    "paused": "PAUSED",
    "saving": "SAVING",
    "stopped": "STOPPED",
    "finished": "FINISHED",
    "failed": "FAILED",
    "idle": "IDLE",
}

LIVE_STATES = (RunState.RUNNING, RunState.SAVING)  # speed, ETA and MFU are shown only then


@dataclass(frozen=True)
class Segment:
    text: Content
    priority: int  # lower = more important (kept longer)


def fit_segments(segments: list[Segment], width: int, sep: str = "  ") -> Content:
    """Drop the least important segments until the rest fit in `width` (order is kept)."""
    keep = list(segments)
    sep_len = len(sep)

    def total(segs: list[Segment]) -> int:
        return sum(s.text.cell_length for s in segs) + sep_len * max(len(segs) - 1, 0)

    while keep and total(keep) > width:
        worst = max(range(len(keep)), key=lambda i: (keep[i].priority, i))
        keep.pop(worst)
    sep_c = Content.styled(sep, "")
    out = sep_c.join([s.text for s in keep])
    if out.cell_length > width:
        out = out.truncate(width, ellipsis=True)
    return out


def progress_bar(fraction: float, width: int) -> Content:
    """`━━━━━━╸─────────` in the theme's colours (done, then to do)."""
    fraction = min(max(fraction, 0.0), 1.0)
    halves = round(fraction * width * 2)
    full, half = divmod(halves, 2)
    done = "━" * full + ("╸" if half else "")
    return Content.assemble((done, "$success"), ("─" * (width - len(done)), "$foreground-muted"))


class StatusText(Widget):
    DEFAULT_CSS = """
    StatusText {
        width: 1fr;
        height: 1;
        padding: 0 1;
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.segments: list[Segment] = []

    def set_segments(self, segments: list[Segment]) -> None:
        if segments != self.segments:
            self.segments = segments
            self.refresh()

    def render(self) -> Content:
        return fit_segments(self.segments, max(self.size.width, 1))


class StatusLine(Horizontal):
    """`[ RUNNING ] preset  step 1,234/3,000 41%  12.3k tok/s  12:03 / ETA 17:40  ...`"""

    DEFAULT_CSS = """
    StatusLine {
        height: 1;
        width: 1fr;
        background: $panel;
    }
    StatusLine > #badge {
        width: auto;
        min-width: 10;
        height: 1;
        padding: 0 1;
        text-style: bold;
        content-align: center middle;
        background: $primary;
        color: $text;
    }
    StatusLine > #badge.-running { background: $success; color: $text; }
    StatusLine > #badge.-paused { background: $warning; color: $text; }
    StatusLine > #badge.-saving { background: $accent; color: $text; }
    StatusLine > #badge.-starting { background: $primary; color: $text; }
    StatusLine > #badge.-finished { background: $primary; color: $text; }
    StatusLine > #badge.-stopped { background: $foreground-darken-2; color: $text; }
    StatusLine > #badge.-failed { background: $error; color: $text; }
    StatusLine > #badge.-idle { background: $foreground-darken-2; color: $text; }
    """

    state = var("", init=False)  # the run's state the badge shows

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.badge = Label("", id="badge")
        self.text = StatusText(id="status-text")

    def compose(self) -> ComposeResult:
        yield self.badge
        yield self.text

    def set_state(self, state: str) -> None:
        self.state = state

    def watch_state(self, old: str, state: str) -> None:
        if old:
            self.badge.remove_class(f"-{old}")
        self.badge.add_class(f"-{state}")
        self.badge.update(STATE_LABELS.get(state, state.upper()))

    def set_segments(self, segments: list[Segment]) -> None:
        self.text.set_segments(segments)


class AlertLine(Static):
    """One prominent line for what needs the user's attention; hidden when there is nothing."""

    DEFAULT_CSS = """
    AlertLine {
        height: auto;
        max-height: 3;
        width: 1fr;
        padding: 0 1;
        display: none;
    }
    AlertLine.-shown { display: block; }
    AlertLine.-error { background: $error; color: $text; text-style: bold; }
    AlertLine.-warning { background: $warning; color: $text; }
    AlertLine.-info { background: $boost; color: $text; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("", **kwargs)
        self.level = ""
        self.message = ""

    def show(self, level: str, message: str) -> None:
        if (level, message) == (self.level, self.message):
            return
        for lv in ("error", "warning", "info"):
            self.set_class(lv == level, f"-{lv}")
        self.level, self.message = level, message
        self.set_class(bool(message), "-shown")
        self.update(Content(message))

    def clear(self) -> None:
        self.show("", "")
