"""The app's composed parts, each built on a fake host (no App, no event loop) and the scripted engine."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripted import ScriptedTrainer, step_event

from cockpit.app.comparing import Comparing
from cockpit.app.event_feed import DIALOG_TICK_EVERY, TICK_S, EventFeed, EventInbox
from cockpit.app.main_screen import MainScreen
from cockpit.app.notifications import Notifier, NotifySettings, StallWatch
from cockpit.app.offers import Offers
from cockpit.app.quitting import Quitting
from cockpit.app.run_commands import RunCommands
from cockpit.app.run_events import RunEvents
from cockpit.app.run_opening import RunOpening
from cockpit.app.session import Session
from cockpit.app.switching import Switching
from cockpit.screens.dialogs import ChoiceScreen, ConfirmScreen
from cockpit.screens.lr_dialog import LrScreen
from engine.events import Alert, RunState, StateChanged


class FakeWorker:
    def __init__(self) -> None:
        self.is_finished = False
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimer:
    def __init__(self, callback: Callable[[], Any]) -> None:
        self.callback = callback
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


class FakeHost:
    """What a part asks of the app, recorded."""

    def __init__(self, trainer: Any = None) -> None:
        self.session = Session(preset="tiny")
        self.main_screen = MainScreen()
        self.screen: Any = self.main_screen
        self.clock = lambda: 100.0
        self.sub_title = ""
        self.is_headless = True
        self.is_running = True
        self.toasts: list[tuple[str, str, str]] = []
        self.pushed: list[tuple[Any, Any]] = []
        self.answers: list[Any] = []  # what the dialogs awaited (push_screen_wait) answer
        self.started: list[tuple[str, Any]] = []
        self.exited = False
        self.statuses = 0
        self.screen_stack: list[Any] = [self.main_screen]
        self.intervals: list[tuple[float, Any]] = []
        if trainer is not None:
            self.session.trainer = trainer
            self.session.engine_worker = FakeWorker()  # type: ignore[assignment]
            self.session.state = RunState.RUNNING

    def notify(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None, markup: bool = True) -> None:  # fmt: skip
        self.toasts.append((title, message, severity))

    def push_screen(self, screen: Any, callback: Any = None) -> None:
        self.pushed.append((screen, callback))

    async def push_screen_wait(self, screen: Any) -> Any:
        self.pushed.append((screen, "wait"))
        return self.answers.pop(0)

    def set_interval(
        self, interval: float, callback: Callable[[], Any], *, name: str | None = None
    ) -> FakeTimer:
        self.intervals.append((interval, callback))
        return FakeTimer(callback)

    def batch_update(self) -> Any:
        return contextlib.nullcontext()

    def set_timer(self, delay: float, callback: Callable[[], Any]) -> FakeTimer:
        return FakeTimer(callback)

    def run_worker(self, work: Any, **_options: Any) -> None:
        self.pushed.append(("worker", work))

    def call_from_thread(self, callback: Callable[..., Any], *args: Any) -> Any:
        return callback(*args)

    def exit(self) -> None:
        self.exited = True

    def can_draw(self) -> bool:
        return True

    def refresh_status(self) -> None:
        self.statuses += 1

    def refresh_offers(self) -> None:
        pass

    def start_run(self, preset: str, make: Any = None) -> None:
        self.started.append((preset, make))

    def leaving_series_note(self) -> str:
        return ""

    def retitle(self, ev: Any) -> None:
        self.session.preset = ev.preset or self.session.preset

    def exit_summary(self) -> list[Any]:
        return []


def parts(trainer: Any = None) -> tuple[FakeHost, RunCommands, Quitting, Switching]:
    host = FakeHost(trainer)
    commands = RunCommands(host)  # type: ignore[arg-type]
    quitting = Quitting(host, commands)  # type: ignore[arg-type]
    switching = Switching(host, commands, quitting, [], lambda _n: (True, ""), None)  # type: ignore[arg-type]
    return host, commands, quitting, switching


def test_a_command_with_no_run_says_so_and_sends_nothing() -> None:
    host, commands, _, _ = parts()
    assert commands.send("pause", lambda run: run.pause()) is False
    assert host.toasts == [("", "no run in progress", "warning")]


def test_pause_is_sent_and_followed_until_acknowledged() -> None:
    trainer = ScriptedTrainer("tiny", script=[])
    host, commands, _, _ = parts(trainer)
    commands.toggle_pause()
    assert trainer.calls == [("pause",)]
    assert host.session.view.requested == RunState.PAUSED
    commands.toggle_pause()  # toggles from what was asked, not yet acknowledged
    assert trainer.calls[-1] == ("resume",)


def test_a_refused_command_is_a_toast_not_a_crash() -> None:
    class Refusing(ScriptedTrainer):
        def sample(self) -> None:
            raise RuntimeError("read-only viewer")

    host, commands, _, _ = parts(Refusing("tiny", script=[]))
    commands.sample()
    assert host.toasts == [("sample failed", "RuntimeError: read-only viewer", "error")]


def test_a_burst_of_checkpoint_presses_asks_once_and_says_so_once() -> None:
    trainer = ScriptedTrainer("tiny", script=[])
    host, commands, _, _ = parts(trainer)
    for _ in range(3):
        commands.checkpoint()
    assert trainer.calls.count(("checkpoint",)) == 1
    assert [t[1] for t in host.toasts] == [
        "saving at the next step boundary...",
    ]  # the "already saving" note waits while the first toast is up


def test_quitting_stops_with_a_checkpoint_and_counts_down() -> None:
    trainer = ScriptedTrainer("tiny", script=[])
    host, _, quitting, _ = parts(trainer)
    quitting.quit_saving()
    assert host.session.quitting and trainer.calls[-1][0] == "stop"
    assert trainer.state == "stopped"  # the scripted engine acknowledges the stop at once
    assert host.session.status_note.startswith("quitting: ")
    assert host.session.quit_timer is not None
    quitting.request_quit()  # asked again while waiting: now
    assert host.session.quit_forced and host.exited
    assert host.session.engine_worker.cancelled  # type: ignore[union-attr]


def test_quitting_an_attached_run_asks_to_detach() -> None:
    class Attached(ScriptedTrainer):
        outlives_viewer = True

    host, _, quitting, _ = parts(Attached("tiny", script=[]))
    quitting.request_quit()
    screen, _ = host.pushed[-1]
    assert isinstance(screen, ChoiceScreen) and screen.purpose == "quit"
    quitting.leave_answer("detach")
    assert host.session.detaching and host.session.engine_worker.cancelled  # type: ignore[union-attr]


def test_quitting_with_no_run_asks_then_exits_at_once() -> None:
    host, _, quitting, _ = parts()
    quitting.request_quit()
    screen, answer = host.pushed[-1]
    assert isinstance(screen, ConfirmScreen)
    answer(True)
    assert host.exited


def test_a_switch_with_no_run_starts_at_once_and_with_one_stops_it_first() -> None:
    host, _, _, switching = parts()
    switching.switch_to("small")
    assert host.started == [("small", None)]
    trainer = ScriptedTrainer("tiny", script=[])
    host, _, _, switching = parts(trainer)
    switching.switch_to("small")
    assert host.started == [] and host.session.pending_preset == "small"
    assert trainer.state == "stopped"
    assert host.session.status_note.startswith("switching to small: ")


def test_the_run_on_screen_is_not_overlaid_on_itself(tmp_path: Path) -> None:
    host = FakeHost()
    host.session.view.info = None
    host.session.trainer = ScriptedTrainer("tiny", script=[])
    host.session.trainer.run_dir = str(tmp_path)  # type: ignore[assignment]
    Comparing(host).overlay_runs([tmp_path])  # type: ignore[arg-type]
    assert host.toasts[-1][1] == "that is the run on screen: pick others to compare with it"
    assert not host.pushed  # nothing read


def test_leaving_says_what_happens_to_the_run_on_screen() -> None:
    trainer = ScriptedTrainer("tiny", script=[])
    host, _, quitting, switching = parts(trainer)
    opening = RunOpening(host, switching, Comparing(host))  # type: ignore[arg-type]
    assert opening.leaving_note().startswith("tiny (step 0) is saved (a checkpoint) and stopped")
    host.session.state = RunState.FINISHED
    assert opening.leave_question("other") is None


def test_a_read_only_viewer_is_offered_no_steering() -> None:
    class Viewer(ScriptedTrainer):
        read_only = True

    host, commands, _, _ = parts(Viewer("tiny", script=[]))
    offers = Offers(host, commands.pause_target_state, starts_runs=False)  # type: ignore[arg-type]
    assert offers.offered("checkpoint") is False
    assert offers.offered("read_only_note") is True
    assert offers.steering_refusal().startswith("this viewer only watches")  # type: ignore[union-attr]
    assert offers.refuse_steering_key("c") and host.toasts[-1][2] == "warning"


def test_the_feed_routes_steps_to_the_panels_and_alerts_to_the_alert_line() -> None:
    trainer = ScriptedTrainer("tiny", script=[])
    host, commands, quitting, switching = parts(trainer)
    notifier = Notifier(NotifySettings(), lambda _text: None, lambda: None)
    run_events = RunEvents(host, commands, quitting, switching, notifier, StallWatch())  # type: ignore[arg-type]
    feed = EventFeed(host, EventInbox(), run_events)  # type: ignore[arg-type]
    feed.route(step_event(1, 3.5, 1e-3, 0.5, 90.0))
    assert host.session.view.step == 1 and host.main_screen.loss_panel.last_loss == 3.5
    feed.route(Alert(level="warning", message="disk almost full", code="disk", step=1, time=90.1))
    assert host.session.view.alert is not None and host.session.view.alert[0] == "warning"
    feed.route(StateChanged(state=RunState.PAUSED, step=1, reason="user", time=90.2))
    assert host.session.state == RunState.PAUSED
    assert host.main_screen.status_line.state == RunState.PAUSED


def test_the_lr_dialog_sends_what_enter_chose_and_nothing_when_cancelled() -> None:
    trainer = ScriptedTrainer("tiny", script=[])
    host, commands, _, _ = parts(trainer)
    host.answers = [("set", 5e-4), None, ("scale", 0.5)]
    for _ in range(3):
        asyncio.run(commands.set_lr_by_dialog())
    assert trainer.calls == [("set_lr", 5e-4), ("scale_lr", 0.5)]
    assert [type(screen) for screen, _ in host.pushed] == [LrScreen] * 3


def test_the_feeds_tick_drains_four_times_a_second_and_under_a_dialog_every_2_s() -> None:
    trainer = ScriptedTrainer("tiny", script=[])
    host, commands, quitting, switching = parts(trainer)
    notifier = Notifier(NotifySettings(), lambda _text: None, lambda: None)
    run_events = RunEvents(host, commands, quitting, switching, notifier, StallWatch())  # type: ignore[arg-type]
    feed = EventFeed(host, EventInbox(), run_events)  # type: ignore[arg-type]
    feed.start()
    assert host.intervals == [(TICK_S, feed.tick)] and TICK_S == 0.25
    drains: list[str] = []
    feed.pump = lambda force=False: drains.append("pump") or 0  # type: ignore[method-assign]
    feed.redraw_due = lambda: drains.append("redraw")  # type: ignore[method-assign]
    feed.tick()
    assert drains == ["redraw"]  # nothing arrived: nothing drained
    trainer._emit(step_event(1, 3.5, 1e-3, 0.5, 90.0))
    feed.inbox.pull(trainer)
    feed.tick()
    assert drains == ["redraw", "pump"]
    host.screen = ConfirmScreen("Roll back", "?")  # a dialog covers the main screen
    for _ in range(2 * DIALOG_TICK_EVERY):
        feed.tick()
    assert len(drains) == 4  # every 8th tick only


def test_the_main_screen_hands_each_event_to_the_panels_that_draw_it() -> None:
    screen = MainScreen()
    screen.take(step_event(1, 3.5, 1e-3, 0.5, 90.0))
    screen.take(step_event(2, 3.4, 1e-3, 0.5, 90.1))
    assert screen.loss_panel.last_loss == 3.4 and len(screen.lr_panel.applied) == 2
    screen.take(Alert(level="info", message="rolled back to step 1", code="rollback", step=1, time=90.2))
    assert list(screen.loss_panel.raw.xs) == [1.0] and screen.loss_panel.markers[-1][2] == "rollback"


def test_the_loss_panel_owns_its_keys_and_the_one_table_shows_them() -> None:
    from cockpit.app.key_table import COMMANDS, key_bindings
    from cockpit.widgets.loss import LossPanel

    panel_keys = {binding.action: binding.key for binding in LossPanel.BINDINGS}  # type: ignore[union-attr]
    assert panel_keys == {"toggle_x": "t", "toggle_log": "g", "cycle_smoothing": "m",
                          "cycle_x_window": "x", "toggle_y_all": "y"}  # fmt: skip
    assert {c.action: c.keys for c in COMMANDS if c.action in panel_keys} == panel_keys
    app_keys = {b.action: b.key for b in key_bindings()}  # the app binds them too: any focus
    assert all(app_keys[action] == key for action, key in panel_keys.items())
    panel = LossPanel()
    panel.action_toggle_log()
    panel.action_toggle_x()
    assert panel.log_y and panel.x_axis == "tokens" and "log y" in str(panel.border_title)
