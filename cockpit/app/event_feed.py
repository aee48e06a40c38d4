"""Draining the engine's events and sending each where it shows.

The events come through the `EventInbox` (see event_wake). The panels take the readings at once;
what concerns the run as a whole goes to `RunEvents`. The run's past is drawn, never announced
again (no toast, no notice) nor counted in the current session's speed.
"""

from __future__ import annotations

import dataclasses
import math
import time

from cockpit.app.event_wake import EventInbox
from cockpit.app.host import Host
from cockpit.app.main_screen import is_rollback
from cockpit.app.run_events import RunEvents
from cockpit.figures.live_decisions import config_after
from cockpit.figures.numbers import fmt_int, fmt_lr
from engine.events import (
    Alert,
    CheckpointSaved,
    Eval,
    Event,
    LrChanged,
    RunStarted,
    Sample,
    SettingsChanged,
    StateChanged,
    Step,
)

URGENT_EVENTS = (  # drawn at once
    RunStarted, StateChanged, Alert, LrChanged, CheckpointSaved, SettingsChanged,
)  # fmt: skip


class EventFeed:
    """Routes the run's events into the main screen's panels and to `RunEvents`."""

    def __init__(self, host: Host, inbox: EventInbox, run_events: RunEvents) -> None:
        self.host = host
        self.inbox = inbox
        self.run_events = run_events

    def pump(self, force: bool = False) -> int:
        """Drain the engine's events, route them, update text at once and plots when due
        (`force`: the plots now). Returns the events routed."""
        events = self.inbox.take(self.host.session.trainer)
        for ev in events:
            try:
                self.route(ev)
            except Exception as e:  # noqa: BLE001 - events cross from the engine (a process perhaps): never kill the UI
                self.host.log.error(f"cannot route {ev!r}: {e}")
        self.redraw(events, force)
        return len(events)

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
