"""The research screen: a series' research log (RUNS/research/NAME/log.tsv, as `cockpit research
log` prints it) as a table, over a chart of the running best val bits per byte by experiment,
the kept experiments marked. Reached from the runs screen (R).

Like the runs screen it only chooses: it dismisses with a `ResearchChoice` (open one experiment's
run, or overlay the kept ones) or None, which the runs screen passes on to the app. The log is read in a thread worker.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from rich.style import Style
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import DataTable, Static
from textual.worker import Worker, WorkerState

from cockpit.ablation.research_log import LogRow, find_log, read_log
from cockpit.widgets.braille import line_cells, to_dots
from cockpit.widgets.footer import KeyFooter
from engine.config import ConfigError

KEPT_MARK = "●"
AXIS_WIDTH = 7  # "4.3219 " left of the canvas
COMPACT_WIDTH = 120
CHANGE_WIDTH = 32  # a longer change is cut (ellipsis): the hint line has it whole
SCROLLBAR = 1


@dataclass(frozen=True)
class ResearchChoice:
    """Open one experiment's run, or overlay the kept ones (in the log's order)."""

    action: Literal["open", "overlay"]
    run_dirs: list[Path]


def running_best(rows: Sequence[LogRow]) -> list[float | None]:
    """The best (lowest) val bpb of the kept experiments so far, after each experiment (None
    until one is kept with a figure)."""
    best: float | None = None
    out: list[float | None] = []
    for r in rows:
        if r.status == "kept" and r.val_bpb is not None:
            best = r.val_bpb if best is None else min(best, r.val_bpb)
        out.append(best)
    return out


def chart_lines(rows: Sequence[LogRow], width: int, height: int) -> list[Text]:
    """The running best as a braille line over experiments 1..N, each measured experiment a dot
    (kept: ●), a val bpb axis on the left and the experiment numbers below; `height` lines."""
    measured = [r.val_bpb for r in rows if r.val_bpb is not None]
    if height < 3 or width < AXIS_WIDTH + 10:
        return []
    if not measured:
        return [Text("no experiment measured yet: the chart shows val bpb once one has been")]
    canvas_w, canvas_h = width - AXIS_WIDTH, height - 1
    lo, hi = min(measured), max(measured)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.01, hi + 0.01
    n = len(rows)
    xlim = (1.0, float(max(n, 2)))
    grid = [[" "] * canvas_w for _ in range(canvas_h)]
    styles: list[list[Style | None]] = [[None] * canvas_w for _ in range(canvas_h)]
    best = running_best(rows)
    # a step line: the best holds until an experiment is kept lower
    xs: list[float] = []
    ys: list[float] = []
    for i, b in enumerate(best):
        if b is None:
            continue
        if ys and ys[-1] != b:
            xs.append(float(i + 1))
            ys.append(ys[-1])
        xs.append(float(i + 1))
        ys.append(b)
    line = Style(color="cyan")
    cells = line_cells(np.array(xs), np.array(ys), xlim, (lo, hi), canvas_w, canvas_h)
    for col, row, char in zip(*cells, strict=True):
        grid[canvas_h - 1 - int(row)][int(col)] = char
        styles[canvas_h - 1 - int(row)][int(col)] = line
    points = [(i + 1, r) for i, r in enumerate(rows) if r.val_bpb is not None]
    dot_x = to_dots(np.array([x for x, _ in points], dtype=np.float64), *xlim, 2 * canvas_w)
    dot_y = to_dots(
        np.array([r.val_bpb for _, r in points], dtype=np.float64), lo, hi, 4 * canvas_h
    )
    for (_, r), dx, dy in zip(points, dot_x, dot_y, strict=True):
        col, y = min(int(dx) // 2, canvas_w - 1), canvas_h - 1 - min(int(dy) // 4, canvas_h - 1)
        kept = r.status == "kept"
        grid[y][col] = KEPT_MARK if kept else "·"
        styles[y][col] = Style(color="green", bold=True) if kept else Style(dim=True)
    out = []
    for y in range(canvas_h):
        label = hi if y == 0 else lo if y == canvas_h - 1 else None
        text = Text(f"{label:.4f} ".rjust(AXIS_WIDTH) if label is not None else " " * AXIS_WIDTH)
        text.stylize("dim")
        for char, style in zip(grid[y], styles[y], strict=True):
            text.append(char, style)
        out.append(text)
    axis = f"experiment 1{'':>{max(canvas_w - 13 - len(str(n)), 1)}}{n}"
    out.append(Text(" " * AXIS_WIDTH + axis, style="dim"))
    return out


class BestChart(Widget):
    """The running best val bpb over experiments (see `chart_lines`)."""

    DEFAULT_CSS = "BestChart { height: 9; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.rows: list[LogRow] = []

    def show(self, rows: list[LogRow]) -> None:
        self.rows = rows
        self.refresh()

    def render(self) -> Text:
        lines = chart_lines(self.rows, self.size.width, self.size.height)
        return Text("\n").join(lines)


def fmt_bpb(value: float | None) -> str:
    return f"{value:.4f}" if value is not None and math.isfinite(value) else "-"


class ResearchTable(DataTable[Text]):
    """The log's table; enter is the screen's `open` (a click only moves the cursor)."""

    BINDINGS = [Binding("enter", "select_cursor", "Open")]

    def action_select_cursor(self) -> None:
        if isinstance(self.screen, ResearchScreen):
            self.screen.action_open()


class ResearchScreen(Screen["ResearchChoice | None"]):
    """The newest research log under `root` (or series `name`'s)."""

    DEFAULT_CSS = """
    ResearchScreen { layout: vertical; }
    ResearchScreen #research-title { height: 1; padding: 0 1; text-style: bold; text-wrap: nowrap;
                                     text-overflow: ellipsis; }
    ResearchScreen #research-hint { height: 1; padding: 0 1; color: $text-muted; text-wrap: nowrap;
                                    text-overflow: ellipsis; }
    ResearchScreen BestChart { padding: 0 1; }
    ResearchScreen #research-table { height: 1fr; scrollbar-size-vertical: 1; }
    """

    BINDINGS = [
        Binding("enter", "open", "Open"),
        Binding("escape", "back", "Back"),
        Binding("o", "overlay", "Overlay kept"),
    ]

    def __init__(self, root: Path, name: str | None = None) -> None:
        super().__init__()
        self.root = Path(root)
        self.series = name
        self.rows: list[LogRow] = []
        self.read_once = False

    def compose(self) -> ComposeResult:
        yield Static(
            f"Research log under {self.root / 'research'}: reading...", id="research-title"
        )
        yield BestChart()
        yield Static("", id="research-hint")
        yield ResearchTable(id="research-table", cursor_type="row", zebra_stripes=True)
        yield KeyFooter()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()
        self.reread()

    def reread(self) -> None:
        """Read the log (again: a search running in the app calls this as its rows land)."""
        self.run_worker(
            self._read, name="research-read", thread=True, exit_on_error=False, exclusive=True
        )

    def _read(self) -> tuple[str, list[LogRow], int]:
        research = self.root / "research"
        if self.series is None and not any(research.glob("*/log.tsv")):
            raise ConfigError(
                f"no research log under {research} yet: cockpit ablate and cockpit research "
                "write one per series"
            )
        path = find_log(self.root, self.series)
        rows, damaged = read_log(path)
        return path.parent.name, rows, damaged

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.name != "research-read" or not event.worker.is_finished:
            return
        if not self.is_attached or event.state == WorkerState.CANCELLED:
            return
        title = self.query_one("#research-title", Static)
        if event.state == WorkerState.ERROR:
            title.update(Text(str(event.worker.error)))
        elif event.state == WorkerState.SUCCESS and event.worker.result is not None:
            name, self.rows, damaged = event.worker.result
            title.update(Text(self._title(name, damaged)))
            self.query_one(BestChart).show(self.rows)
            row = self.query_one(DataTable).cursor_row
            self._fill()
            self.query_one(DataTable).move_cursor(row=row)  # where it was, as rows land below
        self.read_once = True
        self._update_hint()

    def _title(self, name: str, damaged: int) -> str:
        kept = sum(r.status == "kept" for r in self.rows)
        best = running_best(self.rows)[-1] if self.rows else None
        text = f"Research {name}: {len(self.rows)} experiments, {kept} kept"
        text += f", best val bpb {fmt_bpb(best)}" if best is not None else ""
        return text + (f" ({damaged} damaged lines skipped)" if damaged else "")

    def _fill(self) -> None:
        """The table, its columns fitted to the screen: the note takes the room that is left."""
        table = self.query_one(DataTable)
        table.clear(columns=True)
        best = running_best(self.rows)
        cells = [
            [
                str(i + 1),
                r.change or "(baseline)",
                fmt_bpb(r.val_bpb),
                fmt_bpb(b),
                r.status + (f" {KEPT_MARK}" if r.status == "kept" else ""),
                r.note,
            ]
            for i, (r, b) in enumerate(zip(self.rows, best, strict=True))
        ]
        labels = ["#", "change", "val bpb", "best", "status", "note"]
        widths = [max([len(label)] + [len(c[k]) for c in cells]) for k, label in enumerate(labels)]
        widths[1] = min(widths[1], CHANGE_WIDTH)
        room = self.size.width - SCROLLBAR - 2 * len(labels)  # a cell's padding on each side
        widths[5] = max(room - sum(widths[:5]), len(labels[5]))
        for k, (label, width) in enumerate(zip(labels, widths, strict=True)):
            table.add_column(label, width=width, key=str(k))
        right = {0, 2, 3}
        for i, row in enumerate(cells):
            table.add_row(
                *(Text(c, justify="right" if k in right else "left", no_wrap=True, overflow="ellipsis")
                  for k, c in enumerate(row)),
                key=str(i),
            )  # fmt: skip

    def on_resize(self) -> None:
        self.query_one(KeyFooter).compact = self.size.width < COMPACT_WIDTH
        if self.read_once and self.rows:
            self._fill()

    def _cursor_row(self) -> LogRow | None:
        table = self.query_one(DataTable)
        if not self.rows or not table.row_count:
            return None
        return self.rows[min(table.cursor_row, len(self.rows) - 1)]

    def _update_hint(self) -> None:
        r = self._cursor_row()
        hint = ""
        if r is not None:
            why = f"{r.proposed_by}: {r.reason}" if r.reason else r.proposed_by
            hint = f"{r.id}: ⏎ open its run · o overlay the kept ones" + (
                f" · {why}" if why else ""
            )
        self.query_one("#research-hint", Static).update(Text(hint))

    @on(DataTable.RowHighlighted)
    def _moved(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._update_hint()

    def _run_dir(self, r: LogRow) -> Path | None:
        """The experiment's run directory as the series wrote it (a relative one from the
        working directory), None when it has none or it is gone."""
        if not r.run_dir:
            return None
        path = Path(r.run_dir)
        return path if path.is_dir() else None

    def action_open(self) -> None:
        r = self._cursor_row()
        if r is None:
            self.notify("no experiment here", severity="warning")
            return
        run_dir = self._run_dir(r)
        if run_dir is None:
            where = f" ({r.run_dir} is gone)" if r.run_dir else ""
            self.notify(
                f"{r.id} has no run directory to open{where}", severity="warning", timeout=4
            )
            return
        self.dismiss(ResearchChoice("open", [run_dir]))

    def action_overlay(self) -> None:
        kept = [d for r in self.rows if r.status == "kept" and (d := self._run_dir(r)) is not None]
        if not kept:
            self.notify("no kept experiment with a run directory to overlay", severity="warning")
            return
        unique = list({os.path.abspath(d): d for d in kept}.values())
        self.dismiss(ResearchChoice("overlay", unique))

    def action_back(self) -> None:
        self.dismiss(None)
