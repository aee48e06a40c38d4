"""Other runs, from inside the app.

`h` opens the runs screen; from there the app opens a run: a live one by attaching to it, one
that is over in a read-only view drawn from its files, whose steering keys say why they do
nothing. The runs screen also leads to resuming, a new run from a config, a branch and
overlays.
Reading files and connecting happen in thread workers; the UI thread only switches.

The app holds one run at a time: the run on screen is left losing nothing first (the app's own
run is checkpointed and stopped, a run in another process is detached from and goes on).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.worker import get_current_worker

from cockpit.app.key_table import COMMANDS, RUN_ACTIONS
from cockpit.figures.numbers import fmt_int
from cockpit.screens.dialogs import ConfirmScreen
from engine.contract import EngineHandle
from engine.events import RunState

if TYPE_CHECKING:
    from textual.app import App

    from cockpit.app.session import Session

    _AppBase = App[None]  # for type checkers only: at run time a plain mixin
else:
    _AppBase = object

# What any run's view offers (a new run from its config, a branch from one of its checkpoints),
# and a finished run's view instead of steering (resume).
RUN_DIR_ACTIONS = frozenset({"new_from_config", "fork_run"})
# their keys, with the title a press says why not under (no run directory yet)
RUN_DIR_KEYS = {
    key: cmd.title for cmd in COMMANDS if cmd.name in RUN_DIR_ACTIONS for key in cmd.keys.split(",")
}
RECORD_ACTIONS = frozenset({"resume_run"})
# The keys of the commands that steer a run: on a finished run's view they say why they do nothing.
STEERING_KEYS = frozenset(
    key
    for cmd in COMMANDS
    if cmd.name in RUN_ACTIONS and cmd.name != "rollback"  # r resumes there
    for key in cmd.keys.split(",")
)


def open_engine(run_dir: Path) -> EngineHandle:
    """The engine handle of the run in `run_dir`: attached to over its control socket while an
    engine holds it, else read back from its files. Raises with a one-line message."""
    from engine.rundir import engine_holds

    if engine_holds(run_dir):
        from engine.control import RemoteEngine

        return RemoteEngine(run_dir)
    from engine.rundir import RecordedRun

    return RecordedRun(run_dir)


def checkpoints_of(run_dir: Path) -> list[str]:
    """The run's checkpoint names, newest step first (ckpt-STEP.pt and sharded ckpt-STEP.dcp)."""
    from engine.checkpoint import list_checkpoints

    return [path.name for _, path in reversed(list_checkpoints(run_dir))]


class RunOpening(_AppBase):
    """The runs screen and what it leads to; a finished run's view and its keys."""

    session: Session  # the app's one record of the run on screen and the session

    # what the run on screen is ----------------------------------------------------------------
    @property
    def viewing_record(self) -> bool:
        """The run on screen is over and drawn from its files: nothing runs to steer."""
        trainer = self.session.trainer
        return trainer is not None and trainer.recorded

    @property
    def current_run_dir(self) -> str | None:
        info, trainer = self.session.view.info, self.session.trainer
        run_dir = (info.run_dir if info is not None else None) or (
            trainer.run_dir if trainer is not None else None
        )
        return str(run_dir) if run_dir else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        own = action in ("read_only_note", "run_over_note") or action in RECORD_ACTIONS
        if (own or action in RUN_DIR_ACTIONS) and self.screen is not self.main_screen:
            return False
        return super().check_action(action, parameters)

    def offered(self, action: str) -> bool | None:
        if action == "read_only_note":
            return self.read_only and not self.viewing_record
        if action in ("run_over_note", *RECORD_ACTIONS):
            return self.viewing_record
        if action in RUN_DIR_ACTIONS:
            return True if self.current_run_dir else None
        if self.viewing_record and action in RUN_ACTIONS:
            return False  # hidden, as in a read-only viewer: a press says why (on_key)
        return super().offered(action)

    def on_key(self, event: Any) -> None:
        if self.viewing_record:  # r resumes there; the other steering keys say why not
            if self.screen is self.main_screen and event.key in STEERING_KEYS:
                self.action_run_over_note()
        else:  # a read-only viewer, a run that ended: the key says why it does nothing
            self.refuse_steering_key(event.key)
        if event.key in RUN_DIR_KEYS and self.screen is self.main_screen and not self.current_run_dir:
            self.say_no_run_dir(RUN_DIR_KEYS[event.key])

    def say_no_run_dir(self, title: str) -> None:
        """n or f with no run directory to take a config or a checkpoint from: why, in one line
        (the keys are shown disabled, and a press did nothing)."""
        if self.session.state == RunState.STARTING:
            why = (
                "the run is still starting (preparing its data, building its model): its "
                "directory is made when it trains; n and f work then"
            )
        else:
            why = "the run on screen has no directory (it wrote nothing); h lists the runs, p starts a preset"
        self.notify(why, title=title, severity="warning", timeout=6)

    def action_run_over_note(self) -> None:
        name = os.path.basename(self.current_run_dir or "") or self.session.preset
        self.notify(
            f"{name} is {self.session.state}: this view is drawn from its files and nothing runs to "
            "steer. r resumes it, n starts a new run from its config, f branches it from a "
            "checkpoint, h lists the runs",
            title="Run is over",
            timeout=8,
        )

    # the runs screen ---------------------------------------------------------------------------
    def action_runs(self) -> None:
        """`h`: every run under the runs directory; what is picked there comes back here."""
        from cockpit.screens.runs_screen import RunsScreen

        overlaid = [o.key for o in self.main_screen.loss_panel.overlays]
        self.push_screen(
            RunsScreen(Path(self.runs_root), current=self.current_run_dir, selected=overlaid),
            self._runs_chosen,
        )

    def _runs_chosen(self, choice: Any) -> None:
        if choice is None:
            return
        dirs = [Path(d) for d in choice.run_dirs]
        if not dirs:
            return
        match choice.action:
            case "open":
                self.open_run(dirs[0])
            case "overlay":
                self.overlay_runs(dirs)
            case "resume":
                self.resume_run(dirs[0])
            case "new":
                self.new_from_config(dirs[0])
            case "fork":
                self.fork_run(dirs[0], list(choice.overrides))

    # opening a run -----------------------------------------------------------------------------
    def open_run(self, run_dir: Path) -> None:
        """Show the run in `run_dir` instead of the one on screen (attached or read back)."""
        if self._is_current(run_dir):
            self.notify(f"{run_dir.name} is the run on screen", timeout=3)
            return
        self._busy(f"opening {run_dir.name}...")
        self._open_in_worker(run_dir)

    @work(thread=True, exit_on_error=False, group="open-run", exclusive=True)
    def _open_in_worker(self, run_dir: Path) -> None:
        try:
            engine = open_engine(run_dir)
        except Exception as e:  # noqa: BLE001 - one line, whatever went wrong
            self.call_from_thread(self._cannot, f"Cannot open {run_dir.name}", str(e))
            return
        if get_current_worker().is_cancelled:
            engine.close()
            return
        self.call_from_thread(self._leave_for, run_dir.name, engine, "opening another run")

    def _leave_for(self, label: str, engine: EngineHandle, reason: str, asked: bool = False) -> None:
        """Switch to `engine` once the user agrees to leave the run on screen (`asked`: the
        dialog that led here said what leaving does, and enter was the yes)."""
        self._not_busy()
        question = None if asked else self._leave_question(label)

        def switch() -> None:
            self._drop_overlay(engine.run_dir)  # now it is the run itself
            self.switch_to(label, lambda: engine, reason=reason)

        if question is None:
            switch()
            return

        def answered(yes: bool) -> None:
            if yes:
                switch()
            else:
                engine.close()

        self.push_screen(
            ConfirmScreen("Open run", question, yes="Open", no="Cancel", purpose="switch"),
            answered,
        )

    def _leave_question(self, label: str) -> str | None:
        """What leaving the run on screen does, as a question; None when nothing is lost."""
        note = self.leaving_note()
        return f"Open {label}? {note}" if note else None

    def leaving_note(self) -> str:
        """What leaving the run on screen for another does to it, in a sentence; "" when
        nothing is lost (no run trains here)."""
        if not self.engine_running or self.session.trainer is None:
            return ""
        here = f"{self.session.preset} (step {fmt_int(self.session.view.step)})"
        if self.attached:
            return f"This cockpit detaches from {here}: that run goes on."
        if self.session.state in RunState.ENDED:
            return ""
        return (
            f"{here} is saved (a checkpoint) and stopped first; resume it later from the runs "
            "screen (h)."
        )

    def _busy(self, note: str) -> None:
        """Say what a worker is reading or building until `_not_busy` (unless replaced)."""
        self.session.busy_note = note
        self.session.status_note = note
        self.refresh_status()

    def _not_busy(self) -> None:
        """The worker is done: its note goes, but not a note said since (finished, quitting)."""
        if self.session.status_note == self.session.busy_note:
            self.session.status_note = ""
        self.session.busy_note = None
        self.refresh_status()

    def _is_current(self, run_dir: Path) -> bool:
        current = self.current_run_dir
        return current is not None and os.path.realpath(current) == os.path.realpath(run_dir)

    def _cannot(self, title: str, message: str) -> None:
        self._not_busy()
        self.notify(message, title=title, severity="error", timeout=10)
