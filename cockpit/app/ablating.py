"""The app of `cockpit ablate`: the series' runs one after another in the normal cockpit, the run
on screen titled with its place in the series ("ablate 2/5: optim.name=adamw").

When a run ends on its own the next starts; after the last, every run's loss is overlaid and the
table written. What a series is, and which run comes next, is the driver's (the CLI's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from cockpit.app.cockpit_app import CockpitApp
from engine.contract import EngineHandle
from engine.events import RunStarted, RunState


class SeriesSteps(Protocol):
    """What the app asks of a series."""

    current_engine: Any  # the engine of the series' run on its way

    def next_run(self) -> tuple[str, Callable[[], EngineHandle]] | None:
        """The next run's title and how to build its engine; None once the series is done."""

    def run_ended(self) -> None:
        """The run on its way has ended: record it."""

    def run_dirs(self) -> Sequence[Path]:
        """Every run directory of the series, in order."""

    def finish(self) -> str:
        """The series is done: write its table; the line the app shows."""

    def stopped_note(self) -> str:
        """The series stopped before its end: how many runs are done, and how to continue."""


class AblationApp(CockpitApp):
    """CockpitApp driving a series: the next run starts when one ends."""

    def __init__(self, *args: Any, series: SeriesSteps, first_label: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.series = series
        self.series_label = first_label  # the title of the series' run on screen
        self.series_done = False

    def _ours(self) -> bool:
        trainer = self.session.trainer
        return trainer is not None and trainer is self.series.current_engine

    def retitle(self, ev: RunStarted) -> None:
        super().retitle(ev)
        if self._ours():
            self.session.preset = self.series_label  # the status line's first words
            self.sub_title = self.series_label
            self.refresh_status()

    def leaving_series_note(self) -> str:
        """Said in the p, n and f dialogs: going ahead ends the series here (not once it is
        done, or left already: the run on screen is not the series')."""
        if self.series_done or not self._ours():
            return ""
        return (
            "This stops the ablation series here; the same `cockpit ablate` command continues "
            "it later (the runs done are kept)."
        )

    def engine_finished(self) -> None:
        if self._ours():
            self.series.run_ended()
            ended_by_itself = self.session.state in (RunState.FINISHED, RunState.FAILED)
            if ended_by_itself and not self.session.quitting and self.session.pending_preset is None:
                following = self.series.next_run()
                if following is not None:
                    self.series_label = following[0]
                    self.session.pending_preset, self.session.pending_make = following
                    self.notify(f"next: {self.series_label}", title="Ablation", timeout=4)
                else:
                    self.call_later(self._series_finished)
            elif self.session.pending_preset is not None and not self.session.quitting:
                # another run picked (p, n, f, r): the series stops here, its run resumable
                self.notify(
                    f"{self.series.stopped_note()} · {self.session.pending_preset} is not part of it",
                    title="Ablation stopped",
                    severity="warning",
                    timeout=15,
                )
        super().engine_finished()

    def _series_finished(self) -> None:
        self.series_done = True
        note = self.series.finish()
        others = [d for d in self.series.run_dirs() if d.is_dir() and not self.session.is_current(d)][:8]
        if others:
            self.overlay_runs(others)  # the comparison: every run's loss over the last one's
        self.session.status_note = f"✓ {note} · q: quit"
        self.notify(note, title="Ablation done", timeout=10)
        self.refresh_status()
