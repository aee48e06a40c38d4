"""The corpus preparation panel: a progress bar and its figures while the corpus is prepared,
before the run's first step; hidden the rest of the time.

Events arrive at most a few a second and are drained 4 times a second; only the newest one of
a drain is drawn (`flush`), so the panel costs what a text counter costs.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static

from cockpit.figures.data_progress_text import progress_figures
from engine.events import DataProgress


def progress_title(ev: DataProgress) -> str:
    """'Preparing corpus.txt (r50k_base)', with what happened to an earlier attempt if any."""
    title = f"Preparing {ev.source} ({ev.tokenizer})"
    return f"{title} · {ev.note}" if ev.note else title


class DataProgressPanel(Vertical):
    """Shown (class `-active`) from the first progress event until the last (done) one."""

    BORDER_TITLE = "Corpus"

    DEFAULT_CSS = """
    DataProgressPanel {
        display: none;
        height: auto;
        border: round $primary 40%;
        border-title-color: $text;
        border-title-style: bold;
        background: $surface;
        padding: 0 1;
    }
    DataProgressPanel.-active { display: block; }
    DataProgressPanel > .title { height: 1; }
    DataProgressPanel > ProgressBar { height: 1; width: 1fr; }
    DataProgressPanel Bar { width: 1fr; }
    DataProgressPanel > ProgressBar.-unknown { display: none; }
    DataProgressPanel > .figures { height: auto; color: $text-muted; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.latest: DataProgress | None = None  # the newest event, drawn at the next flush
        self._drawn: DataProgress | None = None
        self.title = Static(classes="title")
        # ETA is in the figures, computed from the engine's own times: not the bar's clock
        self.bar = ProgressBar(total=100, show_eta=False)
        self.figures = Static(classes="figures")

    def compose(self) -> ComposeResult:
        yield self.title
        yield self.bar
        yield self.figures

    @property
    def preparing(self) -> bool:
        """The corpus is being prepared: nothing trained, nothing to save yet."""
        return self.has_class("-active")

    def add_progress(self, ev: DataProgress) -> None:
        """Take an event; it is drawn at the next `flush` (the last one hides the panel)."""
        self.latest = ev

    def finish(self) -> None:
        """The preparation is over (the run started, stopped or failed): hide the panel."""
        self.latest = None
        self._drawn = None
        self.remove_class("-active")

    def flush(self) -> None:
        ev = self.latest
        if ev is None or ev is self._drawn:
            return
        self._drawn = ev
        if ev.done:
            self.finish()
            return
        self.title.update(progress_title(ev))
        fraction = ev.fraction
        # no total (a built-in text): no bar rather than an animation redrawn many times a second
        self.bar.set_class(fraction is None, "-unknown")
        if fraction is not None:
            self.bar.update(total=100, progress=100 * fraction)
        self.figures.update(progress_figures(ev))
        self.add_class("-active")
