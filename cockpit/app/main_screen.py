"""The main screen: the layout, the panels, the drain timer and where each event goes.

`CockpitApp` starts, switches and stops runs and handles quitting; this screen shows the run.
A ~4 Hz timer drains the engine's events and routes them: the panels take the readings (steps,
evaluations, samples, telemetry, memory) at once; what concerns the run as a whole (it started,
changed state, saved, hit an alert) goes to the app. Text updates at once, plots at most about
once a second (see `RedrawGovernor`), stretched further when the UI thread is busy.

Sizes: the classes below (compact, narrow, short, too-small) are set by hand in `apply_size`.
Textual's screen breakpoints give one class per axis, but `compact` is "narrower than 120 OR
shorter than 34" and the footer and the too-small notice need the size itself, so they would
not give the same classes at the same sizes.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, cast

from textual.app import ComposeResult
from textual.containers import Container, Vertical
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Static

from cockpit.figures.numbers import fmt_int, fmt_lr
from cockpit.figures.pacing import LoadGovernor
from cockpit.widgets.data_progress import DataProgressPanel
from cockpit.widgets.device import DevicePanel
from cockpit.widgets.loss import LossPanel
from cockpit.widgets.lr import LrPanel
from cockpit.widgets.memory import MemoryPanel
from cockpit.widgets.samples import SamplesPanel
from cockpit.widgets.status import AlertLine, StatusLine
from engine.events import (
    Alert,
    CheckpointSaved,
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
)

if TYPE_CHECKING:
    from cockpit.app.cockpit_app import CockpitApp

TICK_S = 0.25  # event drain period
STATUS_REFRESH_S = 1.0  # counters in the status line redraw at most this often
LOSS_MIN_INTERVAL_S = 1.0  # plots redraw at most this often (more while the UI is busy)
LR_MIN_INTERVAL_S = 2.0
DEVICE_MIN_INTERVAL_S = 1.0
UI_CPU_TARGET = 0.02  # the UI thread's share of one core that LoadGovernor aims for
URGENT_EVENTS = (RunStarted, StateChanged, Alert, LrChanged, CheckpointSaved)  # drawn at once
DIALOG_TICK_EVERY = 8  # while a dialog is open, drain every 8th tick (2 s)
MIN_WIDTH, MIN_HEIGHT = 80, 24
COMPACT_WIDTH = 120
COMPACT_HEIGHT = 34


class MainScreen(Screen[None]):
    """Status and alert lines on top (and the corpus preparation under them while it lasts),
    the five panels, the footer."""

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
        self._ticks_under_dialog = 0
        self._status_drawn_at = -1e9

    @property
    def cockpit(self) -> CockpitApp:
        return cast("CockpitApp", self.app)

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
        yield Footer()

    def on_mount(self) -> None:
        self.status_line.set_state(self.cockpit.state)
        self.apply_size(self.app.size.width, self.app.size.height)
        self.set_interval(TICK_S, self._tick, name="drain")
        self.watch(self, "maximized", self._zoom_changed, init=False)
        self.cockpit.start_first_run()

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

    def reset_panels(self) -> None:
        """A new run: the run's panels start empty (telemetry, about the machine, stays)."""
        for panel in (self.loss_panel, self.lr_panel, self.samples_panel, self.memory_panel):
            panel.reset()
        self.data_panel.finish()

    # the drain timer -----------------------------------------------------------------------------
    def _tick(self) -> None:
        app = self.app
        if not app.screen_stack:
            return  # the app is shutting down: nothing left to draw on
        self._adapt_to_load()
        if app.screen is not self:
            # A dialog is open: Textual re-blends the dimmed main screen behind it on every
            # change, which costs far more than the change itself. Catch up every 2 s only.
            self._ticks_under_dialog += 1
            if self._ticks_under_dialog % DIALOG_TICK_EVERY:
                return
        else:
            self._ticks_under_dialog = 0
        self.cockpit.pump()  # through the app's pump: the one seam tests hold the events back at
        self.cockpit.check_stall()

    def pump(self, force: bool = False) -> int:
        """Drain the engine's events, route them, update text at once and plots when due.

        `force` redraws the plots now (tests and snapshots use it). Returns the events routed.
        """
        if not self.app.screen_stack:
            return 0  # the app has shut down: nothing left to draw on
        # One screen update for everything this drain changes, not one per widget touched.
        with self.app.batch_update():
            return self._pump(force)

    def _pump(self, force: bool) -> int:
        trainer = self.cockpit.trainer
        events = trainer.drain_events() if trainer is not None else []
        for ev in events:
            try:
                self.route(ev)
            except Exception as e:  # noqa: BLE001 - a malformed event must not kill the UI
                self.log.error(f"cannot route {ev!r}: {e}")
        if events:
            self.samples_panel.finish_batch()
        now = time.monotonic()
        # Counters (step, loss, tok/s, times) change on every tick; redrawing them once a
        # second is plenty and keeps the UI thread off the GIL. What the user did or must see
        # (state, alerts, LR changes, checkpoints) shows on the next tick.
        urgent = force or any(isinstance(ev, URGENT_EVENTS) for ev in events)
        if urgent or now - self._status_drawn_at >= STATUS_REFRESH_S * self.load.factor:
            self._status_drawn_at = now
            self.cockpit.refresh_status()
        self.data_panel.flush()  # the newest progress of this drain only
        self.device_panel.flush(now, force)
        self.loss_panel.flush(now, force)
        self.lr_panel.flush(now, force)
        return len(events)

    def _adapt_to_load(self) -> None:
        """Stretch every periodic redraw when the UI thread uses more than its share of CPU."""
        factor = self.load.sample(time.monotonic(), time.thread_time())
        self.loss_panel.governor.min_interval = LOSS_MIN_INTERVAL_S * factor
        self.lr_panel.governor.min_interval = LR_MIN_INTERVAL_S * factor
        self.device_panel.min_interval = DEVICE_MIN_INTERVAL_S * factor

    # event routing --------------------------------------------------------------------------------
    def route(self, ev: Event) -> None:
        app = self.cockpit
        # The run's past is drawn, never announced again (no toast, no notice) nor counted in
        # the current session's speed: a resumed run's history, replayed right after its
        # RunStarted with the original timestamps, and whatever the engine handle says it
        # replayed (a finished run's files, RunStarted too; an attach's replay).
        info = app.view.info
        trainer = app.trainer
        replayed_until = trainer.replayed_until if trainer is not None else 0.0
        history = (info is not None and ev.time < info.time) or ev.time <= replayed_until
        if isinstance(ev, Step):
            self._on_step(ev, history)
            return
        if not isinstance(ev, RunStarted) and not history:
            app.view.tracker.observe(ev.time)
        match ev:
            case DataProgress():
                self.data_panel.add_progress(ev)
            case Telemetry():
                self.device_panel.update_telemetry(ev)
            case MemoryBreakdown():
                self.memory_panel.update_breakdown(ev)
            case RankReport():  # under torchrun: every rank, gathered by rank 0
                self.device_panel.update_ranks(ev)
                self.memory_panel.update_ranks(ev)
            case Eval():
                self.loss_panel.add_eval(ev.step, ev.val_loss, train_time_s=ev.train_time_s)
                app.boundary_work.done("evaluate", ev.step, ev.time)
            case Sample():
                self.samples_panel.add_sample(ev.step, ev.prompt, ev.text)
                app.boundary_work.done("sample", ev.step, ev.time)
            case RunStarted():
                self.data_panel.finish()  # prepared: the run's panels take over
                app.boundary_work.configure(ev.config or {}, ev.max_steps)
                app.run_started(ev, announce=not history)
            case StateChanged():
                if ev.state in RunState.ENDED:
                    self.data_panel.finish()  # stopped or failed while preparing
                app.state_changed(ev, announce=not history)
            case CheckpointSaved():
                app.checkpoint_saved(ev, announce=not history)
                if ev.reason == "interval":
                    app.boundary_work.done("checkpoint", ev.step, ev.time)
            case LrChanged():
                app.view.scale = ev.scale
                app.view.lr = ev.new_lr
                self.lr_panel.add_change(ev.step, ev.old_lr, ev.new_lr, ev.scale)
                self.loss_panel.add_marker(ev.step, "lr")  # and what followed, on the loss
                if not history:
                    ramp = (
                        f"\nwarmup: {fmt_lr(ev.after_warmup_lr)} from step {fmt_int(ev.warmup_ends)}"
                        if ev.warmup_ends is not None
                        else ""
                    )
                    app.notify(
                        f"{fmt_lr(ev.old_lr)} → {fmt_lr(ev.new_lr)} (multiplier ×{ev.scale:.3g})"
                        f"{ramp}",
                        title=f"LR changed at step {fmt_int(ev.step)}",
                        timeout=4,
                    )
            case Alert():
                if ev.code == "rollback" and ev.level == "info":
                    self.loss_panel.add_marker(ev.step, "rollback")
                app.alert_raised(ev, announce=not history)
        if isinstance(ev, (StateChanged, Alert)) and not history:
            app.notice(ev)  # finished, failed, paused on a fault: a desktop notification

    def _on_step(self, ev: Step, history: bool) -> None:
        app = self.cockpit
        view = app.view
        if not history:
            app.stall_watch.step(ev, app.clock())
        if view.anomaly is not None and ev.step > view.anomaly.step:
            # the run trained on past the fault (resumed; in a replay, the steps after it): the
            # fault is behind it, and so is what the alert line says of it
            if view.alert and (view.alert[0] == "nan" or view.anomaly.fault in view.alert[1]):
                view.alert = None
            view.anomaly = None
        view.step = ev.step
        view.grad_norm = ev.grad_norm
        if not history:  # a replayed step's speed is the last session's, not this one's
            view.tokens_per_s = ev.tokens_per_s
            view.mfu = ev.mfu
            view.data_share = ev.data_time_s / ev.step_time_s if ev.step_time_s else 0.0
        if math.isfinite(ev.update_ratio):
            view.update_ratio = ev.update_ratio
        view.lr = ev.lr
        self.loss_panel.add_step(ev.step, ev.loss, ev.tokens, step_time_s=ev.step_time_s)
        self.lr_panel.add_step(ev.step, ev.lr)
        if not history:
            view.tracker.add_step(ev.time, ev.step)
            app.last_step_seen = (ev.time, ev.step_time_s or 0.0)
            app.boundary_work.step(ev.time, ev.step)
        app.expire_alert()

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
        """Zoom in or out, by key, palette or Textual's own esc: the banner and plots follow now."""
        self.cockpit.refresh_status()
        for plot in (self.loss_panel, self.lr_panel):
            plot.touch()
        self.call_after_refresh(self.pump, True)
