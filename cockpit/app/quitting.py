"""Quitting: `q`, ctrl+c and the forced exit.

Quitting asks first; confirmed, the app's own run is checkpointed and stopped, and the app exits
once its engine has ended: there is no time limit, since the checkpoint comes at the next step
boundary, which can be minutes away; the alert line counts down to it and says how to force.
Asked again while waiting, the app exits at once (the engine is told to stop and, after the UI
has closed, given a few seconds: `start_exit_watchdog`). A run that outlives the app is left
instead (detach).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cockpit.app import stop_wait as stop_wait_module
from cockpit.app.exit_watchdog import start_exit_watchdog
from cockpit.app.session_runs import format_exit_report
from cockpit.app.stop_wait import quit_note, quit_question, stop_wait
from cockpit.screens.dialogs import ChoiceScreen, ConfirmScreen
from engine.events import RunState

if TYPE_CHECKING:
    from textual.app import App

    from cockpit.app.session import Session

    _AppBase = App[None]  # for type checkers only: at run time a plain mixin
else:
    _AppBase = object


class Quitting(_AppBase):
    """How the app ends: asked, then with the run saved; or at once when asked twice."""

    session: Session  # the app's one record of the run on screen and the session

    async def action_quit(self) -> None:
        """`q` on the main screen (and the palette's Quit): see `action_request_quit`."""
        await self.action_request_quit()

    async def action_request_quit(self) -> None:
        """Ask, then checkpoint and stop the run, then exit. Asked again while quitting: exit.

        ctrl+c / ctrl+q (priority bindings, so they work in every dialog) come here directly; a
        second ctrl+c in the quit dialog confirms it.
        """
        if self.session.quitting:
            self._force_exit()  # asked again while waiting for the checkpoint: now
            return
        screen = self.screen
        if isinstance(screen, ConfirmScreen) and screen.purpose == "quit":
            screen.dismiss(True)  # ctrl+c twice
            return
        if isinstance(screen, ChoiceScreen) and screen.purpose == "quit":
            screen.dismiss("detach")  # ctrl+c twice: the answer that loses nothing
            return
        if self.attached and self.engine_running:
            self._ask_leave()
            return
        step_s = self.session.last_step_seen[1] if self.session.last_step_seen else 0.0
        msg = quit_question(
            self.session.preset,
            self.engine_running,
            self.session.state,
            step_s,
            self.main_screen.preparing_corpus,
        )
        self.push_screen(
            ConfirmScreen("Quit", msg, yes="Quit", no="Cancel", purpose="quit", danger=True),
            self._quit_answer,
        )

    def _quit_answer(self, yes: bool) -> None:
        if yes:
            self.quit_saving()

    def quit_saving(self) -> None:
        """Quit as a confirmed `q` does: stop with a checkpoint and exit once the engine has
        ended (a second quit while it waits exits at once).

        There is no time limit: the checkpoint comes at the next step boundary, which can be
        minutes away (a GPU preset on a CPU). The alert line counts down to it and says how to
        force (`_force_exit`); the app exits when the engine's worker ends (`_engine_finished`).
        """
        if self.session.quitting:
            return
        if not self.engine_running or self.session.trainer is None:
            self.exit()
            return
        self.session.quitting = True
        self.session.quit_started = self.clock()
        # An ended run has nothing left to save; its worker is on its way out anyway. Nor has
        # one still preparing its corpus: the preparation stops at its next piece.
        keep = self.session.state not in RunState.ENDED and not self.main_screen.preparing_corpus
        self._command("stop", lambda run: run.stop(checkpoint=keep, reason="quit"))
        self._update_quit_note()
        self.session.quit_timer = self.set_interval(
            stop_wait_module.NOTE_REFRESH_S, self._update_quit_note
        )

    def _update_quit_note(self) -> None:
        if self.session.quitting and not self.session.quit_forced:
            self.session.status_note = self._quit_note()
            self.refresh_status()

    def _quit_note(self) -> str:
        return quit_note(self._stop_wait(self.session.quit_started), attached=self.attached)

    def _stop_wait(self, started: float | None) -> str:
        return stop_wait(
            self.session.state,
            self.session.last_step_seen,
            started,
            self.clock(),
            self.main_screen.preparing_corpus,
            work=self.session.boundary_work,
        )

    def _force_exit(self) -> None:
        """Exit now, without waiting for the checkpoint: the engine is told to stop
        (should_stop) and given a few seconds after the UI closed (`_arm_watchdog`)."""
        self.session.quit_forced = True
        if self.session.quit_timer is not None:
            self.session.quit_timer.stop()
            self.session.quit_timer = None
        if self.session.engine_worker is not None and not self.session.engine_worker.is_finished:
            self.session.engine_worker.cancel()
            if not self.attached:  # a viewer's run() returns at once: nothing to watch for
                self._arm_watchdog()
        self.exit()

    @property
    def quit_forced(self) -> bool:
        """The user quit without waiting for the final checkpoint."""
        return self.session.quit_forced

    def _arm_watchdog(self) -> None:
        """After a forced quit: end the process even if the engine thread never returns (see
        `start_exit_watchdog`). Never armed in headless runs (tests)."""
        thread = self.session.engine_thread
        if self.is_headless or self.session.watchdog_armed or thread is None or not thread.is_alive():
            return
        self.session.watchdog_armed = True
        start_exit_watchdog(
            thread,
            ui_running=lambda: self._running,
            report=lambda: format_exit_report(self.exit_summary(), forced=True),
        )
