"""The journal screen (`j`): every intervention of the run, newest first, one line each.

It reads the run's metrics.jsonl through `JournalTail` and follows it while
open, so it is the same for the app that runs the engine, for an attached viewer (the run is on
this machine: its socket is a local one) and for the run's past sessions: the file has all of it.
"""

from __future__ import annotations

import time
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from engine.rundir import Entry, JournalTail

POLL_S = 1.0  # how often the open journal reads what the run wrote since
MAX_ROWS = 5000  # the newest entries shown (a run that warned all night stays quick to open)
COLUMNS = ("step", "time", "who", "what")
STEP_WIDTH, TIME_WIDTH = 7, 8
WHO_MAX = 40  # the who column at most (a viewer's "user@host (tty)"), and 2/5 of the room
EMPTY = "Nothing yet: pauses, LR changes, checkpoints, rollbacks, alerts and viewers show here."


def clock_time(t: float) -> str:
    """HH:MM:SS of a record's Unix time, on this machine's clock."""
    return time.strftime("%H:%M:%S", time.localtime(t)) if t > 0 else "--:--:--"


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def entry_row(entry: Entry, who_width: int, what_width: int) -> tuple[str, str, str, str]:
    what = f"{entry.what}: {entry.detail}" if entry.detail else entry.what
    return (
        f"{entry.step:,}",
        clock_time(entry.time),
        clip(entry.who, who_width),
        clip(what, what_width),
    )


class JournalScreen(ModalScreen[None]):
    """The journal of the run in `run_dir` (None: it has no directory yet)."""

    BINDINGS = [Binding("escape,q,j", "close", "Close", show=False)]

    def __init__(self, run_dir: str | Path | None) -> None:
        super().__init__(classes="dialog-screen")
        self.tail = JournalTail(Path(run_dir) / "metrics.jsonl") if run_dir else None
        self._shown = -1  # entries drawn (-1: never drawn)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="journal-dialog") as box:
            box.border_title = "Journal"
            box.border_subtitle = "esc close"
            yield Static("", id="journal-note")
            table: DataTable[str] = DataTable(
                id="journal-table", cursor_type="row", zebra_stripes=True
            )
            yield table

    def on_mount(self) -> None:
        # the whole screen, over the dialogs' usual 72 columns (inline: the app's CSS wins
        # over a screen's DEFAULT_CSS)
        dialog = self.query_one("#journal-dialog")
        dialog.styles.width = dialog.styles.height = "100%"
        dialog.styles.max_width = dialog.styles.max_height = "100%"
        dialog.styles.padding = (0, 1)
        self.query_one("#journal-table").styles.height = "1fr"
        self._poll(force=True)
        self.set_interval(POLL_S, self._poll)
        self.query_one(DataTable).focus()

    def on_resize(self) -> None:
        self._draw()

    def _poll(self, force: bool = False) -> None:
        if self.tail is not None and (self.tail.poll() or force):
            self._draw()
        elif force:
            self._draw()

    def _widths(self, entries: list[Entry]) -> tuple[int, int]:
        # the dialog's border, padding and scrollbar; DataTable pads each cell on both sides
        room = self.app.size.width - 6 - STEP_WIDTH - TIME_WIDTH - 2 * len(COLUMNS)
        longest = max((len(e.who) for e in entries[-MAX_ROWS:]), default=len("who"))
        who = min(longest, WHO_MAX, max(12, room * 2 // 5))
        return who, max(10, room - who)

    def _draw(self) -> None:
        entries = self.tail.entries if self.tail is not None else []
        note = self.query_one("#journal-note", Static)
        if self.tail is None:
            note.update(Content.styled("No run directory yet: nothing recorded.", "$warning"))
        elif not entries:
            note.update(Content.styled(EMPTY, "$foreground-muted"))
        else:
            shown = min(len(entries), MAX_ROWS)
            more = f" (the newest {shown:,})" if shown < len(entries) else ""
            note.update(
                Content.styled(f"{len(entries):,} entries{more}, newest first", "$foreground-muted")
            )
        table = self.query_one(DataTable)
        who_width, what_width = self._widths(entries)
        table.clear(columns=True)
        widths = (STEP_WIDTH, TIME_WIDTH, who_width, what_width)
        for label, width in zip(COLUMNS, widths, strict=True):
            table.add_column(label, width=width, key=label)
        for entry in reversed(entries[-MAX_ROWS:]):
            table.add_row(*entry_row(entry, who_width, what_width))
        self._shown = len(entries)

    def action_close(self) -> None:
        self.dismiss(None)
