"""Leaving a run that goes on without this app: the `Leaving` mixin of `CockpitApp`.

An app attached to a run in another process (its engine handle `outlives_viewer`) asks on `q`:
detach (the run goes on), stop the run, or cancel; a read-only viewer may only detach. What
the app does to leave its own run (checkpoint, stop, exit) stays in cockpit/app/cockpit_app.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cockpit.app.stop_wait import leave_question
from cockpit.screens.dialogs import Choice, ChoiceScreen

if TYPE_CHECKING:
    from textual.app import App

    _AppBase = App[None]  # for type checkers only: at run time a plain mixin
else:
    _AppBase = object


class Leaving(_AppBase):
    """Whether the run outlives this app, and how the app leaves it."""

    # set by CockpitApp.__init__
    trainer: Any
    preset: str
    engine_worker: Any
    _detaching: bool
    _quitting: bool
    _status_note: str

    @property
    def attached(self) -> bool:
        """The run outlives this app (it was attached to over its socket): leaving detaches."""
        return self.trainer is not None and self.trainer.outlives_viewer

    @property
    def read_only(self) -> bool:
        """This viewer only watches: the run refuses its commands."""
        return self.trainer is not None and self.trainer.read_only

    @property
    def detached(self) -> bool:
        """The app left a run that goes on (attach again to come back)."""
        return self._detaching

    def _ask_leave(self) -> None:
        """An attached viewer leaves: detach (the run goes on), stop the run, or cancel."""
        run_dir = str(self.trainer.run_dir or "") if self.trainer is not None else ""
        choices = [Choice("d", "Detach", "detach", "primary")]
        if not self.read_only:
            choices.append(Choice("s", "Stop the run", "stop", "error"))
        choices.append(Choice("n", "Cancel", ""))
        msg = leave_question(self.preset, run_dir, self.read_only, self.preparing_corpus)
        self.push_screen(ChoiceScreen("Leave", msg, choices, purpose="quit"), self._leave_answer)

    def _leave_answer(self, choice: str | None) -> None:
        if choice == "detach":
            self.detach()
        elif choice == "stop":
            self.quit_saving()  # as in the app's own run: checkpoint, stop, then exit

    def detach(self) -> None:
        """Leave the run as it is and exit: the viewer's connection closes, the run goes on."""
        if self._detaching:
            return
        self._detaching = True
        self._quitting = True
        self._status_note = "detaching: the run goes on"
        self.refresh_status()
        if self.engine_worker is not None and not self.engine_worker.is_finished:
            self.engine_worker.cancel()  # run() sees should_stop and returns "detached"
        else:
            self.exit()
