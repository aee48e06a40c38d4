"""The main screen: the layout, the panels and when they redraw.

It knows nothing of the app: it takes the run's events (`take`), redraws what is due (`flush`),
and says by message that it is up (`Ready`) and that a panel was zoomed (`ZoomChanged`). Text
updates at once, plots at most about once a second. The size classes are set by hand in
`apply_size` (`compact` is "narrower than 120 OR shorter than 34", which Textual's per-axis
breakpoints cannot say).
"""

from __future__ import annotations

import time
from typing import Any, cast

from textual.app import ComposeResult
from textual.containers import Container, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Static

from cockpit.widgets.data_progress import DataProgressPanel
from cockpit.widgets.device import DevicePanel
from cockpit.widgets.footer import KeyFooter
from cockpit.widgets.loss import LossPanel
from cockpit.widgets.lr import LrPanel
from cockpit.widgets.memory import MemoryPanel
from cockpit.widgets.pacing import LoadGovernor
from cockpit.widgets.samples import SamplesPanel
from cockpit.widgets.status import AlertLine, StatusLine
from engine.events import (
    Alert,
    DataProgress,
    Eval,
    Event,
    LrChanged,
    MemoryBreakdown,
    RankReport,
    RunStarted,
    RunState,
    Sample,
    StateChanged,
    Step,
    Telemetry,
    ThreadsChosen,
)

STATUS_REFRESH_S = 1.0  # counters in the status line redraw at most this often
LOSS_MIN_INTERVAL_S = 1.0  # plots redraw at most this often (more while the UI is busy)
LR_MIN_INTERVAL_S = 2.0
DEVICE_MIN_INTERVAL_S = 1.0
UI_CPU_TARGET = 0.02  # the UI thread's share of one core that LoadGovernor aims for
MIN_WIDTH, MIN_HEIGHT = 80, 24
COMPACT_WIDTH = 120
COMPACT_HEIGHT = 34


def is_rollback(ev: Event) -> bool:
    """The alert that says the run is back at its checkpoint's step."""
    return isinstance(ev, Alert) and ev.code == "rollback" and ev.level == "info"


class MainScreen(Screen[None]):
    """Status and alert lines on top (and the corpus preparation under them while it lasts),
    the five panels, the footer."""

    class Ready(Message):
        """The screen is mounted: the run can start."""

    class ZoomChanged(Message):
        """A panel was zoomed in or out (by key, palette or esc): the banner follows."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.status_line = StatusLine(id="status")
        self.alert_line = AlertLine(id="alert")
        self.data_panel = DataProgressPanel(id="data-progress")
        self.loss_panel = LossPanel(id="loss", classes="panel")
        self.device_panel = DevicePanel(id="device", classes="panel")
        self.memory_panel = MemoryPanel(id="memory", classes="panel")
        self.samples_panel = SamplesPanel(id="samples", classes="panel")
        self.lr_panel = LrPanel(id="lr", classes="panel")
        self.load = LoadGovernor(target=UI_CPU_TARGET)
        self._status_drawn_at = -1e9

    def compose(self) -> ComposeResult:
        with Vertical(id="top"):
            yield self.status_line
            yield self.alert_line
            yield self.data_panel
        yield Static(id="too-small")
        with Container(id="panels"):
            yield self.loss_panel
            with Vertical(id="side"):
                yield self.device_panel
                yield self.memory_panel
                yield self.samples_panel
            yield self.lr_panel
        yield KeyFooter()

    def on_mount(self) -> None:
        self.apply_size(self.app.size.width, self.app.size.height)
        self.watch(self, "maximized", self._zoom_changed, init=False)
        self.post_message(self.Ready())

    def on_resize(self, event: Any) -> None:
        self.apply_size(event.size.width, event.size.height)

    def apply_size(self, width: int, height: int) -> None:
        compact = width < COMPACT_WIDTH or height < COMPACT_HEIGHT
        self.set_class(compact, "compact")
        self.set_class(width < 100, "narrow")
        self.set_class(height < 30, "short")
        self.app.set_class(height < 30, "-short")  # dialogs (other screens) tighten up too
        # Below 80x24 the panels cannot be drawn legibly: say so rather than draw them broken.
        too_small = width < MIN_WIDTH or height < MIN_HEIGHT
        self.set_class(too_small, "too-small")
        if too_small:
            for notice in self.query("#too-small"):
                cast(Static, notice).update(
                    f"Terminal too small: {width}x{height}.\n"
                    f"Enlarge it to at least {MIN_WIDTH}x{MIN_HEIGHT}; training goes on meanwhile."
                )
        for footer in self.query(Footer):
            footer.compact = width < COMPACT_WIDTH

    def take(self, ev: Event) -> None:
        """Hand the run's event to the panels that draw it (they redraw at the next `flush`)."""
        loss, lr = self.loss_panel, self.lr_panel
        match ev:
            case Step():
                loss.add_step(ev.step, ev.loss, ev.tokens, step_time_s=ev.step_time_s)
                lr.add_step(ev.step, ev.lr)
            case DataProgress():
                self.data_panel.add_progress(ev)
            case Telemetry():
                self.device_panel.update_telemetry(ev)
            case MemoryBreakdown():
                self.memory_panel.update_breakdown(ev)
            case ThreadsChosen():  # on CPU: the count measured fastest, and the times
                self.device_panel.update_threads(ev)
            case RankReport():  # under torchrun: every rank, gathered by rank 0
                self.device_panel.update_ranks(ev)
                self.memory_panel.update_ranks(ev)
            case Eval():
                loss.add_eval(ev.step, ev.val_loss, train_time_s=ev.train_time_s,
                              train_loss=ev.train_loss, train_bpb=ev.train_bpb, val_bpb=ev.val_bpb)  # fmt: skip
            case Sample():
                self.samples_panel.add_sample(ev.step, ev.prompt, ev.text)
            case RunStarted():
                self.data_panel.finish()  # prepared: the run's panels take over
                loss.tokens_per_step = ev.tokens_per_step
                loss.set_time_anchor(ev.start_step, ev.train_time_s)  # the x axis in time
                lr.set_plan(ev.planned_lr, ev.max_steps, ev.start_step)
                lr.set_tokens_schedule(ev.tokens_schedule)  # () without one
            case StateChanged():
                if ev.state in RunState.ENDED:
                    self.data_panel.finish()  # stopped or failed while preparing
                if ev.train_time_s is not None and ev.state != RunState.STARTING:
                    loss.set_time_anchor(ev.step, ev.train_time_s)  # exact where it paused or ended
            case LrChanged():
                lr.add_change(ev.step, ev.old_lr, ev.new_lr, ev.scale)
                loss.add_marker(ev.step, "lr")  # and what followed, on the loss
            case Alert() if is_rollback(ev):
                # the steps the rollback discarded leave the plots now, not at the next step
                loss.drop_from(ev.step + 1)
                lr.drop_from(ev.step + 1)
                loss.add_marker(ev.step, "rollback")

    def show_no_run(self, why: str, loss_note: str | None = None) -> None:
        """No run to draw: the run panels say so (and why), not "waiting for..." nor the last run."""
        if loss_note is not None:
            self.loss_panel.set_empty_message(loss_note)
        self.lr_panel.set_empty_message(why)
        self.memory_panel.set_empty_message(why)
        self.device_panel.set_waiting_note("no telemetry: no run")

    def reset_panels(self) -> None:
        """A new run: the run's panels start empty (telemetry, about the machine, stays)."""
        for panel in (self.loss_panel, self.lr_panel, self.samples_panel, self.memory_panel):
            panel.reset()
        self.data_panel.finish()

    @property
    def preparing_corpus(self) -> bool:
        """The run is still preparing its corpus: nothing trained, nothing to save."""
        return self.data_panel.preparing

    def status_due(self, now: float, urgent: bool) -> bool:
        """Whether the status line's counters should redraw now: at once for what the user did or
        must see (`urgent`), else about once a second (they change on every tick; redrawing them
        less keeps the UI thread off the GIL)."""
        if urgent or now - self._status_drawn_at >= STATUS_REFRESH_S * self.load.factor:
            self._status_drawn_at = now
            return True
        return False

    def flush(self, now: float, force: bool = False) -> None:
        """Redraw what is due (`force`: the plots now; tests and snapshots use it)."""
        self.data_panel.flush()  # the newest progress of this drain only
        self.device_panel.flush(now, force)
        self.loss_panel.flush(now, force)
        self.lr_panel.flush(now, force)

    def adapt_to_load(self) -> None:
        """Stretch every periodic redraw when the UI thread uses more than its share of CPU
        (called on each drain tick)."""
        factor = self.load.sample(time.monotonic(), time.thread_time())
        self.loss_panel.governor.min_interval = LOSS_MIN_INTERVAL_S * factor
        self.lr_panel.governor.min_interval = LR_MIN_INTERVAL_S * factor
        self.device_panel.min_interval = DEVICE_MIN_INTERVAL_S * factor

    # zoom --------------------------------------------------------------------------------------
    def zoom(self) -> None:
        """Zoom the focused panel (the loss panel when none is), or back out of a zoom."""
        if self.maximized is not None:
            self.minimize()
            return
        focused: Widget | None = self.focused
        target = None
        while focused is not None:
            if focused.has_class("panel"):
                target = focused
                break
            focused = focused.parent  # type: ignore[assignment]
        self._zoom(target or self.loss_panel)

    def zoom_panel(self, panel_id: str) -> None:
        panel = self.query_one(f"#{panel_id}")
        if self.maximized is panel:
            self.minimize()
        else:
            self._zoom(panel)

    def _zoom(self, panel: Widget) -> None:
        self.maximize(panel, container=False)
        panel.focus()

    def _zoom_changed(self, _panel: Any) -> None:
        """Zoom in or out, by key, palette or Textual's own esc: the plots redraw at their new
        size, and the app's banner follows."""
        for plot in (self.loss_panel, self.lr_panel):
            plot.touch()
        self.post_message(self.ZoomChanged())
