"""Switching runs: the preset menu (`p`) and `switch_to`.

Whatever replaces the run on screen (a preset from the menu, a run opened, resumed or forked from
the runs screen) goes through `switch_to`: the run on screen is left losing nothing (the app's own
run is checkpointed and stopped at its next step boundary, without blocking; a run in another
process is detached from and goes on), then the next one starts. Picking a preset first checks it
against this machine off the UI thread (the memory plan builds the model on torch's meta device).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual import work
from textual.worker import get_current_worker

from cockpit.app import stop_wait as stop_wait_module
from cockpit.app.preset_switch import preset_menu_rows, switch_question
from cockpit.screens.dialogs import ConfirmScreen, PresetRow, PresetScreen
from engine.contract import EngineHandle
from engine.events import RunState

if TYPE_CHECKING:
    from textual.app import App

    from cockpit.app.session import Session

    _AppBase = App[None]  # for type checkers only: at run time a plain mixin
else:
    _AppBase = object

class Switching(_AppBase):
    """The preset menu and switching the run on screen for another."""

    session: Session  # the app's one record of the run on screen and the session

    def preset_rows(self) -> list[PresetRow]:
        rows, error = preset_menu_rows(self.preset_dirs, self.data_available, self.session.preset)
        if error:
            self.notify(error, title="Cannot list presets", severity="error")
        return rows

    def leaving_series_note(self) -> str:
        """One line for a dialog whose yes ends what the app is doing beyond the run on screen
        (`cockpit ablate`'s series); "" for the plain app."""
        return ""

    def action_presets(self) -> None:
        if self.attached:
            # a run started here would die with this viewer: runs start with `cockpit start`
            self.notify(
                "this cockpit is a viewer of a run in another process: to train another "
                "preset, stop that run (q, then s) and `cockpit start --preset NAME`",
                title="Presets",
                severity="warning",
                timeout=8,
            )
            return
        self.push_screen(PresetScreen(self.preset_rows()), self._preset_chosen)

    def _preset_chosen(self, name: str | None) -> None:
        """A preset was picked: check it against this machine (off the UI thread: the memory
        plan builds the model on torch's meta device), then ask."""
        if not name:
            return
        if self.fit_warning is None:
            self._confirm_switch(name, "")
            return
        info = self.session.view.info
        known_peak = (info.device, info.peak_flops) if info is not None and info.peak_flops else None
        self.session.check_note = f"checking {name} against this machine..."
        self.session.status_note = self.session.check_note
        self.refresh_status()
        self._check_preset(name, known_peak)

    @work(thread=True, exit_on_error=False, group="preset-check", exclusive=True)
    def _check_preset(self, name: str, known_peak: tuple[str, float] | None) -> None:
        try:
            warning = self.fit_warning(name, known_peak) if self.fit_warning else ""
        except Exception as e:  # noqa: BLE001 - a failed estimate must not block the switch
            warning = f"could not check {name} against this machine: {e}"
        if not get_current_worker().is_cancelled:  # a later pick replaced this one
            self.call_from_thread(self._confirm_switch, name, warning)

    def _confirm_switch(self, name: str, fit_warning: str) -> None:
        if self.session.check_note and self.session.status_note == self.session.check_note:
            self.session.status_note = ""
            self.refresh_status()
        if self.session.quitting:
            return  # the user quit while it was checked
        row = {r.name: r for r in self.preset_rows()}.get(name)
        msg = switch_question(self.session.preset, name, self.engine_running, row, fit_warning)
        if self.leaving_series_note():
            msg = f"{msg}\n\n{self.leaving_series_note()}"
        self.push_screen(
            ConfirmScreen("Switch preset", msg, yes="Switch", no="Cancel", purpose="switch"),
            lambda yes: self.switch_preset(name) if yes else None,
        )

    def switch_preset(self, name: str) -> None:
        """Checkpoint and stop the current run (without blocking), then start `name`."""
        self.switch_to(name)

    def switch_to(
        self,
        label: str,
        make: Callable[[], EngineHandle] | None = None,
        reason: str = "switching preset",
    ) -> None:
        """Leave the run on screen losing nothing, then start or open another (`make()` builds
        its engine handle; by default the preset `label`). The app's own run is checkpointed and
        stopped at its next step boundary (without blocking); a run in another process is
        detached from: it goes on."""
        if not self.engine_running:
            self._start_run(label, make)
            return
        self.session.pending_preset, self.session.pending_make = label, make
        self.session.switch_started = self.clock()
        if self.attached:
            self.session.detaching = True  # its worker returns "detached"; _engine_finished goes on
            if self.session.engine_worker is not None:
                self.session.engine_worker.cancel()
            return
        keep = self.session.state not in RunState.ENDED
        self._command("stop", lambda run: run.stop(checkpoint=keep, reason=reason))
        # Like quitting, no time limit: the next step boundary can be minutes away.
        self._update_switch_note()
        self.session.switch_timer = self.set_interval(
            stop_wait_module.NOTE_REFRESH_S, self._update_switch_note
        )

    def _switch_note(self) -> str:
        return f"switching to {self.session.pending_preset}: {self._stop_wait(self.session.switch_started)}"

    def _update_switch_note(self) -> None:
        if self.session.pending_preset is not None and not self.session.quitting:
            self.session.status_note = self._switch_note()
            self.refresh_status()
