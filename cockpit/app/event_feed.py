"""The engine's events into the app: the thread that wakes on them, the inbox they wait in, the
drain and the routing of each to where it shows.

A daemon thread waits on the engine handle (`wait_for_events`) and moves what arrived into the
`EventInbox`; what a person waits to see (an acknowledgement, an alert, a state) asks for a drain
at once, the routine readings wait for the feed's tick (about 4 Hz). An idle run costs nothing.
The panels take the readings; what concerns the run as a whole goes to `RunEvents`. The run's past
is drawn, never announced again (no toast, no notice) nor counted in the current session's speed.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable

from cockpit.app.host import Host
from cockpit.app.main_screen import is_rollback
from cockpit.app.run_events import RunEvents
from cockpit.figures.live_decisions import config_after
from cockpit.figures.numbers import fmt_int, fmt_lr
from engine.contract import EngineHandle
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
    Sample,
    SettingsChanged,
    StateChanged,
    Step,
    Telemetry,
)

# the waking thread and its inbox ------------------------------------------------------------------
# Readings that come all the time and are drawn at the next tick; every other event asks for a
# drain at once.
ROUTINE_EVENTS = (Step, Telemetry, MemoryBreakdown, RankReport, DataProgress)
THREAD_NAME = "event-wake"  # the waking thread's name (the overhead bench reads its CPU clock)
WAIT_S = 0.5  # the longest wait on one handle: then the thread looks for a new run, or stops
# Events are moved at most this often (a burst of steps is one batch): an acknowledgement that
# follows a step's event by microseconds, as a pause at the step boundary does, waits this long.
COALESCE_S = 0.02
FAILED_WAIT_S = 0.25  # a handle whose wait fails is drained on this period instead
INBOX_LIMIT = 20_000  # past this the events stay in the handle's bounded queue (which counts drops)


class EventInbox:
    """The run's events between its engine handle and the screen, oldest first (thread-safe).

    The waking thread moves them in (`pull`); the UI thread takes them (`take`, which drains the
    handle too), both under one lock. The events of a handle the app switched away from are dropped.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handle: EngineHandle | None = None
        self._events: list[Event] = []

    def pull(self, handle: EngineHandle) -> list[Event]:
        """Move `handle`'s events in; returns those moved (none while the inbox is full)."""
        with self._lock:
            return self._pull(handle)

    def take(self, handle: EngineHandle | None) -> list[Event]:
        """Everything waiting for `handle`: what was moved in, then what its queue holds now."""
        with self._lock:
            if handle is None:
                self._handle, self._events = None, []
                return []
            self._pull(handle)
            events, self._events = self._events, []
            return events

    def _pull(self, handle: EngineHandle) -> list[Event]:
        if handle is not self._handle:
            self._handle, self._events = handle, []
        if len(self._events) >= INBOX_LIMIT:
            return []
        arrived = handle.drain_events()
        self._events.extend(arrived)
        return arrived

    def __len__(self) -> int:
        return len(self._events)


class EventWake:
    """The waking thread of one app and the inbox it fills (see the module). `ask_drain` is
    called on that thread; `stop()` ends it at its next look (within WAIT_S)."""

    def __init__(
        self, handle_now: Callable[[], EngineHandle | None], ask_drain: Callable[[], None]
    ) -> None:
        self.inbox = EventInbox()
        self._handle_now, self._ask_drain = handle_now, ask_drain
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=wake_on_events,
                args=(self._handle_now, self.inbox, self._ask_drain, self._stop),
                name=THREAD_NAME,
                daemon=True,
            )
            self._thread.start()

    def stop(self, join_s: float = 0.0) -> bool:
        """Stop the thread (waiting up to `join_s` for it to end); True once it has ended."""
        self._stop.set()
        if self._thread is not None and join_s > 0:
            self._thread.join(join_s)
        return self._thread is None or not self._thread.is_alive()


def wake_on_events(
    handle_now: Callable[[], EngineHandle | None],
    inbox: EventInbox,
    ask_drain: Callable[[], None],
    stop: threading.Event,
) -> None:
    """Until `stop` is set: wait on the handle `handle_now()` returns (the app's run of the
    moment), move what arrives into `inbox`, and call `ask_drain()` (from this thread) when any
    of it is not routine (see the module)."""
    while not stop.is_set():
        handle = handle_now()
        began = time.monotonic()
        try:
            arrived = handle is not None and handle.wait_for_events(WAIT_S)
            if arrived and handle is not None:
                moved = inbox.pull(handle)
                if any(not isinstance(ev, ROUTINE_EVENTS) for ev in moved):
                    ask_drain()
        except Exception:  # noqa: BLE001 - the waking thread: a handle that cannot wait is drained on a timer
            ask_drain()
            stop.wait(FAILED_WAIT_S)
            continue
        if arrived:
            stop.wait(COALESCE_S)
        else:  # nothing came (no run yet, or a handle that returned at once): never spin
            stop.wait(max(0.0, WAIT_S - (time.monotonic() - began)))


# the drain and the routing ------------------------------------------------------------------------
TICK_S = 0.25  # the tick: routine readings are drained this often (news is drained at once)
DIALOG_TICK_EVERY = 8  # while a dialog is open, drain every 8th tick (2 s)
URGENT_EVENTS = (  # drawn at once
    RunStarted, StateChanged, Alert, LrChanged, CheckpointSaved, SettingsChanged,
)  # fmt: skip


class EventFeed:
    """Drains the run's events (on its tick, or at once when the waking thread asks) and routes
    them into the main screen's panels and to `RunEvents`."""

    def __init__(self, host: Host, inbox: EventInbox, run_events: RunEvents) -> None:
        self.host = host
        self.inbox = inbox
        self.run_events = run_events
        self._ticks_under_dialog = 0

    def start(self) -> None:
        """Drain the routine readings every TICK_S from now on."""
        self.host.set_interval(TICK_S, self.tick, name="drain")

    def tick(self) -> None:
        """The routine drain: what arrived since the last one, else only the redraws due (an
        idle run drains nothing); and the stall watch."""
        host = self.host
        if not host.screen_stack:
            return  # the app is shutting down: nothing left to draw on
        screen = host.main_screen
        screen.adapt_to_load()
        if host.screen is not screen:
            # A dialog is open: Textual re-blends the dimmed main screen behind it on every
            # change, which costs far more than the change itself. Catch up every 2 s only.
            self._ticks_under_dialog += 1
            if self._ticks_under_dialog % DIALOG_TICK_EVERY:
                return
        else:
            self._ticks_under_dialog = 0
        if self.inbox:
            self.pump()
        else:
            self.redraw_due()
        self.run_events.check_stall()

    def pump(self, force: bool = False) -> int:
        """Drain the engine's events, route them, update text at once and plots when due
        (`force`: the plots now). Returns the events routed."""
        if not self.host.can_draw():
            return 0
        with self.host.batch_update():  # one screen update for everything this drain changes
            events = self.inbox.take(self.host.session.trainer)
            for ev in events:
                try:
                    self.route(ev)
                except Exception as e:  # noqa: BLE001 - events cross from the engine (a process perhaps): never kill the UI
                    self.host.log.error(f"cannot route {ev!r}: {e}")
            self.redraw(events, force)
        return len(events)

    def redraw_due(self) -> None:
        """Draw what is due, draining nothing."""
        if self.host.can_draw():
            with self.host.batch_update():
                self.redraw([], force=False)

    def redraw(self, events: list[Event], force: bool) -> None:
        screen = self.host.main_screen
        if events:
            screen.samples_panel.finish_batch()
        now = time.monotonic()
        # What the user did or must see (state, alerts, LR changes, checkpoints) shows at once;
        # the counters about once a second. Under a dialog the drains are seconds apart and the
        # dialog may show the run's figures too: each drain redraws the status line, so the two
        # never disagree (held back by the load, it froze while the dialog went on).
        urgent = force or any(isinstance(ev, URGENT_EVENTS) for ev in events)
        if screen.status_due(now, urgent or self.host.screen is not screen):
            self.run_events.refresh_status()
        # a rollback is drawn at once: the branch it discarded leaves the plots now
        screen.flush(now, force or any(is_rollback(ev) for ev in events))

    def route(self, ev: Event) -> None:
        screen = self.host.main_screen
        session = self.host.session
        view = session.view
        # The run's past: a resumed run's history, replayed right after its RunStarted with the
        # original timestamps, and whatever the engine handle says it replayed (a finished
        # run's files, RunStarted too; an attach's replay).
        info = view.info
        trainer = session.trainer
        replayed_until = trainer.replayed_until if trainer is not None else 0.0
        history = (info is not None and ev.time < info.time) or ev.time <= replayed_until
        screen.take(ev)  # the panels draw it
        if isinstance(ev, Step):
            self.on_step(ev, history)
            return
        if not isinstance(ev, RunStarted) and not history:
            view.tracker.observe(ev.time)
        match ev:
            case Eval():
                session.boundary_work.done("evaluate", ev.step, ev.time)
            case Sample():
                session.boundary_work.done("sample", ev.step, ev.time)
            case RunStarted():
                session.boundary_work.configure(ev.config or {}, ev.max_steps)
                self.run_events.run_started(ev, announce=not history)
            case StateChanged():
                self.run_events.state_changed(ev, announce=not history)
            case CheckpointSaved():
                self.run_events.checkpoint_saved(ev, announce=not history)
                if ev.reason == "interval":
                    session.boundary_work.done("checkpoint", ev.step, ev.time)
            case LrChanged():
                view.scale = ev.scale
                view.lr = ev.new_lr
                if not history:
                    ramp = (
                        f"\nwarmup: {fmt_lr(ev.after_warmup_lr)} from step {fmt_int(ev.warmup_ends)}"
                        if ev.warmup_ends is not None
                        else ""
                    )
                    self.host.notify(
                        f"{fmt_lr(ev.old_lr)} → {fmt_lr(ev.new_lr)} (multiplier ×{ev.scale:.3g})"
                        f"{ramp}",
                        title=f"LR changed at step {fmt_int(ev.step)}",
                        timeout=4,
                    )
            case SettingsChanged():
                # one older than the run's RunStarted (a resumed run's history) is in the
                # config it started with already
                if info is not None and ev.time >= info.time:
                    # the app's view of the run's config, which the settings screen reads
                    view.info = dataclasses.replace(info, config=config_after(info.config, ev.changes))
                    self.run_events.settings_changed(ev, announce=not history)
            case Alert():
                if is_rollback(ev):
                    view.step = ev.step  # back at its checkpoint: the status line says so now
                self.run_events.alert_raised(ev, announce=not history)
        if isinstance(ev, (StateChanged, Alert)) and not history:
            self.run_events.notice(ev)  # finished, failed, paused on a fault: a desktop notification

    def on_step(self, ev: Step, history: bool) -> None:
        session = self.host.session
        view = session.view
        if not history:
            self.run_events.stall_watch.step(ev, self.host.clock())
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
        if not history:
            view.tracker.add_step(ev.time, ev.step)
            session.last_step_seen = (ev.time, ev.step_time_s or 0.0)
            session.boundary_work.step(ev.time, ev.step)
        self.run_events.expire_alert()
