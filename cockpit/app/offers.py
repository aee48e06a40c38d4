"""Which commands the footer, help and palette offer now, and why a key pressed in vain does nothing.

A key that would do nothing (the run ended, a read-only viewer, a finished run's view) is not
offered; pressed anyway, it says why in one line.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable

from cockpit.app.host import Host
from cockpit.app.key_table import COMMANDS, MAIN_ACTIONS, RUN_ACTIONS, Command
from engine.events import RunState

# The steering keys (the commands that need a running engine), by key: pressed while they cannot
# act (a read-only viewer, a run that ended), each says why in one line instead of nothing.
STEERING_BY_KEY: dict[str, Command] = {
    key: cmd for cmd in COMMANDS if cmd.needs_engine for key in cmd.keys.split(",")
}
# What any run's view offers (a new run from its config, a branch from one of its checkpoints),
# and a finished run's view instead of steering (resume).
RUN_DIR_ACTIONS = frozenset({"new_from_config", "fork_run"})
# their keys, with the title a press says why not under (no run directory yet)
RUN_DIR_KEYS = {
    key: cmd.title for cmd in COMMANDS if cmd.name in RUN_DIR_ACTIONS for key in cmd.keys.split(",")
}
RECORD_ACTIONS = frozenset({"resume_run"})
NOTE_ACTIONS = frozenset({"read_only_note", "run_over_note"})
# The keys of the commands that steer a run: on a finished run's view they say why they do nothing.
STEERING_KEYS = frozenset(
    key
    for cmd in COMMANDS
    if cmd.name in RUN_ACTIONS and cmd.name != "rollback"  # r resumes there
    for key in cmd.keys.split(",")
)


class Offers:
    """What the app's keys offer in the run's state, and the one-line refusals."""

    def __init__(self, host: Host, pause_target_state: Callable[[], str], starts_runs: bool) -> None:
        self.host = host
        self.pause_target_state = pause_target_state  # the controller's: pause or resume shown
        self.starts_runs = starts_runs  # this app resumes and forks runs (not a viewer)

    def on_main_screen(self) -> bool:
        return self.host.screen is self.host.main_screen

    def check_action(self, action: str) -> bool | None:
        """Textual's check_action: on a dialog only its own keys; else what is `offered`."""
        main_only = action in MAIN_ACTIONS or action in NOTE_ACTIONS or action in RECORD_ACTIONS
        if (main_only or action in RUN_DIR_ACTIONS) and not self.on_main_screen():
            return False  # a dialog is open: its own keys only
        return self.offered(action)

    def offered(self, action: str) -> bool | None:
        """Whether the footer, the help and the palette offer `action` in the run's state (the
        open screen aside); None: shown disabled."""
        session = self.host.session
        if action == "read_only_note":
            return session.read_only and not session.viewing_record
        if action in ("run_over_note", *RECORD_ACTIONS):
            return session.viewing_record
        if action in RUN_DIR_ACTIONS:
            return True if session.run_dir else None
        if session.viewing_record and action in RUN_ACTIONS:
            return False  # hidden, as in a read-only viewer: a press says why (key_pressed)
        if action in ("pause", "resume"):
            paused = self.pause_target_state() == RunState.PAUSED
            if (action == "resume") != paused:
                return False  # the other one of the pair is shown
        if action in RUN_ACTIONS and session.read_only:
            return False  # a read-only viewer: hidden (the footer says read-only instead)
        if action in RUN_ACTIONS and (not session.engine_running or session.state in RunState.ENDED):
            return False  # the run ended or its engine is gone: nothing to steer
        if action == "presets" and session.attached:
            return False  # runs start with `cockpit start`, not in a viewer (presets says why)
        return True

    def key_pressed(self, key: str) -> None:
        """A key on the app: a steering key that cannot act, or n/f with no run directory, says
        why it does nothing."""
        session = self.host.session
        if session.viewing_record:  # r resumes there; the other steering keys say why not
            if self.on_main_screen() and key in STEERING_KEYS:
                self.run_over_note()
        else:  # a read-only viewer, a run that ended: the key says why it does nothing
            self.refuse_steering_key(key)
        if key in RUN_DIR_KEYS and self.on_main_screen() and not session.run_dir:
            self.say_no_run_dir(RUN_DIR_KEYS[key])

    def steering_refusal(self) -> str | None:
        """Why the steering keys cannot act now, as one line (None: they can)."""
        session = self.host.session
        state = session.state
        if state in RunState.ENDED:
            if session.attached:
                ckpt = session.view.last_checkpoint
                run_dir = shlex.quote(session.run_dir or "RUN_DIR")
                hint = f"cockpit start --resume {run_dir} trains it on" if ckpt else "q quits"
            elif self.starts_runs:
                hint = "h lists the runs (resume or fork one), p starts another preset"
            else:
                hint = "q quits"
            return f"the run {state}: nothing trains to steer; {hint}"  # stopped, finished, failed
        if session.read_only:
            return "this viewer only watches: its keys cannot change the run; attach without --read-only to steer it"
        if not session.engine_running:
            return "no run in progress; p picks a preset to train"
        return None

    def refuse_steering_key(self, key: str) -> bool:
        """A steering key pressed on the main screen while it cannot act: one toast saying why
        (the same one not again while it is on screen). Returns whether it said so."""
        session = self.host.session
        cmd = STEERING_BY_KEY.get(key)
        if cmd is None or not self.on_main_screen() or self.offered(cmd.name) is not False:
            return False
        why = self.steering_refusal()
        if why is None:
            return False
        title = cmd.title or cmd.footer
        now = time.monotonic()
        if session.refusal_said == (title, why) and now < session.refusal_until:
            return True
        session.refusal_said, session.refusal_until = (title, why), now + 6
        self.host.notify(why, title=title, severity="warning", timeout=6)
        return True

    def read_only_note(self) -> None:
        self.host.notify(
            "this viewer only watches: its keys cannot change the run; attach without "
            "--read-only to steer it",
            title="Read-only",
            timeout=6,
        )

    def say_no_run_dir(self, title: str) -> None:
        """n or f with no run directory to take a config or a checkpoint from: why, in one line
        (the keys are shown disabled, and a press did nothing)."""
        if self.host.session.state == RunState.STARTING:
            why = (
                "the run is still starting (preparing its data, building its model): its "
                "directory is made when it trains; n and f work then"
            )
        else:
            why = "the run on screen has no directory (it wrote nothing); h lists the runs, p starts a preset"
        self.host.notify(why, title=title, severity="warning", timeout=6)

    def run_over_note(self) -> None:
        session = self.host.session
        name = os.path.basename(session.run_dir or "") or session.preset
        self.host.notify(
            f"{name} is {session.state}: this view is drawn from its files and nothing runs to "
            "steer. r resumes it, n starts a new run from its config, f branches it from a "
            "checkpoint, h lists the runs",
            title="Run is over",
            timeout=8,
        )
