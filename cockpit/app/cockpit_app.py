"""The cockpit: a Textual app that runs one training engine in a thread worker and shows it.

Threads: the engine's `run()` blocks in a Textual thread worker; the UI thread never touches
torch. The app starts, switches and stops runs and handles quitting; `MainScreen` lays out the
panels and says, by message, when a drain of the engine's events is due; the app routes them to
the panels and to its run-wide handlers. What the session knows is one record, `Session`.
Nothing drawn comes from the wall clock: the training time comes from the run's records
(TrainingClock), the rate and ETA from event timestamps.

The key and palette commands (pause, checkpoint, LR, sample, eval, roll back...) go to the
engine's thread-safe methods and show up when the engine acknowledges them with an event.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from textual import on, work
from textual.actions import parse as parse_action
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.worker import Worker, WorkerState, get_current_worker

from cockpit.app.actions import CommandActions
from cockpit.app.comparing import Comparing
from cockpit.app.event_feed import EventFeed
from cockpit.app.event_wake import EventWake
from cockpit.app.key_table import (
    key_bindings,
    palette_entries,
)
from cockpit.app.leaving import Leaving
from cockpit.app.main_screen import MainScreen
from cockpit.app.notifications import Notifier, NotifySettings, StallWatch
from cockpit.app.preset_switch import data_always_available
from cockpit.app.quitting import Quitting
from cockpit.app.run_events import RunEvents
from cockpit.app.run_opening import RunOpening
from cockpit.app.run_starts import ResumeFactory, RunStarts
from cockpit.app.session import Session
from cockpit.app.session_runs import SessionRun, resumed_preset, run_dir_of
from cockpit.app.stop_wait import BoundaryWork
from cockpit.app.switching import Switching
from cockpit.figures.run_view import RunView
from engine.config import DEFAULT_PRESET, ConfigError
from engine.contract import EngineHandle
from engine.control import DETACHED
from engine.events import (
    CheckpointSaved,
    RunStarted,
    RunState,
    Step,
)


class CockpitApp(
    RunOpening,
    RunStarts,
    Comparing,
    Switching,
    Quitting,
    Leaving,
    RunEvents,
    EventFeed,
    CommandActions,
    App[None],
):
    """Watch and steer one training run at a time; `p` switches to another preset."""

    CSS_PATH = "cockpit.tcss"
    TITLE = "cockpit"
    ALLOW_IN_MAXIMIZED_VIEW = "#top, Footer"

    BINDINGS = [
        *key_bindings(),  # keys, footer, help and palette: one table
        # The footer's note on a run that cannot be steered from here, and why (check_action
        # shows the one that applies).
        Binding("w", "read_only_note", "read-only viewer"),
        Binding("w", "run_over_note", "why read-only"),
    ]

    def __init__(
        self,
        trainer_factory: Callable[[str], EngineHandle],
        preset: str = DEFAULT_PRESET,
        *,
        preset_dirs: Sequence[str] = (),
        data_available: Callable[[str], tuple[Any, ...]] | None = None,
        fit_warning: Callable[[str, tuple[str, float] | None], str] | None = None,
        notify: NotifySettings | None = None,
        resume_factory: ResumeFactory | None = None,
        runs_root: str = "runs",
        overlays: Sequence[str] = (),
    ) -> None:
        """`data_available(preset)` -> (ok, note) or (ok, note, stand_in) for the preset menu;
        `fit_warning(preset, (device, peak FLOP/s) of the current run or None)` -> a warning
        when the preset is far beyond this machine, else "" (called off the UI thread: it may
        use torch). `resume_factory(run_dir, overrides)` builds a resumed run in this app (None:
        the app resumes nothing); the runs screen lists `runs_root`; `overlays` are runs whose
        loss curves are drawn over the first run's from the start (`cockpit compare`)."""
        super().__init__()
        self.trainer_factory = trainer_factory
        self.preset_dirs = list(preset_dirs)
        self.data_available = data_available or data_always_available
        self.fit_warning = fit_warning
        self.resume_factory = resume_factory
        self.runs_root = runs_root
        self._initial_overlays = [Path(d) for d in overlays]
        self.session = Session(preset=preset)
        self.main_screen = MainScreen(id="_default")  # the panels the run is drawn on
        # the run's events, moved into its inbox as they arrive, and a drain asked for (EventFeed)
        self.event_wake = EventWake(lambda: self.session.trainer, self.events_arrived)
        self.clock: Callable[[], float] = time.time  # the wall clock events are stamped with
        # desktop notifications and the bell, through the driver
        self.notifier = Notifier(notify or NotifySettings(), self._write_to_terminal, self.bell)
        self.stall_watch = StallWatch()

    def _write_to_terminal(self, text: str) -> None:
        driver = self._driver
        if driver is not None and not self.is_headless:
            driver.write(text)
            driver.flush()

    def get_default_screen(self) -> MainScreen:
        return self.main_screen

    @on(MainScreen.Ready)
    def start_first_run(self) -> None:
        """The main screen is up: start the run named on the command line (and overlay the
        runs to compare it with)."""
        self.main_screen.status_line.set_state(self.session.state)
        self.event_wake.start()
        self._start_run(self.session.preset)
        if self._initial_overlays:
            self.overlay_runs(self._initial_overlays)

    @on(MainScreen.DrainDue)
    def _drain(self) -> None:
        if self.event_wake.inbox:  # events arrived since the last drain (an idle run drains nothing)
            self.pump()
        else:
            self.redraw_due()
        self.check_stall()

    @on(MainScreen.ZoomChanged)
    def _zoom_changed(self) -> None:
        self.refresh_status()  # the banner says how to zoom out
        self.call_after_refresh(self.pump, True)

    # the session's run, for readers outside the app (the CLI, tests, benches) -------------------
    @property
    def trainer(self) -> EngineHandle | None:
        return self.session.trainer

    @property
    def state(self) -> str:
        return self.session.state

    @property
    def view(self) -> RunView:
        return self.session.view

    @property
    def preset(self) -> str:
        return self.session.preset

    # running the engine -------------------------------------------------------------------------
    @property
    def engine_running(self) -> bool:
        w = self.session.engine_worker
        return w is not None and not w.is_finished

    def _start_run(self, preset: str, make: Callable[[], EngineHandle] | None = None) -> None:
        """Build the engine handle (`make()`, by default the factory's trainer for `preset`)
        and run it in a thread worker."""
        make = make or partial(self.trainer_factory, preset)
        self.session.preset = preset
        self.session.pending_preset = self.session.pending_make = None
        self._remember_run()
        self.session.detaching = False  # a viewer that left its run for this one is now this one's
        self._reset_run_view()
        self._set_state(RunState.STARTING)
        self.session.status_note = f"starting {preset}..."
        try:
            trainer = make()
        except Exception as e:  # noqa: BLE001 - ConfigError or anything: show it, never crash
            self.session.trainer = None
            self._set_state(RunState.FAILED)
            kind = "config error" if isinstance(e, ConfigError) else type(e).__name__
            self.session.status_note = ""
            self._set_alert("error", f"✗ {kind}: {e}")
            self.main_screen.loss_panel.set_empty_message(
                f"{preset} could not start (see above).\np: pick another preset   q: quit"
            )
            self._show_no_run(f"no run: {preset} could not start")
            self.notify(str(e), title=f"Cannot start {preset}", severity="error", timeout=10)
            self.refresh_status()
            return
        self.session.trainer = trainer
        self.refresh_offers()  # a read-only viewer or a finished run's view: see offered
        resume = trainer.resume_from
        if resume:
            # The preset named on the command line is not the run's: say whose run this is
            # from the start (loading the checkpoint and the data can take seconds).
            name = resumed_preset(resume)
            self.session.preset = name or os.path.basename(os.path.normpath(run_dir_of(resume)))
            self.session.status_note = f"resuming {name + ' from ' if name else ''}{resume}..."
        self.main_screen.device_panel.set_waiting_note(
            "waiting for telemetry..."
            if trainer.telemetry_enabled
            else "no telemetry: turned off (--no-telemetry)"
        )
        self.session.engine_worker = self._run_engine(trainer)
        self.refresh_status()

    def _show_no_run(self, why: str) -> None:
        """The run panels say there is no run (and why), not "waiting for..." nor the last run."""
        self.main_screen.lr_panel.set_empty_message(why)
        self.main_screen.memory_panel.set_empty_message(why)
        self.main_screen.device_panel.set_waiting_note("no telemetry: no run")

    @work(thread=True, exit_on_error=False, group="engine", name="engine")
    def _run_engine(self, trainer: EngineHandle) -> str:
        worker = get_current_worker()
        self.session.engine_thread = threading.current_thread()
        return trainer.run(should_stop=lambda: worker.is_cancelled)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if worker is not self.session.engine_worker or not worker.is_finished:
            return
        result = worker.result if event.state == WorkerState.SUCCESS else None
        if self.session.detaching:  # a cancelled worker has no result: leaving was the reason
            result = DETACHED
        if not self.can_draw():  # the app shuts down: nothing to draw, keep the state
            if self.session.state not in RunState.ENDED and result != DETACHED:
                self.session.state = result if result in RunState.ENDED else RunState.STOPPED
            return
        self.pump()  # whatever the engine said last
        if event.state == WorkerState.ERROR:
            err = worker.error
            self._set_state(RunState.FAILED)
            self._set_alert("error", f"✗ engine crashed: {type(err).__name__}: {err}")
            self.notify(f"{type(err).__name__}: {err}", title="Engine crashed", severity="error")
        elif result == DETACHED:
            pass  # the run goes on without this viewer: its state is the last one seen
        elif self.session.state not in RunState.ENDED:
            self._set_state(result if result in RunState.ENDED else RunState.STOPPED)
        self._engine_finished()

    def _engine_finished(self) -> None:
        # its telemetry poller is gone, or this viewer left it
        self.main_screen.device_panel.readings_stopped("detached" if self.session.detaching else "run ended")
        if self.session.switch_timer is not None:
            self.session.switch_timer.stop()
            self.session.switch_timer = None
        self.refresh_offers()
        if self.session.quitting:
            self.exit()
        elif self.session.pending_preset is not None:
            self._start_run(self.session.pending_preset, self.session.pending_make)
        self.refresh_status()

    # toasts --------------------------------------------------------------------------------------
    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None:
        """Textual's toast, and a full repaint of the screen once it has gone.

        When more toasts are up than the screen is tall, Textual scrolls its toast rack and,
        as they expire, leaves the rows the rack covered unpainted; the panels repaint only
        rows whose content changed, so a toast's ghost stayed on screen (for good while paused).
        """
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
        shown_for = self.NOTIFICATION_TIMEOUT if timeout is None else timeout
        self.set_timer(shown_for + 0.25, self._repaint_after_toast)

    def _repaint_after_toast(self) -> None:
        if self.screen_stack:  # not after the app has shut down
            self.screen.refresh()

    def _summary(self) -> SessionRun | None:
        """The run on screen as the exit report describes it, or None if it never started."""
        info = self.session.view.info
        run_dir = self.current_run_dir
        if run_dir is None or (info is None and not os.path.isdir(run_dir)):
            return None  # refused before anything was written: nothing to report
        ckpt = self.session.view.last_checkpoint
        return SessionRun(
            preset=self.session.preset,
            run_dir=str(run_dir),
            state=self.session.state,
            attached=self.attached,
            detached=self.session.detaching and self.session.state not in RunState.ENDED,
            step=self.session.view.step,
            start_step=info.start_step if info is not None else 0,
            checkpoint=(ckpt[0], ckpt[1]) if ckpt is not None else None,
        )

    def _remember_run(self) -> None:
        """Before another preset starts: keep the outgoing run for the exit report."""
        self.session.last_step_seen = None
        self.session.boundary_work = BoundaryWork()
        summary = self._summary()
        if summary is not None:
            self.session.past_runs.append(summary)

    def exit_summary(self) -> list[SessionRun]:
        """Every run of this session, the current one last (call once the app has closed)."""
        trainer = self.session.trainer
        if trainer is not None:
            # What the engine said after the UI stopped draining (a checkpoint written while
            # the app was closing, after a forced quit).
            for ev in self.event_wake.inbox.take(trainer):
                match ev:
                    case CheckpointSaved():
                        self.session.view.last_checkpoint = (ev.step, ev.path, ev.reason)
                    case Step():
                        self.session.view.step = ev.step
                    case RunStarted() if self.session.view.info is None:
                        self.session.view.info = ev
        current = self._summary()
        return [*self.session.past_runs, *([current] if current is not None else [])]

    def action_journal(self) -> None:
        """`j`: the run's interventions, read from its metrics.jsonl."""
        from cockpit.screens.journal import JournalScreen

        self.push_screen(JournalScreen(self.current_run_dir))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for title, description, action in palette_entries():
            _, name, args = parse_action(action)
            if not self.offered(name):
                continue  # it would do nothing now (the run ended, a viewer): not offered
            method = getattr(self, f"action_{name}")
            # The method itself, not run_action: check_action would refuse it, the palette
            # being the open screen.
            yield SystemCommand(title, description, partial(method, *args) if args else method)
        for cmd in super().get_system_commands(screen):
            if cmd.title not in ("Quit", "Keys", "Maximize", "Minimize"):
                yield cmd

    # run-view reset ---------------------------------------------------------------------------------
    def _reset_run_view(self) -> None:
        self.session.view = RunView()
        self.main_screen.reset_panels()


def run_in_terminal(app: CockpitApp, mouse: bool = True) -> None:
    """Run the cockpit in the terminal (`mouse=False` for slow SSH links)."""
    app.run(mouse=mouse)


__all__ = ["CockpitApp", "run_in_terminal"]
