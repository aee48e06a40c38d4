"""The cockpit: a Textual app that runs one training engine in a thread worker and shows it.

The app composes its parts (the run's commands, quitting, switching, opening and starting runs,
comparing, the event feed and the run-wide events), each with the app as its `Host`, and
handles the screen's messages with `@on`. The UI thread never touches torch.
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
from textual.events import Key
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.worker import Worker, WorkerState, get_current_worker

from cockpit.app.comparing import Comparing
from cockpit.app.event_feed import EventFeed, EventWake
from cockpit.app.key_table import help_rows, key_bindings, palette_entries
from cockpit.app.main_screen import MainScreen
from cockpit.app.notifications import Notifier, NotifySettings, StallWatch
from cockpit.app.offers import Offers
from cockpit.app.preset_switch import data_always_available
from cockpit.app.quitting import Quitting
from cockpit.app.run_commands import RunCommands
from cockpit.app.run_events import RunEvents
from cockpit.app.run_opening import RunOpening
from cockpit.app.run_starts import ResumeFactory, RunStarts
from cockpit.app.run_view import RunView
from cockpit.app.samples_view import SamplesView
from cockpit.app.session import Session
from cockpit.app.session_runs import SessionRun, resumed_preset, run_dir_of
from cockpit.app.switching import Switching
from cockpit.screens.cooldown import CooldownScreen
from cockpit.screens.help_screen import HelpScreen
from cockpit.screens.live_settings import LiveSettingsScreen, SchedulePreview
from cockpit.widgets.samples import SamplesPanel
from engine.config import DEFAULT_PRESET, ConfigError
from engine.contract import EngineHandle
from engine.control import DETACHED
from engine.events import CheckpointSaved, RunStarted, RunState, Step


class CockpitApp(App[None]):
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

    class EventsArrived(Message):
        """Posted by the waking thread: events a person waits to see arrived, drain them now."""

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
        # the app's parts, each with the app as its host
        self.commands = RunCommands(self)
        self.offers = Offers(self, self.commands.pause_target_state, resume_factory is not None)
        self.quitting = Quitting(self, self.commands)
        self.switching = Switching(
            self, self.commands, self.quitting, list(preset_dirs),
            data_available or data_always_available, fit_warning,
        )  # fmt: skip
        self.comparing = Comparing(self)
        self.samples_view = SamplesView(self)
        self.opening = RunOpening(self, self.switching, self.comparing)
        self.starts = RunStarts(self, self.opening, self.switching, resume_factory)
        self.run_events = RunEvents(
            self, self.commands, self.quitting, self.switching, self.notifier, self.stall_watch
        )
        self.feed = EventFeed(self, self.event_wake.inbox, self.run_events)

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
        self.feed.start()
        self.start_run(self.session.preset)
        if self._initial_overlays:
            self.comparing.overlay_runs(self._initial_overlays)

    @on(EventsArrived)
    def drain_now(self) -> None:
        self.feed.pump()

    def on_unmount(self) -> None:
        self.event_wake.stop()

    def events_arrived(self) -> None:
        """Called on the waking thread: ask the UI thread for a drain now."""
        try:
            self.post_message(self.EventsArrived())  # thread-safe; refused once the app has closed
        except RuntimeError:  # its event loop is closed: nothing left to draw on
            pass

    # drawing the run's events --------------------------------------------------------------------
    def pump(self, force: bool = False) -> int:
        """Drain the engine's events, route them, update text at once and plots when due.

        `force` redraws the plots now (tests and snapshots use it). Returns the events routed.
        """
        return self.feed.pump(force)

    def can_draw(self) -> bool:
        """Whether the main screen is there to draw on: not once the app shuts down (Textual's
        run_test prunes the screens while the app's loop still dispatches)."""
        return self.is_running and bool(self.screen_stack)

    def refresh_status(self) -> None:
        self.run_events.refresh_status()

    def retitle(self, ev: RunStarted) -> None:
        """A run started: its name leads the status line and is the app's subtitle."""
        self.session.preset = ev.preset or self.session.preset
        self.sub_title = ev.preset

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

    @property
    def quit_forced(self) -> bool:
        """The user quit without waiting for the final checkpoint."""
        return self.session.quit_forced

    # what the parts do, for the CLI, the series app and tests -----------------------------------
    def detach(self) -> None:
        self.quitting.detach()

    def quit_saving(self) -> None:
        self.quitting.quit_saving()

    def overlay_runs(self, run_dirs: Sequence[Path]) -> None:
        self.comparing.overlay_runs(run_dirs)

    def leaving_series_note(self) -> str:
        """One line for a dialog whose yes ends what the app is doing beyond the run on screen
        (`cockpit ablate`'s series); "" for the plain app."""
        return ""

    # running the engine -------------------------------------------------------------------------
    def start_run(self, preset: str, make: Callable[[], EngineHandle] | None = None) -> None:
        """Build the engine handle (`make()`, by default the factory's trainer for `preset`)
        and run it in a thread worker."""
        make = make or partial(self.trainer_factory, preset)
        self.session.preset = preset
        self.session.pending_preset = self.session.pending_make = None
        self.session.put_aside_current_run()
        self.session.detaching = False  # a viewer that left its run for this one is now this one's
        self._reset_run_view()
        self.run_events.set_state(RunState.STARTING)
        self.session.status_note = f"starting {preset}..."
        try:
            trainer = make()
        except Exception as e:  # noqa: BLE001 - the engine's constructor: whatever it raises is shown
            self.session.trainer = None
            self.run_events.set_state(RunState.FAILED)
            kind = "config error" if isinstance(e, ConfigError) else type(e).__name__
            self.session.status_note = ""
            self.run_events.set_alert("error", f"✗ {kind}: {e}")
            self.main_screen.show_no_run(
                f"no run: {preset} could not start",
                f"{preset} could not start (see above).\np: pick another preset   q: quit",
            )
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
            self.run_events.set_state(RunState.FAILED)
            self.run_events.set_alert("error", f"✗ engine crashed: {type(err).__name__}: {err}")
            self.notify(f"{type(err).__name__}: {err}", title="Engine crashed", severity="error")
        elif result == DETACHED:
            pass  # the run goes on without this viewer: its state is the last one seen
        elif self.session.state not in RunState.ENDED:
            self.run_events.set_state(result if result in RunState.ENDED else RunState.STOPPED)
        self.engine_finished()

    def engine_finished(self) -> None:
        """The run's engine worker has ended: quit, or start the run a switch waits for."""
        # its telemetry poller is gone, or this viewer left it
        self.main_screen.device_panel.readings_stopped("detached" if self.session.detaching else "run ended")
        if self.session.switch_timer is not None:
            self.session.switch_timer.stop()
            self.session.switch_timer = None
        self.refresh_offers()
        if self.session.quitting:
            self.exit()
        elif self.session.pending_preset is not None:
            self.start_run(self.session.pending_preset, self.session.pending_make)
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
        """Textual's toast, and a full repaint of the screen once it has gone: Textual's toast
        rack can leave rows unpainted as toasts expire, and the panels repaint only rows that
        changed."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
        shown_for = self.NOTIFICATION_TIMEOUT if timeout is None else timeout
        self.set_timer(shown_for + 0.25, self._repaint_after_toast)

    def _repaint_after_toast(self) -> None:
        if self.screen_stack:  # not after the app has shut down
            self.screen.refresh()

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
        current = self.session.current_run()
        return [*self.session.past_runs, *([current] if current is not None else [])]

    # keys and the palette ----------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.offers.check_action(action)

    def offered(self, action: str) -> bool | None:
        return self.offers.offered(action)

    def refresh_offers(self) -> None:
        """What is offered changed (the run's state, its engine, the viewer): the footer and the
        palette follow, and the samples panel names s only while a press would sample."""
        self.refresh_bindings()
        self.main_screen.samples_panel.offer_sampling(self.offered("sample") is True)

    def on_key(self, event: Key) -> None:
        self.offers.key_pressed(event.key)

    def action_pause(self) -> None:
        self.commands.pause()

    def action_resume(self) -> None:
        self.commands.resume()

    def action_toggle_pause(self) -> None:
        self.commands.toggle_pause()

    def action_checkpoint(self) -> None:
        self.commands.checkpoint()

    def action_lr_up(self) -> None:
        self.commands.lr_up()

    def action_lr_down(self) -> None:
        self.commands.lr_down()

    @work
    async def action_lr_dialog(self) -> None:
        await self.commands.set_lr_by_dialog()

    def action_sample(self) -> None:
        self.commands.sample()

    def action_evaluate(self) -> None:
        self.commands.evaluate()

    def action_rollback(self) -> None:
        self.commands.rollback()

    def action_live_settings(self) -> None:
        self.commands.open_live_settings()

    def action_cool_down(self) -> None:
        self.commands.open_cool_down()

    def action_read_only_note(self) -> None:
        self.offers.read_only_note()

    def action_run_over_note(self) -> None:
        self.offers.run_over_note()

    async def action_quit(self) -> None:
        """`q` on the main screen (and the palette's Quit)."""
        self.quitting.request_quit()

    async def action_request_quit(self) -> None:
        """ctrl+c / ctrl+q (priority bindings, so they work in every dialog)."""
        self.quitting.request_quit()

    def action_presets(self) -> None:
        self.switching.open_presets()

    def action_clear_overlays(self) -> None:
        self.comparing.clear_overlays()

    def action_runs(self) -> None:
        """`h`: every run under the runs directory; what is picked there comes back here."""
        from cockpit.screens.runs_screen import RunsScreen

        overlaid = [o.key for o in self.main_screen.loss_panel.overlays]
        current = self.session.run_dir
        self.push_screen(
            RunsScreen(Path(self.runs_root), current=current, selected=overlaid), self.runs_chosen
        )

    def runs_chosen(self, choice: Any) -> None:
        """What the runs screen asked for: open, overlay, resume, a new run, a fork."""
        if choice is None:
            return
        dirs = [Path(d) for d in choice.run_dirs]
        if not dirs:
            return
        match choice.action:
            case "open":
                self.opening.open_run(dirs[0])
            case "overlay":
                self.comparing.overlay_runs(dirs)
            case "resume":
                self.starts.resume_run(dirs[0])
            case "new":
                self.starts.new_from_config(dirs[0])
            case "fork":
                self.starts.fork_run(dirs[0], list(choice.overrides))

    def action_resume_run(self) -> None:
        """`r` on a finished run's view: train it on from its last checkpoint."""
        if self.session.run_dir:
            self.starts.resume_run(Path(self.session.run_dir))

    def action_new_from_config(self) -> None:
        """`n`: a new run (step 0) with the whole config of the run on screen."""
        if self.session.run_dir:
            self.starts.new_from_config(Path(self.session.run_dir))

    def action_fork_run(self) -> None:
        """`f`: a branch of the run on screen from one of its checkpoints, changed settings."""
        if self.session.run_dir:
            self.starts.ask_fork(Path(self.session.run_dir))

    @on(SchedulePreview)
    def show_schedule_preview(self, message: SchedulePreview) -> None:
        """A settings screen's schedule, drawn on the LR panel before it is applied."""
        panel = self.main_screen.lr_panel
        open_here = isinstance(self.screen, (LiveSettingsScreen, CooldownScreen))
        if message.curve is None or not open_here:  # a late preview of a closed screen: none
            changed = panel.clear_preview()
        else:
            changed = panel.set_preview(message.curve, message.max_steps)
        if changed:  # drawn at once: a plot redraw per change typed, none for the same curve
            panel.flush(force=True)

    # the loss panel's keys, bound here too: they work whichever panel has the focus
    def action_toggle_x(self) -> None:
        self.main_screen.loss_panel.action_toggle_x()

    def action_toggle_log(self) -> None:
        self.main_screen.loss_panel.action_toggle_log()

    def action_cycle_smoothing(self) -> None:
        self.main_screen.loss_panel.action_cycle_smoothing()

    def action_cycle_x_window(self) -> None:
        self.main_screen.loss_panel.action_cycle_x_window()

    def action_toggle_y_all(self) -> None:
        self.main_screen.loss_panel.action_toggle_y_all()

    def action_zoom(self) -> None:
        self.main_screen.zoom()

    def action_zoom_panel(self, panel_id: str) -> None:
        self.main_screen.zoom_panel(panel_id)

    def action_help(self) -> None:
        # the keys that do something now, and those this kind of app adds
        self.push_screen(HelpScreen([*help_rows(self.offered), *self.help_extras()]))

    def help_extras(self) -> list[tuple[str, str]]:
        """(keys, description) of the keys a kind of app binds beside the command table's."""
        return []

    def action_journal(self) -> None:
        """`j`: the run's interventions, read from its metrics.jsonl."""
        from cockpit.screens.journal import JournalScreen

        self.push_screen(JournalScreen(self.session.run_dir))

    def on_samples_panel_open_screen(self, _message: SamplesPanel.OpenScreen) -> None:
        """enter on the samples panel: its samples by prompt and step, compared runs' beside."""
        self.samples_view.open()

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
