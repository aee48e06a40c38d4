"""The status line (state badge, preset, progress, speed, times, checkpoint, grad norm) and the
alert line below it (errors, NaN, pending actions).

The status text is a list of segments with priorities; at narrow widths the least important
ones are dropped rather than wrapped or cut, so the line stays readable at 80 columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Label, Static

from cockpit.figures.durations import fmt_duration
from cockpit.figures.numbers import fmt_int, fmt_loss, fmt_si
from engine.events import RunState

if TYPE_CHECKING:
    from cockpit.figures.run_view import RunView

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


def status_segments(
    view: RunView,
    preset: str,
    state: str,
    last_loss: float | None,
    dropped_events: int = 0,
    trained_s: float | None = None,
) -> list[Segment]:
    """The status line's text for the run on screen, most important segments first in priority
    (`fit_segments` drops the rest at narrow widths). Speed, ETA and MFU only while it trains."""
    segs: list[Segment] = []
    segs.append(Segment(Content.styled(preset, "bold"), 1))
    if view.max_steps:
        pct = 100.0 * view.step / view.max_steps if view.max_steps else 0.0
        segs.append(
            Segment(
                Content.assemble(
                    ("step ", "$foreground-muted"),
                    (f"{fmt_int(view.step)}", "bold"),
                    (f"/{fmt_int(view.max_steps)}", "$foreground-muted"),
                ),
                0,
            )
        )
        segs.append(Segment(progress_bar(view.step / view.max_steps, 16), 8))
        segs.append(Segment(Content.styled(f"{pct:.0f}%", "$foreground-muted"), 6))
    loss = last_loss
    if loss is not None:
        style = "bold" if math.isfinite(loss) else "bold $error"
        segs.append(
            Segment(
                Content.assemble(("loss ", "$foreground-muted"), (fmt_loss(loss), style)), 2
            )
        )
    if state in LIVE_STATES:
        # "–" until this session's first step: a resumed run's replayed speed is not live
        speed = "–" if view.tokens_per_s is None else fmt_si(view.tokens_per_s)
        segs.append(
            Segment(
                Content.assemble((speed, "bold"), (" tok/s", "$foreground-muted")),
                2,
            )
        )
    if trained_s is not None:  # the training time (TrainingClock.trained_s), named as it is
        segs.append(
            Segment(
                Content.assemble(("trained ", "$foreground-muted"), fmt_duration(trained_s)), 4
            )
        )
    if state == RunState.RUNNING and view.max_steps and view.step >= view.max_steps:
        # every step trained: the engine evaluates, samples and saves before it says finished
        # (tens of seconds on a big eval), and 'ETA 0s' all that while read as a hang
        segs.append(Segment(Content.styled("final evaluation…", "bold $accent"), 0))
    elif state in LIVE_STATES:
        eta = view.tracker.eta(view.step, view.max_steps) if view.max_steps else None
        if eta is not None:
            segs.append(
                Segment(
                    Content.assemble(
                        ("ETA ", "$foreground-muted"), (fmt_duration(eta), "bold")
                    ),
                    3,
                )
            )
    if view.grad_norm is not None:
        g = view.grad_norm
        style = "$error" if not math.isfinite(g) else ""
        segs.append(
            Segment(
                Content.assemble(
                    ("‖g‖ ", "$foreground-muted"),
                    (fmt_loss(g) if not math.isfinite(g) else f"{g:.3g}", style),
                ),
                5,
            )
        )
    if view.mfu > 0 and state in LIVE_STATES:
        peak = view.info.peak_source if view.info is not None else ""
        label = "MFU~" if peak.startswith("measured") else "MFU "
        # the engine corrects its peak so this cannot exceed 1; an old or foreign event might
        shown = f"{100 * min(view.mfu, 1.0):.1f}%"
        segs.append(Segment(Content.assemble((label, "$foreground-muted"), shown), 6))
    if view.data_share >= 0.05 and state in LIVE_STATES:
        # only worth a place when the loader is a real part of the step
        segs.append(Segment(Content.assemble(("data ", "$warning"), f"{100 * view.data_share:.0f}%"), 6))
    if view.update_ratio is not None:
        r = view.update_ratio
        style = "$warning" if r > 1e-2 else ""
        segs.append(Segment(Content.assemble(("Δw/w ", "$foreground-muted"), (f"{r:.1e}", style)), 7))
    if view.last_checkpoint is not None:
        step, _path, _reason = view.last_checkpoint
        segs.append(
            Segment(Content.assemble(("ckpt ", "$foreground-muted"), f"@{fmt_int(step)}"), 7)
        )
    if dropped_events:
        segs.append(
            Segment(Content.styled(f"⚠ {fmt_int(dropped_events)} events dropped", "$warning"), 1)
        )
    info = view.info
    if info is not None:
        segs.append(
            Segment(
                Content.styled(
                    f"{info.device} {info.dtype} · {fmt_si(info.n_params)} params",
                    "$foreground-muted",
                ),
                9,
            )
        )
    return segs


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

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state = ""
        self.badge = Label("", id="badge")
        self.text = StatusText(id="status-text")

    def compose(self) -> ComposeResult:
        yield self.badge
        yield self.text

    def set_state(self, state: str) -> None:
        if state == self.state:
            return
        badge = self.badge
        if self.state:
            badge.remove_class(f"-{self.state}")
        self.state = state
        badge.add_class(f"-{state}")
        badge.update(STATE_LABELS.get(state, state.upper()))

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
