"""Other runs' loss curves over the run on screen (the `Comparing` mixin of `CockpitApp`).

Runs are read in a worker (engine/run_history.py), turned into overlays (cockpit/overlay.py) and
handed to the loss panel, which draws them with a legend of each run's loss at the current step
and the difference. The runs screen (h) picks them, starting from the ones overlaid now;
`cockpit compare` passes them at start; ctrl+p "Stop comparing" (or O) removes them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.worker import get_current_worker

if TYPE_CHECKING:
    from textual.app import App

    _AppBase = App[None]  # for type checkers only: at run time a plain mixin
else:
    _AppBase = object


class Comparing(_AppBase):
    """Overlay runs on the loss curve, and take them off."""

    _status_note: str

    def overlay_runs(self, run_dirs: Sequence[Path]) -> None:
        """Overlay these runs' loss curves on the run on screen (read in a worker)."""
        others = [d for d in run_dirs if not self._is_current(d)]
        if not others:
            self.notify("that is the run on screen: pick others to compare with it", timeout=4)
            return
        self._busy(f"reading {len(others)} run{'s' if len(others) > 1 else ''}...")
        self._read_overlays(list(others))

    @work(thread=True, exit_on_error=False, group="overlays", exclusive=True)
    def _read_overlays(self, run_dirs: list[Path]) -> None:
        from cockpit.overlay import Overlay
        from engine.run_history import read_curves

        overlays, problems = [], []
        for run_dir in run_dirs:
            try:
                overlays.append(Overlay(read_curves(run_dir)))
            except Exception as e:  # noqa: BLE001 - one line per run that cannot be read
                problems.append(str(e))  # it names the run
        if not get_current_worker().is_cancelled:
            self.call_from_thread(self._show_overlays, overlays, problems)

    def _show_overlays(self, overlays: list[Any], problems: list[str]) -> None:
        self._not_busy()
        if problems:
            self.notify("\n".join(problems), title="Cannot compare", severity="error", timeout=10)
        if overlays:
            self.loss_panel.set_overlays(overlays)
            self.loss_panel.flush(force=True)
            names = ", ".join(o.name for o in overlays)
            self.notify(f"the loss curve shows {names} too", title="Comparing", timeout=4)

    def _drop_overlay(self, run_dir: Any) -> None:
        if run_dir is None:
            return
        kept = [
            o for o in self.loss_panel.overlays
            if os.path.realpath(o.key) != os.path.realpath(run_dir)
        ]
        if len(kept) < len(self.loss_panel.overlays):
            self.loss_panel.set_overlays(kept)

    def action_clear_overlays(self) -> None:
        if not self.loss_panel.overlays:
            self.notify("no other run is overlaid; h picks runs to compare", timeout=4)
            return
        self.loss_panel.set_overlays([])
        self.loss_panel.flush(force=True)
