"""Quitting and leaving: `q`, ctrl+c, the forced exit, and detaching from a run in another process.

Confirmed, the app's own run is checkpointed and stopped and the app exits once its engine has
ended (no time limit: the alert line counts down to the next step boundary). Asked again while
waiting, the app exits at once (`start_exit_watchdog` ends a stuck engine thread). A run that
outlives the app is left instead: detach, stop it, or cancel.
"""

from __future__ import annotations

from cockpit.app import stop_wait as stop_wait_module
from cockpit.app.exit_watchdog import start_exit_watchdog
from cockpit.app.host import Host
from cockpit.app.run_commands import RunCommands
from cockpit.app.session_runs import format_exit_report
from cockpit.app.stop_wait import leave_question, quit_note, quit_question, stop_wait
from cockpit.screens.dialogs import Choice, ChoiceScreen, ConfirmScreen
from engine.events import RunState


class Quitting:
    """How the app ends: asked, then with the run saved; at once when asked twice; or left."""

    def __init__(self, host: Host, commands: RunCommands) -> None:
        self.host = host
        self.commands = commands

    def request_quit(self) -> None:
        """Ask, then checkpoint and stop the run, then exit. Asked again while quitting: exit.
        A second ctrl+c in the quit dialog confirms it."""
        session = self.host.session
        if session.quitting:
            self.force_exit()  # asked again while waiting for the checkpoint: now
            return
        screen = self.host.screen
        if isinstance(screen, ConfirmScreen) and screen.purpose == "quit":
            screen.dismiss(True)  # ctrl+c twice
            return
        if isinstance(screen, ChoiceScreen) and screen.purpose == "quit":
            screen.dismiss("detach")  # ctrl+c twice: the answer that loses nothing
            return
        if session.attached and session.engine_running:
            self.ask_leave()
            return
        step_s = session.last_step_seen[1] if session.last_step_seen else 0.0
        msg = quit_question(
            session.preset,
            session.engine_running,
            session.state,
            step_s,
            self.host.main_screen.preparing_corpus,
        )
        self.host.push_screen(
            ConfirmScreen("Quit", msg, yes="Quit", no="Cancel", purpose="quit", danger=True),
            lambda yes: self.quit_saving() if yes else None,
        )

    def quit_saving(self) -> None:
        """Quit as a confirmed `q` does: stop with a checkpoint and exit once the engine has
        ended (the app's engine_finished exits); a second quit while it waits exits at once."""
        session = self.host.session
        if session.quitting:
            return
        if not session.engine_running or session.trainer is None:
            self.host.exit()
            return
        session.quitting = True
        session.quit_started = self.host.clock()
        # An ended run has nothing left to save; its worker is on its way out anyway. Nor has
        # one still preparing its corpus: the preparation stops at its next piece.
        keep = session.state not in RunState.ENDED and not self.host.main_screen.preparing_corpus
        self.commands.stop(checkpoint=keep, reason="quit")
        self.update_note()
        session.quit_timer = self.host.set_interval(stop_wait_module.NOTE_REFRESH_S, self.update_note)

    def update_note(self) -> None:
        session = self.host.session
        if session.quitting and not session.quit_forced:
            session.status_note = self.note()
            self.host.refresh_status()

    def note(self) -> str:
        """What the quit waits for, for how long, and how to cut it short."""
        wait = self.stop_wait(self.host.session.quit_started)
        return quit_note(wait, attached=self.host.session.attached)

    def stop_wait(self, started: float | None) -> str:
        """Where a stop with a checkpoint asked for at `started` stands (see `stop_wait`)."""
        session = self.host.session
        return stop_wait(
            session.state,
            session.last_step_seen,
            started,
            self.host.clock(),
            self.host.main_screen.preparing_corpus,
            work=session.boundary_work,
        )

    def force_exit(self) -> None:
        """Exit now, without waiting for the checkpoint: the engine is told to stop
        (should_stop) and given a few seconds after the UI closed (`arm_watchdog`)."""
        session = self.host.session
        session.quit_forced = True
        if session.quit_timer is not None:
            session.quit_timer.stop()
            session.quit_timer = None
        if session.engine_worker is not None and not session.engine_worker.is_finished:
            session.engine_worker.cancel()
            if not session.attached:  # a viewer's run() returns at once: nothing to watch for
                self.arm_watchdog()
        self.host.exit()

    def arm_watchdog(self) -> None:
        """After a forced quit: end the process even if the engine thread never returns (see
        `start_exit_watchdog`). Never armed in headless runs (tests)."""
        session, host = self.host.session, self.host
        thread = session.engine_thread
        if host.is_headless or session.watchdog_armed or thread is None or not thread.is_alive():
            return
        session.watchdog_armed = True
        start_exit_watchdog(
            thread,
            ui_running=lambda: host.is_running,
            report=lambda: format_exit_report(host.exit_summary(), forced=True),
        )

    # leaving a run that goes on ----------------------------------------------------------------
    def ask_leave(self) -> None:
        """An attached viewer leaves: detach (the run goes on), stop the run, or cancel."""
        session = self.host.session
        trainer = session.trainer
        run_dir = str(trainer.run_dir or "") if trainer is not None else ""
        choices = [Choice("d", "Detach", "detach", "primary")]
        if not session.read_only:
            choices.append(Choice("s", "Stop the run", "stop", "error"))
        choices.append(Choice("n", "Cancel", ""))
        preparing = self.host.main_screen.preparing_corpus
        msg = leave_question(session.preset, run_dir, session.read_only, preparing)
        self.host.push_screen(
            ChoiceScreen("Leave", msg, choices, purpose="quit"), self.leave_answer
        )

    def leave_answer(self, choice: str | None) -> None:
        if choice == "detach":
            self.detach()
        elif choice == "stop":
            self.quit_saving()  # as in the app's own run: checkpoint, stop, then exit

    def detach(self) -> None:
        """Leave the run as it is and exit: the viewer's connection closes, the run goes on."""
        session = self.host.session
        if session.detaching:
            return
        session.detaching = True
        session.quitting = True
        session.status_note = "detaching: the run goes on"
        self.host.refresh_status()
        worker = session.engine_worker
        if worker is not None and not worker.is_finished:
            worker.cancel()  # run() sees should_stop and returns "detached"
        else:
            self.host.exit()

