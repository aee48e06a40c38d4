"""`cockpit runs [DIR]`: every run under a directory, live or not, newest first, as a table or JSON.

Each row comes from the run's summary.json, brought up to the end of its
metrics.jsonl: a run listed before costs a small file's read, whatever its length. The state is
the run's final state record; without one, live while an engine holds the run's lock (its step
and state then come from its control socket), else crashed. Torch-free, numpy-free and textual-free: listing runs costs an interpreter start.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.cli.options import add_runs_root_option, runs_root_problem

NAME = "runs"
HELP = "list every run (live, finished, stopped, failed or crashed) with its step, best val loss and size"
EPILOG = (
    "A run is a directory with a metrics.jsonl, up to 4 levels below DIR. Its summary.json is "
    "brought up to date (or rebuilt when missing) as it is read. `cockpit ps` lists the live "
    "runs and who watches them."
)
DEFAULT_ROOT = "runs"
MAX_DEPTH = 4  # runs/, runs/project/, runs/project/sweep/...
LIVE, CRASHED, UNREADABLE = "live", "crashed", "unreadable"
FORKED = "forked"  # a branch `cockpit fork --no-start` made, not trained yet
GAP = "  "
MIN_NAME_WIDTH = 20  # a run's name is shortened no further (then the table is wider)
# every column, in order; the optional ones give way, first to last, until the table fits: the
# first three before the run's name is shortened (None), the others before it goes below the minimum
HEADERS = ("RUN", "PRESET", "STATE", "STEP", "BEST VAL", "TOKENS", "TRAIN", "WHEN", "SIZE", "CKPT")
RIGHT_ALIGNED = {"STEP", "BEST VAL", "TOKENS", "TRAIN", "WHEN", "SIZE"}
DROP_ORDER = (("CKPT", None), ("SIZE", None), ("TOKENS", None), ("TRAIN", MIN_NAME_WIDTH),
              ("PRESET", MIN_NAME_WIDTH))  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    add_runs_root_option(parser, DEFAULT_ROOT)
    parser.add_argument(
        "--json", action="store_true",
        help="print a JSON list instead (every fact, numbers as numbers, null when unknown)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    problem = runs_root_problem("runs", args.root)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    root = Path(args.root)
    runs = list_runs(root)
    now = time.time()
    if args.json:
        print(json.dumps([r.as_json() for r in runs], indent=2))
    elif not runs:
        print(f"no runs under {args.root} (start one with `cockpit train` or `cockpit start`)")
    else:
        width = shutil.get_terminal_size((80, 24)).columns
        print("\n".join(table(runs, now, width)))
    return 0


# ---------------------------------------------------------------------------- finding runs


def list_runs(root: Path) -> list[ListedRun]:
    """Every run under `root`, newest first; one that cannot be read is a row saying why."""
    found = [list_run(d, root) for d in find_run_dirs(root)]
    return sorted(found, key=lambda r: r.sort_time, reverse=True)


def find_run_dirs(root: Path, depth: int = MAX_DEPTH) -> Iterator[Path]:
    """Directories holding a metrics.jsonl, `root` itself included; never below a run's own
    directory (its sharded checkpoints are directories too). A folder below `root` that may not
    be read is given too: it may be a run (list_run says it cannot be read)."""
    from engine.rundir import METRICS_NAME

    try:
        os.stat(root / METRICS_NAME)
        is_run = (root / METRICS_NAME).is_file()
    except FileNotFoundError:
        is_run = False
    except OSError:  # not ours to read: say so, do not pass over it in silence
        yield root
        return
    if is_run:
        yield root
        return
    if depth == 0:
        return
    try:
        children = sorted(e.path for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    except OSError:
        if depth < MAX_DEPTH:
            yield root  # a folder below DIR we may not list: perhaps a run (its row says why)
        return
    for child in children:
        yield from find_run_dirs(Path(child), depth - 1)


@dataclass(frozen=True)
class ListedRun:
    """One row: the run's summary and what only the directory can tell."""

    run_dir: Path
    name: str  # the path below DIR
    summary: dict[str, Any]  # RunSummary.to_json()
    state: str  # live, finished, stopped, failed, crashed
    size_bytes: int
    modified: float  # metrics.jsonl's mtime
    problem: str | None = None  # why the run cannot be read (its row says it; state UNREADABLE)

    @property
    def sort_time(self) -> float:
        return self.summary["started"] or self.modified

    def checkpoint_path(self) -> str | None:
        """The newest checkpoint, absolute: in the run's directory, whatever the directory the
        run was started from (its record may hold a path relative to that) or where it moved."""
        saved = self.summary["last_checkpoint"]
        if not saved or not saved["path"]:
            return None
        return os.path.join(os.path.abspath(self.run_dir), os.path.basename(str(saved["path"])))

    def as_json(self) -> dict[str, Any]:
        s = self.summary
        best, last, saved = s["best_val"], s["last_val"], s["last_checkpoint"]
        return {
            "run_dir": os.path.abspath(self.run_dir),
            "name": self.name,
            "preset": s["preset"],
            "state": self.state,
            "last_state": s["last_state"],  # the newest state record: running, paused, ...
            "step": s["step"],
            "max_steps": s["max_steps"],
            "best_val_loss": best["value"] if best else None,
            "best_val_step": best["step"] if best else None,
            "last_val_loss": last["value"] if last else None,
            "last_val_step": last["step"] if last else None,
            "tokens": s["tokens"],
            "train_time_s": round(s["train_time_s"], 3),
            "started": s["started"],
            "updated": s["updated"],
            "size_bytes": self.size_bytes,
            "last_checkpoint": self.checkpoint_path(),
            "last_checkpoint_step": saved["step"] if saved else None,
            "parent": s["parent"],
            "world_size": s["world_size"],
            "problem": self.problem,
        }


def list_run(run_dir: Path, root: Path) -> ListedRun:
    """The run in `run_dir`; one whose files cannot be read, or hold what no run writes, is
    listed as UNREADABLE with the reason (`problem`), never an error that hides the other runs
    (nothing is printed: the app lists runs too)."""
    from engine.events import RunState
    from engine.rundir import (
        METRICS_NAME,
        RunSummary,
        facts_problem,
        read_summary,
        size_on_disk,
    )

    name = run_dir.resolve().name if run_dir == root else os.path.relpath(run_dir, root)
    try:
        live = engine_holds(run_dir)
        summary = read_summary(run_dir, write_back=not live)
        problem = facts_problem(summary.facts)
        facts = summary.to_json()
        modified = (run_dir / METRICS_NAME).stat().st_mtime
        if live and problem is None:
            facts = with_greeting(run_dir, facts)
            problem = facts_problem(facts)
    except OSError as e:
        problem = f"cannot read it ({e.strerror or e})"
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as e:
        problem = f"its files hold what no run writes ({type(e).__name__}: {e})"
    if problem is not None:
        empty = RunSummary().to_json()
        return ListedRun(run_dir, name, empty, UNREADABLE, size_on_disk(run_dir), 0.0, problem)
    final = facts["last_state"] if facts["last_state"] in RunState.ENDED else None
    parent = facts["parent"]  # a branch's records up to its fork are its parent's, all older
    untrained = bool(parent and parent["time"]) and (facts["updated"] or 0) <= parent["time"]
    state = LIVE if live else FORKED if untrained else final or CRASHED
    return ListedRun(run_dir, name, facts, state, size_on_disk(run_dir), modified)


def with_greeting(run_dir: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """A live run's step and state as its control socket says them now: its metrics file may
    hold a second of steps back, its summary a few seconds."""
    from engine.control import probe

    greeting = probe(run_dir)
    if greeting is None:
        return summary  # still starting, or stopped (ctrl+z): the files' word stands
    return {**summary, "step": max(summary["step"], greeting.step), "last_state": greeting.state}


def engine_holds(run_dir: Path) -> bool:
    """A live engine holds the run's lock (the kernel drops it when the process goes)."""
    from engine.config import ConfigError
    from engine.rundir import check_not_in_use

    try:
        check_not_in_use(run_dir)
    except ConfigError:
        return True
    return False


# ---------------------------------------------------------------------------- the table


def fmt_ago(seconds: float | None) -> str:
    """'just now', '42s ago', '5m ago', '2h ago', '3d ago', '14w ago'."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    for unit, size in (("w", 7 * 86_400), ("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            return f"{s // size}{unit} ago"
    return "just now"


def fmt_best(summary: dict[str, Any]) -> str:
    """'2.576@300': the best val loss and its step."""
    from cockpit.figures.numbers import fmt_loss, fmt_tick

    best = summary["best_val"]
    return "-" if best is None else f"{fmt_loss(best['value'])}@{fmt_tick(best['step'])}"


def fmt_size(n: int) -> str:
    """'812K', '1.2G': a listing's size, short."""
    for unit, scale in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            v = n / scale
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return f"{n}B"


def family_name(listed: ListedRun) -> str:
    """A branch names its parent and the step it left it at: `child <- parent@3000`."""
    parent = listed.summary.get("parent")
    if not parent:
        return listed.name
    return f"{listed.name} <- {os.path.basename(parent['run'])}@{parent['step']}"


def row(listed: ListedRun, now: float) -> dict[str, str]:
    from cockpit.cli.ps import fmt_steps, fmt_uptime, printable
    from cockpit.figures.numbers import fmt_si

    s = listed.summary
    saved = s["last_checkpoint"]
    if listed.problem is not None:  # what is wrong follows the state (table, problem_line)
        return {**dict.fromkeys(HEADERS, "-"), "RUN": printable(listed.name), "STATE": listed.state}
    return {
        "RUN": printable(family_name(listed)),
        "PRESET": printable(s["preset"] or "-"),
        "STATE": listed.state,
        "STEP": fmt_steps(s["step"], s["max_steps"]),
        "BEST VAL": fmt_best(s),
        "TOKENS": fmt_si(s["tokens"]) if s["tokens"] else "-",
        "TRAIN": fmt_uptime(s["train_time_s"]) if s["train_time_s"] else "-",
        "WHEN": fmt_ago(None if s["started"] is None else now - s["started"]),
        "SIZE": fmt_size(listed.size_bytes),
        "CKPT": printable(os.path.basename(str(saved["path"]))) if saved and saved["path"] else "-",
    }


def table(runs: Sequence[ListedRun], now: float, width: int = 80) -> list[str]:
    """A header and one row per run, no wider than `width`: the checkpoint, size and tokens give
    way before a run's name is shortened (in the middle: its preset and its date both stay),
    the training time and preset after."""
    rows = [row(r, now) for r in runs]
    columns, widths = fit_columns(rows, width)
    lines = [_line({h: h for h in columns}, columns, widths)]
    for listed, cells in zip(runs, rows, strict=True):
        cells["RUN"] = shorten_run_name(cells["RUN"], widths["RUN"])
        if listed.problem is not None:
            lines.append(problem_line(cells, columns, widths, listed.problem, width))
        else:
            lines.append(_line(cells, columns, widths))
    return lines


def problem_line(
    cells: dict[str, str], columns: list[str], widths: dict[str, int], problem: str, width: int
) -> str:
    """An unreadable run's row: its name and state as every row has them, then what is wrong
    in place of the figures it does not have."""
    from cockpit.cli.ps import printable

    upto = columns[: columns.index("STATE") + 1]
    start = _line(cells, upto, widths) + GAP
    text = printable(problem)
    room = max(width - len(start), 30)
    return start + (text if len(text) <= room else text[: room - 3] + "...")


def fit_columns(rows: Sequence[dict[str, str]], width: int) -> tuple[list[str], dict[str, int]]:
    """The columns kept and each one's width (the name's, shortened) for `rows` to fit in `width`
    characters, a GAP between columns; the runs screen fits its table with it too."""
    columns = list(HEADERS)
    widths = {h: max(len(h), *(len(r[h]) for r in rows)) for h in HEADERS}
    full_name = widths["RUN"]

    def excess(name_width: int) -> int:
        others = sum(widths[h] for h in columns if h != "RUN")
        return others + name_width + len(GAP) * (len(columns) - 1) - width

    for header, name_floor in DROP_ORDER:
        if excess(min(full_name, name_floor or full_name)) <= 0:
            break
        columns.remove(header)
    widths["RUN"] = max(min(full_name, MIN_NAME_WIDTH), full_name - max(0, excess(full_name)))
    return columns, widths


def shorten_run_name(text: str, width: int) -> str:
    """A RUN cell in `width` characters: a branch's `child <- parent@STEP` keeps its ` <- ` and
    `@STEP` whatever the width (the child's name and the parent's are shortened instead)."""
    child, arrow, parent = text.rpartition(" <- ")
    base, at, step = parent.rpartition("@")
    if len(text) <= width or not arrow or not at:
        return shorten_middle(text, width)
    room = max(2, width - len(arrow) - len(at + step))  # for both names
    parent_width = min(len(base), max(1, room // 3))
    child_width = max(1, room - parent_width)
    if len(child) < child_width:  # a short child leaves the rest to the parent
        parent_width, child_width = min(len(base), parent_width + child_width - len(child)), len(child)
    return f"{shorten_middle(child, child_width)}{arrow}{shorten_middle(base, parent_width)}{at}{step}"


def shorten_middle(text: str, width: int) -> str:
    """`text` in `width` characters, its middle cut: 'shakespear...0-213600'."""
    if len(text) <= width:
        return text
    if width <= 3:
        return text[len(text) - width :]
    tail = (width - 3) // 2 + (width - 3) % 2
    return text[: width - 3 - tail] + "..." + text[len(text) - tail :]


def _line(cells: dict[str, str], columns: list[str], widths: dict[str, int]) -> str:
    padded = [
        cells[h].rjust(widths[h]) if h in RIGHT_ALIGNED else cells[h].ljust(widths[h])
        for h in columns
    ]
    return GAP.join(padded).rstrip()
