"""The runs screen: every run under a directory, live or not, newest first, as `cockpit runs`
lists them, refreshed every 2 s; the user picks one (or several) and what to do with it.

The screen only chooses: it dismisses with a `RunsChoice` (open, overlay, resume, new, fork and
the run directories) or None, and the app acts on it. Reading the runs (summaries, locks, a live
run's control socket) happens in a thread worker, so the UI never waits on a disk or a socket.
Textual and the torch-free listing only: opening the screen costs no torch import.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static
from textual.widgets.data_table import CellDoesNotExist
from textual.worker import Worker, WorkerState

from cockpit.figures.run_table import RIGHT_ALIGNED, fit_columns, row, shorten_run_name
from cockpit.screens.settings import parse_settings
from cockpit.widgets.footer import KeyFooter
from engine.checkpoint import latest_checkpoint, step_of
from engine.rundir import LIVE, UNREADABLE, ListedRun, find_run_dirs, list_run

REFRESH_S = 2.0  # live runs' steps move, new runs appear
CONFIG_NAME = "config.toml"  # the run's replayable config, written when it starts
CURRENT_MARK, SELECTED_MARK = "●", "✓"
MARK_WIDTH = 2  # the first column: the run shown, then whether it is selected for comparison
CELL_PADDING = 1  # DataTable's padding on each side of a cell
SCROLLBAR = 1  # the table's vertical scrollbar (DEFAULT_CSS), kept free even when not shown
FORK_EXAMPLE = "optim.lr=1e-4 train.max_steps=5000"
COMPACT_WIDTH = 120  # narrower: the footer's compact form (as the main screen's)

Action = Literal["open", "overlay", "resume", "new", "fork"]


@dataclass(frozen=True)
class RunsChoice:
    """What the user chose on the runs screen: the action and the runs it applies to (an overlay:
    the selected runs in the order they were selected), and a fork's settings (`--set` form)."""

    action: Action
    run_dirs: list[Path]
    overrides: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RunEntry:
    """One listed run and what the screen's keys need to know of its directory."""

    listed: ListedRun
    checkpoint: Path | None  # the newest ckpt-STEP.pt (None: nothing to resume or fork from)
    has_config: bool  # config.toml: a new run can start from it

    @property
    def key(self) -> str:
        return os.path.abspath(self.listed.run_dir)

    @property
    def live(self) -> bool:
        return self.listed.state == LIVE

    @property
    def name(self) -> str:
        return self.listed.name


def read_runs(root: Path) -> tuple[list[RunEntry], str]:
    """Every run under `root`, newest first (one that cannot be read is listed with the reason),
    and why there can be none ('' when `root` is a directory). Runs in the app, off its UI
    thread."""
    if not root.exists():
        return [], "it does not exist"
    if not root.is_dir():
        return [], "it is a file, not a directory"
    entries = []
    for run_dir in find_run_dirs(root):
        listed = list_run(run_dir, root)  # an unreadable run is a row saying why
        if listed.problem is not None:
            entries.append(RunEntry(listed, None, False))
            continue
        has_config = (run_dir / CONFIG_NAME).is_file()
        entries.append(RunEntry(listed, latest_checkpoint(run_dir), has_config))
    entries.sort(key=lambda e: e.listed.sort_time, reverse=True)
    return entries, ""


def empty_message(root: Path, reason: str) -> str:
    because = f" ({reason})" if reason else ""
    return f"no runs under {root} yet{because}: this run appears here once it has written its first step"


def row_hint(entry: RunEntry, selected: int) -> str:
    """What the keys do on this row, in one line."""
    if entry.listed.problem is not None:
        return f"{UNREADABLE}: {entry.listed.problem}"
    state = f"{entry.listed.state} at {entry.listed.summary['step']:,}"
    parts = [f"{state}: ⏎ attach" if entry.live else f"{state}: ⏎ view"]  # ⏎ as the footer says
    saved = entry.checkpoint
    if saved is not None and not entry.live and entry.listed.state == "finished":
        parts.append("r train on")  # it reached its max_steps: r asks how far
    elif saved is not None and not entry.live:
        step = step_of(saved.name)
        parts.append(f"r resume at {step:,}" if step is not None else "r resume")
    if entry.has_config:
        parts.append("n new run")
    parts.append("f fork" if saved is not None else "no checkpoint")
    parts.append(f"o overlay {selected}" if selected else "space select")
    return " · ".join(parts)


class RunsTable(DataTable[Text]):
    """The runs' table; enter is the screen's `open` (a click only moves the cursor)."""

    BINDINGS = [Binding("enter", "select_cursor", "Open")]  # DataTable's, shown in the footer

    def action_select_cursor(self) -> None:
        if isinstance(self.screen, RunsScreen):
            self.screen.action_open()


class RunsScreen(Screen["RunsChoice | None"]):
    """The runs under `root`; `current` is the run directory the cockpit shows (marked ●)."""

    DEFAULT_CSS = """
    RunsScreen { layout: vertical; }
    RunsScreen #runs-title { height: 1; padding: 0 1; text-style: bold; text-wrap: nowrap;
                             text-overflow: ellipsis; }
    RunsScreen #runs-hint { height: 1; padding: 0 1; color: $text-muted; text-wrap: nowrap;
                            text-overflow: ellipsis; }
    RunsScreen #runs-table { height: 1fr; scrollbar-size-vertical: 1; }
    RunsScreen #runs-fork { display: none; height: auto; padding: 0 1; border-top: solid $primary; }
    RunsScreen #runs-fork.-open { display: block; }
    RunsScreen #runs-fork-input { width: 1fr; }
    RunsScreen #runs-fork-error { height: auto; color: $error; }
    """

    # the footer's order; a narrow footer drops keys from the end, so the way out comes first
    BINDINGS = [
        Binding("enter", "open", "Open"),
        Binding("escape", "back", "Back"),
        Binding("space", "toggle_select", "Select"),
        Binding("o", "overlay", "Overlay"),
        Binding("r", "resume", "Resume"),
        Binding("n", "new", "New run"),
        Binding("f", "fork", "Fork"),
        # not in the footer (its snapshots stay as they are): docs/guide/history.md names it
        Binding("R", "research", "Research", show=False),
    ]

    def __init__(
        self, root: Path, current: str | None = None, selected: Sequence[str] = ()
    ) -> None:
        """`selected`: the runs overlaid now (o keeps them, unless unselected)."""
        super().__init__()
        self.root = Path(root)
        self.current = os.path.abspath(current) if current else None
        self.entries: list[RunEntry] = []
        # keys of the runs selected for comparison, in order
        self.selected: list[str] = [os.path.abspath(s) for s in selected]
        self._reason = ""  # why there can be no runs (the root is missing...)
        self._read_once = False
        self._reading = False
        self._drawn: tuple[object, ...] | None = None  # what the table shows, to skip redraws
        self._forking: RunEntry | None = None

    def compose(self) -> ComposeResult:
        yield Static(f"Runs under {self.root}: reading...", id="runs-title")
        yield Static("", id="runs-hint")
        yield RunsTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        with Vertical(id="runs-fork"):
            yield Static("", id="runs-fork-label")
            yield Input(placeholder=FORK_EXAMPLE, id="runs-fork-input", select_on_focus=False)
            yield Static("", id="runs-fork-error")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one(RunsTable).focus()
        self.refresh_runs()
        self.set_interval(REFRESH_S, self.refresh_runs)

    # ---------------------------------------------------------------- reading, off the UI thread

    def refresh_runs(self) -> None:
        """Read the runs again (one read at a time: a slow disk skips a refresh, never piles up)."""
        if self._reading:
            return
        self._reading = True
        self.run_worker(
            lambda: read_runs(self.root), name="runs-read", thread=True, exit_on_error=False
        )

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name != "runs-read" or not event.worker.is_finished:
            return
        self._reading = False
        if not self.is_attached or event.state == WorkerState.CANCELLED:
            return  # the screen was closed meanwhile
        if event.state == WorkerState.SUCCESS and event.worker.result is not None:
            self.entries, self._reason = event.worker.result
        elif event.state == WorkerState.ERROR:  # the listing as it was stays (shown when none)
            self._reason = f"could not read it: {event.worker.error}"
        self._read_once = True
        alive = {e.key for e in self.entries}
        self.selected = [k for k in self.selected if k in alive]  # a deleted run is unselected
        self._draw()

    # ---------------------------------------------------------------- drawing

    def on_resize(self) -> None:
        self.query_one(KeyFooter).compact = self.size.width < COMPACT_WIDTH
        if self._read_once:
            self._draw()

    def _draw(self) -> None:
        table = self.query_one(RunsTable)
        title = self.query_one("#runs-title", Static)
        if not self.entries:
            title.update(empty_message(self.root, self._reason))
            table.display = False
            self._drawn = None
            self._update_hint()
            return
        n = len(self.entries)
        title.update(f"Runs under {self.root}: {n}, newest first")
        table.display = True
        now = time.time()
        rows = [row(e.listed, now) for e in self.entries]
        room = self.size.width - SCROLLBAR - (MARK_WIDTH + 2 * CELL_PADDING)
        # fit_columns counts a 2-space gap between columns; a DataTable pads each side of a cell
        columns, widths = fit_columns(rows, room - 2 * CELL_PADDING)
        for cells in rows:  # an unreadable run's reason is in the hint line
            cells["RUN"] = shorten_run_name(cells["RUN"], widths["RUN"])
        marks = [self._mark(e) for e in self.entries]
        drawn = (tuple(columns), tuple(widths[c] for c in columns),
                 tuple(tuple(r[c] for c in columns) for r in rows), tuple(marks))  # fmt: skip
        if drawn != self._drawn:
            self._fill(table, columns, widths, rows, marks)
            self._drawn = drawn
        self._update_hint()

    def _fill(self, table: RunsTable, columns: list[str], widths: dict[str, int],
              rows: list[dict[str, str]], marks: list[str]) -> None:  # fmt: skip
        """Redraw the table, the cursor staying on the same run (and the view where it was)."""
        was_on = self._cursor_entry()
        scroll_y = table.scroll_y
        same_columns = self._drawn is not None and self._drawn[:2] == (
            tuple(columns), tuple(widths[c] for c in columns))  # fmt: skip
        table.clear(columns=not same_columns)
        if not same_columns:
            table.add_column("", width=MARK_WIDTH, key="mark")
            for header in columns:
                table.add_column(self._cell(header, header), width=widths[header], key=header)
        for entry, cells, mark in zip(self.entries, rows, marks, strict=True):
            table.add_row(Text(mark), *(self._cell(h, cells[h]) for h in columns), key=entry.key)
        keys = [e.key for e in self.entries]
        if was_on is not None and was_on.key in keys:
            table.move_cursor(row=keys.index(was_on.key), scroll=False)
        table.scroll_to(y=scroll_y, animate=False, immediate=True)

    @staticmethod
    def _cell(header: str, text: str) -> Text:
        return Text(text, justify="right" if header in RIGHT_ALIGNED else "left", no_wrap=True)

    def _mark(self, entry: RunEntry) -> str:
        current = CURRENT_MARK if entry.key == self.current else " "
        return current + (SELECTED_MARK if entry.key in self.selected else " ")

    def _update_hint(self) -> None:
        entry = self._cursor_entry()
        hint = "" if entry is None else row_hint(entry, len(self.selected))
        self.query_one("#runs-hint", Static).update(hint)

    @on(DataTable.RowHighlighted)
    def _moved(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._update_hint()

    def _cursor_entry(self) -> RunEntry | None:
        table = self.query_one(RunsTable)
        if not self.entries or not table.row_count or not self._drawn:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except CellDoesNotExist:  # the cursor off the rows (a table being rebuilt)
            return None
        return next((e for e in self.entries if e.key == key), None)

    # ---------------------------------------------------------------- keys

    def _target(self) -> RunEntry | None:
        """The cursor's run, or None (with a line saying so) when there is none or a fork's
        settings are being typed."""
        if self._forking is not None:
            return None
        entry = self._cursor_entry()
        if entry is None:
            self.notify("no run here yet", severity="warning")
        return entry

    def _refuse(self, message: str) -> None:
        self.notify(message, severity="warning", timeout=4)

    def _choose(
        self, action: Action, entries: Sequence[RunEntry], overrides: Sequence[str] = ()
    ) -> None:
        self.dismiss(RunsChoice(action, [e.listed.run_dir for e in entries], list(overrides)))

    def action_open(self) -> None:
        if (entry := self._target()) is None:
            return
        if entry.listed.problem is not None:
            self._refuse(f"{entry.name} cannot be opened: {entry.listed.problem}")
        else:
            self._choose("open", [entry])

    def action_toggle_select(self) -> None:
        if (entry := self._target()) is None:
            return
        if entry.key in self.selected:
            self.selected.remove(entry.key)
        else:
            self.selected.append(entry.key)
        self._draw()

    def action_overlay(self) -> None:
        if self._forking is not None:
            return
        by_key = {e.key: e for e in self.entries}
        chosen = [by_key[k] for k in self.selected if k in by_key]
        if not chosen and (entry := self._target()) is not None:
            chosen = [entry]
        others = [e for e in chosen if e.key != self.current]
        if chosen and not others:
            self._refuse("that is the run shown: select others (space) to overlay on it")
        elif others:
            self._choose("overlay", others)

    def action_resume(self) -> None:
        if (entry := self._target()) is None:
            return
        if entry.live:
            self._refuse(f"{entry.name} is live: it needs no resume (enter attaches to it)")
        elif entry.checkpoint is None:
            also = " (n starts it again from its config)" if entry.has_config else ""
            self._refuse(f"{entry.name} saved no checkpoint to resume from{also}")
        else:
            self._choose("resume", [entry])

    def action_new(self) -> None:
        if (entry := self._target()) is None:
            return
        if not entry.has_config:
            self._refuse(f"{entry.name} has no {CONFIG_NAME} to start a new run from")
        else:
            self._choose("new", [entry])

    def action_fork(self) -> None:
        if (entry := self._target()) is None:
            return
        if entry.checkpoint is None:
            self._refuse(f"{entry.name} saved no checkpoint to fork from")
            return
        self._forking = entry
        label = f"Fork {entry.name} from {entry.checkpoint.name}, with these settings (esc: cancel)"
        self.query_one("#runs-fork-label", Static).update(label)
        self.query_one("#runs-fork-error", Static).update("")
        self.query_one("#runs-fork").add_class("-open")
        self.query_one("#runs-fork-input", Input).focus()

    @on(Input.Submitted, "#runs-fork-input")
    def _fork_settings(self, event: Input.Submitted) -> None:
        event.stop()
        if self._forking is None:
            return
        try:
            overrides = parse_settings(event.value)
        except ValueError as e:
            self.query_one("#runs-fork-error", Static).update(Content(str(e)))
            return
        self._choose("fork", [self._forking], overrides)

    def _close_fork(self) -> None:
        self._forking = None
        self.query_one("#runs-fork").remove_class("-open")
        self.query_one("#runs-fork-input", Input).value = ""
        self.query_one(RunsTable).focus()

    def action_research(self) -> None:
        """The research screen over this root's newest research log; what it chooses (open a
        run, overlay the kept ones) is this screen's choice."""
        if self._forking is not None:
            return
        # imported when asked: it brings numpy, which the runs screen alone does not need
        from cockpit.screens.research_screen import ResearchChoice, ResearchScreen

        def chosen(choice: ResearchChoice | None) -> None:
            if choice is None:
                return
            dirs = choice.run_dirs
            if choice.action == "overlay":  # on the run shown, as o here overlays
                dirs = [d for d in dirs if os.path.abspath(d) != self.current]
                if not dirs:
                    self._refuse("the kept experiments' only run is the one shown")
                    return
            self.dismiss(RunsChoice(choice.action, dirs))

        self.app.push_screen(ResearchScreen(self.root), chosen)

    def action_back(self) -> None:
        if self._forking is not None:
            self._close_fork()
        else:
            self.dismiss(None)
