"""What the run as a whole said (it started, changed state, saved, raised an alert), and the
alert and status lines that show it.

The texts with rules of their own are plain functions elsewhere (`anomaly_banner`,
`status_segments`).
"""

from __future__ import annotations

import dataclasses

from cockpit.app.host import Host
from cockpit.app.notifications import Notifier, StallWatch, notice_for
from cockpit.app.quitting import Quitting
from cockpit.app.run_commands import RunCommands
from cockpit.app.run_view import status_segments
from cockpit.app.switching import Switching
from cockpit.figures.anomaly import ANOMALY_CODES, Anomaly, anomaly_banner, with_keys
from cockpit.figures.numbers import fmt_int, fmt_loss
from cockpit.figures.progress import scaled_from, size_at
from engine.config import describe
from engine.events import (
    Alert,
    CheckpointSaved,
    Event,
    RunStarted,
    RunState,
    SettingsChanged,
    StateChanged,
)

WARNING_TTL_STEPS = 200  # a warning alert stays this many steps
NOTICE_MAX_AGE_S = 30.0  # older events (an attach's replay of the run's present) notify nobody


def _drawn_only(*_args: object, **_kwargs: object) -> None:
    """In place of `notify` for what is from the run's past: drawn, not toasted."""


class RunEvents:
    """The handlers of the run-wide events, the alert and the status line."""

    def __init__(
        self,
        host: Host,
        commands: RunCommands,
        quitting: Quitting,
        switching: Switching,
        notifier: Notifier,
        stall_watch: StallWatch,
    ) -> None:
        self.host = host
        self.commands = commands
        self.quitting = quitting
        self.switching = switching
        self.notifier = notifier  # desktop notifications and the bell
        self.stall_watch = stall_watch

    def run_started(self, ev: RunStarted, announce: bool = True) -> None:
        """`announce=False` for a RunStarted from the run's past (a finished run's files, an
        attach's replay): its resume is old news, drawn, not toasted."""
        view = self.host.session.view
        view.info = ev
        view.max_steps = ev.max_steps
        view.step = ev.start_step
        view.tracker.start(ev.time)  # this session's rate; the training time is the clock's
        view.tracker.tokens_schedule = ev.tokens_schedule  # steps that grow: the ETA weighs them
        self.host.retitle(ev)  # the status line's first words and the app's subtitle
        if self.host.session.status_note.startswith(("starting", "resuming")):
            self.host.session.status_note = ""
        if ev.resumed_from:
            # the checkpoint it resumed from is one to roll back to (replayed saves follow)
            view.last_checkpoint = (ev.start_step, ev.resumed_from, "resume")
            view.checkpoint_config = ev.config  # what a rollback to it puts back
            # what the resume changed, set aside or kept (also in metrics.jsonl and headless)
            notes = ev.notes
            if not announce:
                return
            self.host.notify(
                "\n".join((f"from {ev.resumed_from}", *(f"• {n}" for n in notes))),
                title=f"Resumed at step {fmt_int(ev.start_step)}",
                timeout=6 + 4 * len(notes),
            )

    def settings_changed(self, ev: SettingsChanged, announce: bool = True) -> None:
        """A `set` acknowledged (or replayed): the run's length, its tokens a step and its
        schedule ahead are the new ones; `announce=False` for one from the run's past."""
        view, screen = self.host.session.view, self.host.main_screen
        if ev.max_steps:
            view.max_steps = ev.max_steps  # the status line's step count, bar and ETA
        tokens_note = ""
        if ev.tokens_per_step and ev.tokens_per_step != screen.loss_panel.tokens_per_step:
            old = was = screen.loss_panel.tokens_per_step
            now, sizes = ev.tokens_per_step, view.tracker.tokens_schedule
            if sizes and old:  # mid-ramp the steps ahead scale, and are not the full size yet
                view.tracker.tokens_schedule = scaled_from(sizes, ev.step, old, now)
                screen.lr_panel.set_tokens_schedule(view.tracker.tokens_schedule)
                was, now = size_at(sizes, ev.step), size_at(view.tracker.tokens_schedule, ev.step)
            if old:  # shown nowhere else: the toast says it
                tokens_note = f"\n{fmt_int(now)} tokens a step (was {fmt_int(was)})"
                if now != ev.tokens_per_step:
                    tokens_note += f", {fmt_int(ev.tokens_per_step)} once the ramps end"
            screen.loss_panel.tokens_per_step = ev.tokens_per_step
            view.tracker.forget_rate()  # steps of another size: the ETA measures them afresh
        if ev.planned_lr:
            screen.lr_panel.replan(ev.planned_lr, ev.max_steps or view.max_steps, ev.step)
            if announce:  # the acknowledgement, drawn now (not at the panel's next slow redraw)
                screen.lr_panel.flush(force=True)
        if view.info is not None:  # the intervals a stop waits for
            self.host.session.boundary_work.configure(view.info.config or {}, view.max_steps)
        if announce:
            who = f" by {ev.by}" if ev.by and ev.by != "app" else ""
            how = "replayed" if ev.replayed else "changed"
            self.host.notify(
                describe({key: tuple(pair) for key, pair in ev.changes.items()}) + tokens_note,
                title=f"Settings {how} at step {fmt_int(ev.step)}{who}",
                timeout=6,
            )

    def state_changed(self, ev: StateChanged, announce: bool = True) -> None:
        """`announce=False` for a state from the run's past (a finished run's files): drawn,
        not toasted."""
        view = self.host.session.view
        previous = self.host.session.state
        view.requested = None  # space now toggles from the engine's live state
        self.set_state(ev.state)
        if ev.state == RunState.RUNNING and previous == RunState.PAUSED:
            view.tracker.forget_rate()
        if view.anomaly is not None and ev.state != RunState.SAVING:
            if ev.state == RunState.RUNNING and previous == RunState.PAUSED:
                # resumed (or rolled back): the fault is behind the run, and so is its banner
                view.anomaly = None
                if view.alert and view.alert[0] == "nan":
                    view.alert = None
            else:
                self.set_alert("nan", self.fault_banner())
        if ev.state in RunState.ENDED:
            view.checkpoint_pending = False
        if ev.state == RunState.FAILED:
            reason = ev.reason or "the run failed"
            if not view.alert or view.alert[0] != "error":
                self.set_alert("error", f"✗ FAILED at step {fmt_int(ev.step)}: {reason}")
            if not self.host.main_screen.loss_panel.has_data():
                self.host.main_screen.show_no_run(
                    "the run failed before its first step",
                    "the run failed before its first step (see above).\np: pick another preset   q: quit",
                )
        if ev.state in RunState.ENDED:
            self.host.session.status_note = ""
            if ev.state == RunState.FINISHED:
                if announce:
                    self.host.notify(f"{fmt_int(ev.step)} steps", title="Run finished")
                if not view.alert:
                    self.host.session.status_note = self._finished_note(ev.step)
            if self.host.session.quitting and not self.host.session.engine_running:
                self.host.exit()
        if self.host.session.quitting:
            self.host.session.status_note = self.quitting.note()
        elif self.host.session.pending_preset is not None:
            self.host.session.status_note = self.switching.note()

    def _finished_note(self, step: int) -> str:
        parts = [f"✓ finished at step {fmt_int(step)}"]
        best = self.host.main_screen.loss_panel.best_val
        if best is not None:
            parts.append(f"best val {fmt_loss(best)}")
        if self.host.session.view.last_checkpoint is not None:
            parts.append(f"checkpoint {self.host.session.view.last_checkpoint[1]}")
        if self.host.session.viewing_record:
            parts.append("r: train on · f: fork · h: runs · q: quit")
        else:
            parts.append("q: quit" if self.host.session.attached else "p: another preset · q: quit")
        return " · ".join(parts)

    def checkpoint_saved(self, ev: CheckpointSaved, announce: bool = True) -> None:
        view = self.host.session.view
        again = view.last_checkpoint is not None and view.last_checkpoint[:2] == (ev.step, ev.path)
        view.last_checkpoint = (ev.step, ev.path, ev.reason)
        # the settings it was saved with, which a rollback to it puts back (the events arrive in
        # the engine's order: the config now is the one in force at that save)
        view.checkpoint_config = view.info.config if view.info is not None else None
        said, view.checkpoint_said = view.checkpoint_said, False
        if ev.reason == "manual":
            view.checkpoint_pending = False
        if announce and ev.reason in ("manual", "stop"):
            # the engine's answer to a repeated c (the same file, not rewritten) is shown only
            # when its "saving..." was: otherwise a toast about that file is still on screen
            title = f"Checkpoint {'already ' if again else ''}saved at step {fmt_int(ev.step)}"
            if not again or ev.reason != "manual" or said:
                self.commands.checkpoint_toast(ev.path, title, 6, new=True)
        if view.anomaly is not None:  # the banner names the checkpoint r goes back to
            self.set_alert("nan", self.fault_banner())

    def alert_raised(self, ev: Alert, announce: bool = True) -> None:
        """`announce=False` for an alert from the run's past (a finished run's files, an
        attach's replay): drawn (the banner, the markers) but not toasted; a past warning or
        error leaves the alert line as the steps after it are drawn."""
        view = self.host.session.view
        code = ev.code
        ev = dataclasses.replace(ev, message=with_keys(ev.message))  # the engine's advice, keyed
        step = f" at step {fmt_int(ev.step)}" if ev.step else ""
        notify = self.host.notify if announce else _drawn_only
        if code in ANOMALY_CODES and ev.level in ("error", "warning"):
            # The banner names the real fault and offers what works in the state the run is in
            # (paused, rolling back, given up): it is rebuilt as that state arrives, and goes
            # once the run trains past it (a later step).
            view.anomaly = Anomaly.from_message(code, ev.message, max(view.step, ev.step))
            if ev.level == "warning":  # unattended: the engine rolls back on its own
                self.set_alert("warning", f"⚠ {view.anomaly.fault}: rolling back...")
            else:
                self.set_alert("nan", self.fault_banner())
            title = "Loss spike" if code == "spike" else "Not a number"
            notify(ev.message, title=f"{title}{step}", severity="error", timeout=10)
        elif code == "rollback" and ev.level == "info":
            fault = view.anomaly.fault if view.anomaly is not None else ""
            view.anomaly = None
            text = f"↺ {fault} → {ev.message}" if fault else f"↺ {ev.message}"
            self.set_alert("warning", text, ttl=WARNING_TTL_STEPS, at_step=ev.step)
            # the alert line's 200 steps can pass in a second on a small model: a toast stays
            notify(ev.message, title="Rolled back", timeout=6)
        elif code == "rollback":  # e.g. nothing to roll back to: a short notice, not a banner
            notify(ev.message, title="Roll back", severity="warning", timeout=5)
            if view.anomaly is not None:  # not "rolling back..." any more
                self.set_alert("nan", self.fault_banner())
        elif code == "disk" and ev.level == "info":  # what waited for room is written
            if view.alert and view.alert[0] == "error":
                view.alert = None  # the failure it named is over
            notify(ev.message, title="Disk", timeout=6)
        elif ev.level == "error":
            if code == "disk":
                view.checkpoint_pending = False  # that save failed: c may try again
            if announce:
                self.set_alert("error", f"✗ {ev.message}")
            else:  # from the past: until the run went on past it
                self.set_alert("error", f"✗ {ev.message}", WARNING_TTL_STEPS, ev.step or None)
            notify(ev.message, title="Error", severity="error", timeout=10)
        elif ev.level == "warning":
            if not view.alert or view.alert[0] not in ("error", "nan"):
                at = None if announce else ev.step or None  # one from the past: from its step
                self.set_alert("warning", f"⚠ {ev.message}{step}", WARNING_TTL_STEPS, at)
            notify(ev.message, title="Warning", severity="warning", timeout=6)
        else:
            notify(ev.message, timeout=4)

    # notifications -------------------------------------------------------------------------------
    def notice(self, ev: Event) -> None:
        """A desktop notification (and the bell, if asked for) for what deserves one now."""
        if isinstance(ev, StateChanged):
            self.stall_watch.reset(self.host.clock())  # paused, resumed, ended: the wait restarts
        if self.host.clock() - ev.time > NOTICE_MAX_AGE_S:
            return
        notice = notice_for(ev, self.host.session.preset)
        if notice is not None:
            self.notifier.notify(notice)

    def check_stall(self) -> None:
        notice = self.stall_watch.check(self.host.clock(), self.host.session.state, self.host.session.preset)
        if notice is not None:
            self.notifier.notify(notice)

    # state, alerts, status -------------------------------------------------------------------------
    def set_state(self, state: str) -> None:
        changed = state != self.host.session.state
        self.host.session.state = state
        if changed:
            self.host.refresh_offers()
        self.host.main_screen.status_line.set_state(state)

    def set_alert(
        self, level: str, message: str, ttl: int | None = None, at_step: int | None = None
    ) -> None:
        """Show `message` until replaced, or for `ttl` steps from `at_step` (default: now)."""
        start = self.host.session.view.step if at_step is None else at_step
        expires = start + ttl if ttl is not None else None
        self.host.session.view.alert = (level, message, expires)

    def fault_banner(self) -> str:
        view = self.host.session.view
        if view.anomaly is None:
            return ""
        ckpt = view.last_checkpoint
        vocab = (view.info.vocab_size or 0) if view.info is not None else 0
        losses = self.host.main_screen.loss_panel.raw.ys
        return anomaly_banner(
            view.anomaly, self.host.session.state, ckpt[1] if ckpt else None, vocab, losses
        )

    def expire_alert(self) -> None:
        view = self.host.session.view
        if view.alert and view.alert[2] is not None and view.step >= view.alert[2]:
            view.alert = None

    def refresh_status(self) -> None:
        session, screen = self.host.session, self.host.main_screen
        view, note = session.view, session.status_note
        status, alert = screen.status_line, screen.alert_line
        dropped = session.trainer.dropped_events if session.trainer is not None else 0
        loss = screen.loss_panel
        status.set_segments(
            status_segments(view, session.preset, session.state, loss.last_loss, dropped,
                            loss.clock.trained_s())  # fmt: skip
        )
        if session.quitting and note:  # the wait and how to cut it short come first
            alert.show("warning", note)
        elif view.alert:
            level, message, _ = view.alert
            alert.show("error" if level in ("error", "nan") else level, message)
        elif note:
            alert.show("info", note)
        elif self.host.main_screen.maximized is not None:
            alert.show("info", "zoomed in: esc to go back")
        else:
            alert.clear()
