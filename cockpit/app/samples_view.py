"""Opening the samples screen: the run on screen's samples (its metrics.jsonl's and the ones
the panel holds), and, while runs are overlaid on the loss, each compared run's, read in a
worker (a long run's file is read past its step lines, but it is still a file of every step).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from textual.worker import get_current_worker

from cockpit.app.host import Host
from cockpit.screens.samples_screen import SampleSource, SamplesScreen


def run_samples(
    run_dir: str | None, shown: list[tuple[int, str, str]]
) -> tuple[tuple[int, str, str], ...]:
    """The file's samples, then those the panel holds (the newest may not be written yet)."""
    from engine.rundir import read_samples

    return (*(read_samples(Path(run_dir)) if run_dir else []), *shown)


class SamplesView:
    """Open the samples screen over the run on screen and the runs compared with it."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def open(self) -> None:
        run_dir = self.host.session.run_dir
        name = Path(run_dir).name if run_dir else "this run"
        shown = list(self.host.main_screen.samples_panel.samples)
        others = [(o.name, o.key) for o in self.host.main_screen.loss_panel.overlays]
        self.host.run_worker(
            partial(self.read, name, run_dir, shown, others),
            thread=True, group="samples", exclusive=True, exit_on_error=False,
        )  # fmt: skip

    def read(
        self,
        name: str,
        run_dir: str | None,
        shown: list[tuple[int, str, str]],
        others: list[tuple[str, str]],
    ) -> None:
        """On a worker thread: every source's samples, then the screen on the UI thread."""
        sources = [SampleSource(name, run_samples(run_dir, shown))]
        sources += [SampleSource(n, run_samples(key, [])) for n, key in others]
        if not get_current_worker().is_cancelled:
            self.host.call_from_thread(self.show, sources)

    def show(self, sources: list[SampleSource]) -> None:
        if not isinstance(self.host.screen, SamplesScreen):  # a second enter while reading
            self.host.push_screen(SamplesScreen(sources))
