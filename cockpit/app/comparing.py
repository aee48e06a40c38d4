"""Other runs' loss curves over the run on screen.

Runs are read in a worker, turned into overlays and handed to the loss panel, which draws
them with a legend of each run's loss at the current step and the difference. The runs screen
(h) picks them, starting from the ones overlaid now; `cockpit compare` passes them at start;
ctrl+p "Stop comparing" (or O) removes them.

An overlaid run that is still training grows: it is read again now and then, each time after
at least a hundred times as long as its last reading took (and 15 s), so following it costs
at most about 1% of a core whatever its length.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.worker import get_current_worker

if TYPE_CHECKING:
    from textual.app import App

    from cockpit.app.session import Session

    _AppBase = App[None]  # for type checkers only: at run time a plain mixin
else:
    _AppBase = object

LIVE_REFRESH_MIN_S = 15.0  # an overlaid live run is read again at most this often...
LIVE_REFRESH_COST = 100.0  # ... and no sooner than this many times its last reading took


class Comparing(_AppBase):
    """Overlay runs on the loss curve, and take them off."""

    session: Session  # the app's one record of the run on screen and the session

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
        from cockpit.figures.overlay import Overlay
        from engine.rundir import read_curves

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
            self.main_screen.loss_panel.set_overlays(overlays)
            self.main_screen.loss_panel.flush(force=True)
            names = ", ".join(o.name for o in overlays)
            self.notify(f"the loss curve shows {names} too", title="Comparing", timeout=4)
            self._follow_live_overlays(LIVE_REFRESH_MIN_S)

    def _follow_live_overlays(self, after_s: float) -> None:
        """Read the overlaid runs that are still training again in `after_s` seconds."""
        timer = self.session.live_overlay_timer
        if timer is not None:
            timer.stop()
        self.session.live_overlay_timer = self.set_timer(after_s, self._reread_live_overlays)

    def _reread_live_overlays(self) -> None:
        self.session.live_overlay_timer = None
        keys = [o.key for o in self.main_screen.loss_panel.overlays]
        if keys and self.screen_stack:
            self._read_live_overlays(keys)

    @work(thread=True, exit_on_error=False, group="overlay-refresh", exclusive=True)
    def _read_live_overlays(self, keys: list[str]) -> None:
        from cockpit.figures.overlay import Overlay
        from engine.rundir import engine_holds, read_curves

        fresh, started = {}, time.monotonic()
        for key in keys:
            if engine_holds(Path(key)):  # a finished run's curve does not change
                try:
                    fresh[key] = Overlay(read_curves(Path(key)))
                except Exception:  # noqa: BLE001 - kept as it was; said when first overlaid
                    continue
        took = time.monotonic() - started
        if not get_current_worker().is_cancelled:
            self.call_from_thread(self._replace_live_overlays, fresh, took)

    def _replace_live_overlays(self, fresh: dict[str, Any], took_s: float) -> None:
        current = self.main_screen.loss_panel.overlays
        if any(o.key in fresh for o in current):  # those taken off meanwhile stay off
            self.main_screen.loss_panel.set_overlays([fresh.get(o.key, o) for o in current])
        if fresh and self.main_screen.loss_panel.overlays:
            self._follow_live_overlays(max(LIVE_REFRESH_MIN_S, LIVE_REFRESH_COST * took_s))

    def _drop_overlay(self, run_dir: Any) -> None:
        if run_dir is None:
            return
        kept = [
            o for o in self.main_screen.loss_panel.overlays
            if os.path.realpath(o.key) != os.path.realpath(run_dir)
        ]
        if len(kept) < len(self.main_screen.loss_panel.overlays):
            self.main_screen.loss_panel.set_overlays(kept)

    def action_clear_overlays(self) -> None:
        if not self.main_screen.loss_panel.overlays:
            self.notify("no other run is overlaid; h picks runs to compare", timeout=4)
            return
        self.main_screen.loss_panel.set_overlays([])
        self.main_screen.loss_panel.flush(force=True)
