"""Opening another run in the app: a live one by attaching to it, one that is over in a
read-only view drawn from its files.

Connecting and reading happen in thread workers; the UI thread only switches. The run on screen
is left losing nothing first (see `Switching.switch_to`).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from textual.worker import get_current_worker

from cockpit.app.comparing import Comparing
from cockpit.app.host import Host
from cockpit.app.switching import Switching
from cockpit.figures.numbers import fmt_int
from cockpit.screens.away_dialog import AwayScreen, away_lines
from cockpit.screens.dialogs import ConfirmScreen
from engine.contract import EngineHandle
from engine.events import RunState
from engine.rundir import AWAY_MIN_S


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


class RunOpening:
    """Opens a run in place of the one on screen, asking first when leaving loses something."""

    def __init__(self, host: Host, switching: Switching, comparing: Comparing) -> None:
        self.host = host
        self.switching = switching
        self.comparing = comparing
        # a run opened by a user back from a gap this long since they last detached from it
        # shows the digest of what it did meanwhile
        self.away_min_s = AWAY_MIN_S

    def open_run(self, run_dir: Path) -> None:
        """Show the run in `run_dir` instead of the one on screen (attached or read back)."""
        session = self.host.session
        if session.is_current(run_dir):
            self.host.notify(f"{run_dir.name} is the run on screen", timeout=3)
            return
        self.busy(f"opening {run_dir.name}...")
        self.host.run_worker(
            partial(self.open_in_worker, run_dir),
            thread=True, group="open-run", exclusive=True, exit_on_error=False,
        )  # fmt: skip

    def open_in_worker(self, run_dir: Path) -> None:
        """On a worker thread: attach or read back, then switch on the UI thread."""
        try:
            engine = open_engine(run_dir)
        except Exception as e:  # noqa: BLE001 - on a worker thread: whatever went wrong, one line
            self.host.call_from_thread(self.cannot, f"Cannot open {run_dir.name}", str(e))
            return
        away = away_lines(run_dir, self.away_min_s)
        if get_current_worker().is_cancelled:
            engine.close()
            return
        self.host.call_from_thread(
            self.leave_for, run_dir.name, engine, "opening another run", False, away
        )

    def leave_for(
        self,
        label: str,
        engine: EngineHandle,
        reason: str,
        asked: bool = False,
        away: list[str] | None = None,
    ) -> None:
        """Switch to `engine` once the user agrees to leave the run on screen (`asked`: the
        dialog that led here said what leaving does, and enter was the yes); `away`: the
        digest shown over it once it is on screen."""
        self.not_busy()
        question = None if asked else self.leave_question(label)

        def on_screen() -> EngineHandle:
            if away:
                self.host.push_screen(AwayScreen(away))  # over the run, once it is on screen
            return engine

        def switch() -> None:
            self.comparing.drop_overlay(engine.run_dir)  # now it is the run itself
            self.switching.switch_to(label, on_screen, reason=reason)

        if question is None:
            switch()
            return

        def answered(yes: bool) -> None:
            if yes:
                switch()
            else:
                engine.close()

        self.host.push_screen(
            ConfirmScreen("Open run", question, yes="Open", no="Cancel", purpose="switch"),
            answered,
        )

    def leave_question(self, label: str) -> str | None:
        """What leaving the run on screen does, as a question; None when nothing is lost."""
        note = self.leaving_note()
        return f"Open {label}? {note}" if note else None

    def leaving_note(self) -> str:
        """What leaving the run on screen for another does to it, in a sentence; "" when
        nothing is lost (no run trains here)."""
        session = self.host.session
        if not session.engine_running or session.trainer is None:
            return ""
        here = f"{session.preset} (step {fmt_int(session.view.step)})"
        if session.attached:
            return f"This cockpit detaches from {here}: that run goes on."
        if session.state in RunState.ENDED:
            return ""
        return (
            f"{here} is saved (a checkpoint) and stopped first; resume it later from the runs "
            "screen (h)."
        )

    def busy(self, note: str) -> None:
        """Say what a worker is reading or building until `not_busy` (unless replaced)."""
        self.host.session.busy(note)
        self.host.refresh_status()

    def not_busy(self) -> None:
        self.host.session.not_busy()
        self.host.refresh_status()

    def cannot(self, title: str, message: str) -> None:
        self.not_busy()
        self.host.notify(message, title=title, severity="error", timeout=10)
