"""Switching runs: the preset menu (`p`) and `switch_to`.

Whatever replaces the run on screen goes through `switch_to`: the run on screen is left losing
nothing (the app's own run is checkpointed and stopped at its next step boundary, without
blocking; a run in another process is detached from), then the next one starts. A picked preset
is first checked against this machine off the UI thread.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.worker import get_current_worker

from cockpit.app import stop_wait as stop_wait_module
from cockpit.app.host import Host
from cockpit.app.preset_switch import preset_menu_rows, switch_question
from cockpit.app.quitting import Quitting
from cockpit.app.run_commands import RunCommands
from cockpit.screens.dialogs import ConfirmScreen
from cockpit.screens.preset_menu import PresetRow, PresetScreen
from engine.contract import EngineHandle
from engine.events import RunState

# fit_warning(preset, (device, peak FLOP/s) of the current run or None) -> a warning or ""
FitWarning = Callable[[str, tuple[str, float] | None], str]


class Switching:
    """The preset menu and switching the run on screen for another."""

    def __init__(
        self,
        host: Host,
        commands: RunCommands,
        quitting: Quitting,
        preset_dirs: list[str],
        data_available: Callable[[str], tuple[object, ...]],
        fit_warning: FitWarning | None,
    ) -> None:
        self.host = host
        self.commands = commands
        self.quitting = quitting
        self.preset_dirs = preset_dirs
        self.data_available = data_available
        self.fit_warning = fit_warning

    def preset_rows(self) -> list[PresetRow]:
        session = self.host.session
        rows, error = preset_menu_rows(self.preset_dirs, self.data_available, session.preset)
        if error:
            self.host.notify(error, title="Cannot list presets", severity="error")
        return rows

    def open_presets(self) -> None:
        """`p`: the preset menu (a viewer of a run in another process says why not)."""
        if self.host.session.attached:
            # a run started here would die with this viewer: runs start with `cockpit start`
            self.host.notify(
                "this cockpit is a viewer of a run in another process: to train another "
                "preset, stop that run (q, then s) and `cockpit start --preset NAME`",
                title="Presets",
                severity="warning",
                timeout=8,
            )
            return
        self.host.push_screen(PresetScreen(self.preset_rows()), self.preset_chosen)

    def preset_chosen(self, name: str | None) -> None:
        """A preset was picked: check it against this machine (off the UI thread: the memory
        plan builds the model on torch's meta device), then ask."""
        if not name:
            return
        if self.fit_warning is None:
            self.confirm_switch(name, "")
            return
        session = self.host.session
        info = session.view.info
        known_peak = (info.device, info.peak_flops) if info is not None and info.peak_flops else None
        session.check_note = f"checking {name} against this machine..."
        session.status_note = session.check_note
        self.host.refresh_status()
        self.host.run_worker(
            partial(self.check_preset, self.fit_warning, name, known_peak),
            thread=True, group="preset-check", exclusive=True, exit_on_error=False,
        )  # fmt: skip

    def check_preset(self, fit_warning: FitWarning, name: str, known_peak: tuple[str, float] | None) -> None:
        """On a worker thread: the warning for `name`, then the question on the UI thread."""
        try:
            warning = fit_warning(name, known_peak)
        except Exception as e:  # noqa: BLE001 - a worker thread: a failed estimate must not block the switch
            warning = f"could not check {name} against this machine: {e}"
        if not get_current_worker().is_cancelled:  # a later pick replaced this one
            self.host.call_from_thread(self.confirm_switch, name, warning)

    def confirm_switch(self, name: str, fit_warning: str) -> None:
        session = self.host.session
        if session.check_note and session.status_note == session.check_note:
            session.status_note = ""
            self.host.refresh_status()
        if session.quitting:
            return  # the user quit while it was checked
        row = {r.name: r for r in self.preset_rows()}.get(name)
        msg = switch_question(session.preset, name, session.engine_running, row, fit_warning)
        series_note = self.host.leaving_series_note()
        if series_note:
            msg = f"{msg}\n\n{series_note}"
        self.host.push_screen(
            ConfirmScreen("Switch preset", msg, yes="Switch", no="Cancel", purpose="switch"),
            lambda yes: self.switch_to(name) if yes else None,
        )

    def switch_to(
        self,
        label: str,
        make: Callable[[], EngineHandle] | None = None,
        reason: str = "switching preset",
    ) -> None:
        """Leave the run on screen losing nothing, then start or open another (`make()` builds
        its engine handle; by default the preset `label`)."""
        session = self.host.session
        if not session.engine_running:
            self.host.start_run(label, make)
            return
        session.pending_preset, session.pending_make = label, make
        session.switch_started = self.host.clock()
        if session.attached:
            session.detaching = True  # its worker returns "detached"; engine_finished goes on
            if session.engine_worker is not None:
                session.engine_worker.cancel()
            return
        keep = session.state not in RunState.ENDED
        self.commands.stop(checkpoint=keep, reason=reason)
        # Like quitting, no time limit: the next step boundary can be minutes away.
        self.update_note()
        session.switch_timer = self.host.set_interval(
            stop_wait_module.NOTE_REFRESH_S, self.update_note
        )

    def note(self) -> str:
        session = self.host.session
        return f"switching to {session.pending_preset}: {self.quitting.stop_wait(session.switch_started)}"

    def update_note(self) -> None:
        session = self.host.session
        if session.pending_preset is not None and not session.quitting:
            session.status_note = self.note()
            self.host.refresh_status()
