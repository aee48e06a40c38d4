"""While you were away: the digest of what a run did since this user last watched it, shown over
the live screen when a viewer attaches after a gap. Any key (or a click) closes it; the run's
panels under it go on updating meanwhile."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

TITLE = "While you were away"


def away_lines(run_dir: Path, min_gap_s: float, now: float | None = None) -> list[str]:
    """The digest's lines for this user opening the run in `run_dir` now: since they last
    detached from it, when that was `min_gap_s` or more ago and the run did something since
    ([] when no digest is due). Reads the whole metrics file: call it off the UI thread."""
    from engine.control import viewer_name
    from engine.rundir import METRICS_NAME, away_digest, digest_lines

    now = time.time() if now is None else now
    user = viewer_name().split("@", 1)[0]
    try:
        found = away_digest(run_dir / METRICS_NAME, user, min_gap_s, now)
    except OSError:  # no metrics file to read (yet): nothing to tell
        return []
    return [] if found is None else digest_lines(found, now)


class AwayScreen(ModalScreen[None]):
    """The digest's lines (engine.rundir.digest_lines): a heading, then one fact a line, the
    listed alerts, actions and changes indented under theirs."""

    DEFAULT_CSS = """
    AwayScreen { background: $background 25%; }
    AwayScreen #away-dialog { width: 78; scrollbar-size-vertical: 1; }
    AwayScreen #away-lines { height: auto; }
    AwayScreen .away-line { height: auto; }
    AwayScreen .away-item { padding-left: 2; }
    """

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__(classes="dialog-screen")
        self.lines = list(lines)

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog", id="away-dialog") as box:
            box.border_title = TITLE
            box.border_subtitle = "any key: the live screen"
            with Vertical(id="away-lines"):
                for i, line in enumerate(self.lines):
                    yield self._line(i, line)

    @staticmethod
    def _line(i: int, line: str) -> Static:
        """The heading bold; a listed item indented as a whole (its wrapped part too); a fact's
        name ("alerts:") in the accent colour."""
        if i == 0:
            return Static(Content.styled(line, "bold"), classes="away-line")
        if line.startswith("  "):
            return Static(Content(line[2:]), classes="away-line away-item")
        head, sep, rest = line.partition(":")
        text = Content.assemble((head + sep, "$accent"), rest) if sep else Content(line)
        return Static(text, classes="away-line")

    def shown(self) -> str:
        """The digest as drawn, one line a fact (tests read it)."""
        return "\n".join(str(w.render()) for w in self.query(".away-line").results(Static))

    def on_key(self, event: events.Key) -> None:
        event.stop()  # the key closes the digest and does nothing else
        self.dismiss(None)

    def on_click(self, event: events.Click) -> None:
        event.stop()
        self.dismiss(None)
