"""Other runs' loss curves over the run on screen (the runs screen's overlay, `cockpit compare`).

Runs are read in a worker and handed to the loss panel. An overlaid run still training is read
again after at least a hundred times its last reading took (and 15 s): about 1% of a core.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from textual.worker import get_current_worker

from cockpit.app.host import Host

LIVE_REFRESH_MIN_S = 15.0  # an overlaid live run is read again at most this often...
LIVE_REFRESH_COST = 100.0  # ... and no sooner than this many times its last reading took


def read_overlay(run_dir: Path) -> tuple[Any, str]:
    """The run's curves as an overlay, or None and why not (one line naming the run)."""
    from cockpit.figures.overlay import Overlay
    from engine.rundir import read_curves

    try:
        return Overlay(read_curves(run_dir)), ""
    except Exception as e:  # noqa: BLE001 - on a worker thread: an unreadable run is one line
        return None, str(e)


class Comparing:
    """Overlay runs on the loss curve, and take them off."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def overlay_runs(self, run_dirs: Sequence[Path]) -> None:
        """Overlay these runs' loss curves on the run on screen (read in a worker)."""
        session = self.host.session
        others = [d for d in run_dirs if not session.is_current(d)]
        if not others:
            self.host.notify("that is the run on screen: pick others to compare with it", timeout=4)
            return
        session.busy(f"reading {len(others)} run{'s' if len(others) > 1 else ''}...")
        self.host.refresh_status()
        self.host.run_worker(
            partial(self.read_overlays, list(others)),
            thread=True, group="overlays", exclusive=True, exit_on_error=False,
        )  # fmt: skip

    def read_overlays(self, run_dirs: list[Path]) -> None:
        """On a worker thread: read the runs, then show them on the UI thread."""
        overlays, problems = [], []
        for run_dir in run_dirs:
            overlay, problem = read_overlay(run_dir)
            if overlay is not None:
                overlays.append(overlay)
            else:
                problems.append(problem)
        if not get_current_worker().is_cancelled:
            self.host.call_from_thread(self.show_overlays, overlays, problems)

    def show_overlays(self, overlays: list[Any], problems: list[str]) -> None:
        self.host.session.not_busy()
        self.host.refresh_status()
        if problems:
            self.host.notify("\n".join(problems), title="Cannot compare", severity="error", timeout=10)
        if overlays:
            loss = self.host.main_screen.loss_panel
            loss.set_overlays(overlays)
            loss.flush(force=True)
            names = ", ".join(o.name for o in overlays)
            self.host.notify(f"the loss curve shows {names} too", title="Comparing", timeout=4)
            self.follow_live_overlays(LIVE_REFRESH_MIN_S)

    def follow_live_overlays(self, after_s: float) -> None:
        """Read the overlaid runs that are still training again in `after_s` seconds."""
        session = self.host.session
        if session.live_overlay_timer is not None:
            session.live_overlay_timer.stop()
        session.live_overlay_timer = self.host.set_timer(after_s, self.reread_live_overlays)

    def reread_live_overlays(self) -> None:
        self.host.session.live_overlay_timer = None
        keys = [o.key for o in self.host.main_screen.loss_panel.overlays]
        if keys and self.host.can_draw():
            self.host.run_worker(
                partial(self.read_live_overlays, keys),
                thread=True, group="overlay-refresh", exclusive=True, exit_on_error=False,
            )  # fmt: skip

    def read_live_overlays(self, keys: list[str]) -> None:
        """On a worker thread: read again the overlaid runs an engine still holds."""
        from engine.rundir import engine_holds

        fresh, started = {}, time.monotonic()
        for key in keys:
            if engine_holds(Path(key)):  # a finished run's curve does not change
                overlay, _ = read_overlay(Path(key))
                if overlay is not None:  # else kept as it was (said when first overlaid)
                    fresh[key] = overlay
        took = time.monotonic() - started
        if not get_current_worker().is_cancelled:
            self.host.call_from_thread(self.replace_live_overlays, fresh, took)

    def replace_live_overlays(self, fresh: dict[str, Any], took_s: float) -> None:
        loss = self.host.main_screen.loss_panel
        current = loss.overlays
        if any(o.key in fresh for o in current):  # those taken off meanwhile stay off
            loss.set_overlays([fresh.get(o.key, o) for o in current])
        if fresh and loss.overlays:
            self.follow_live_overlays(max(LIVE_REFRESH_MIN_S, LIVE_REFRESH_COST * took_s))

    def drop_overlay(self, run_dir: Any) -> None:
        """`run_dir` is no longer overlaid (it is about to be the run on screen)."""
        if run_dir is None:
            return
        loss = self.host.main_screen.loss_panel
        kept = [o for o in loss.overlays if os.path.realpath(o.key) != os.path.realpath(run_dir)]
        if len(kept) < len(loss.overlays):
            loss.set_overlays(kept)

    def clear_overlays(self) -> None:
        loss = self.host.main_screen.loss_panel
        if not loss.overlays:
            self.host.notify("no other run is overlaid; h picks runs to compare", timeout=4)
            return
        loss.set_overlays([])
        loss.flush(force=True)
