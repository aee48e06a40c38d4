"""Leaving a run that goes on without this app.

An app attached to a run in another process (its engine handle `outlives_viewer`) asks on `q`:
detach (the run goes on), stop the run, or cancel; a read-only viewer may only detach.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cockpit.app.stop_wait import leave_question
from cockpit.screens.dialogs import Choice, ChoiceScreen

if TYPE_CHECKING:
    from textual.app import App

    from cockpit.app.session import Session

    _AppBase = App[None]  # for type checkers only: at run time a plain mixin
else:
    _AppBase = object


class Leaving(_AppBase):
    """Whether the run outlives this app, and how the app leaves it."""

    session: Session  # the app's one record of the run on screen and the session

    @property
    def attached(self) -> bool:
        """The run outlives this app (it was attached to over its socket): leaving detaches."""
        trainer = self.session.trainer
        return trainer is not None and trainer.outlives_viewer

    @property
    def read_only(self) -> bool:
        """This viewer only watches: the run refuses its commands."""
        trainer = self.session.trainer
        return trainer is not None and trainer.read_only

    @property
    def detached(self) -> bool:
        """The app left a run that goes on (attach again to come back)."""
        return self.session.detaching

    def _ask_leave(self) -> None:
        """An attached viewer leaves: detach (the run goes on), stop the run, or cancel."""
        trainer = self.session.trainer
        run_dir = str(trainer.run_dir or "") if trainer is not None else ""
        choices = [Choice("d", "Detach", "detach", "primary")]
        if not self.read_only:
            choices.append(Choice("s", "Stop the run", "stop", "error"))
        choices.append(Choice("n", "Cancel", ""))
        preparing = self.main_screen.preparing_corpus
        msg = leave_question(self.session.preset, run_dir, self.read_only, preparing)
        self.push_screen(ChoiceScreen("Leave", msg, choices, purpose="quit"), self._leave_answer)

    def _leave_answer(self, choice: str | None) -> None:
        if choice == "detach":
            self.detach()
        elif choice == "stop":
            self.quit_saving()  # as in the app's own run: checkpoint, stop, then exit

    def detach(self) -> None:
        """Leave the run as it is and exit: the viewer's connection closes, the run goes on."""
        if self.session.detaching:
            return
        self.session.detaching = True
        self.session.quitting = True
        self.session.status_note = "detaching: the run goes on"
        self.refresh_status()
        worker = self.session.engine_worker
        if worker is not None and not worker.is_finished:
            worker.cancel()  # run() sees should_stop and returns "detached"
        else:
            self.exit()
