"""`cockpit ps [DIR]`: the live runs under a directory, newest first, as a table or as JSON.

A run is live when its control socket greets; each row is what that
greeting says: preset, state, step, loss, tokens/s, how long this session has run, and who
else is attached. Torch-free and textual-free: listing runs costs an interpreter start, no more.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cockpit.cli.options import add_runs_root_option, runs_root_problem
from cockpit.figures.run_table import aligned_line, fmt_steps, fmt_uptime, printable

NAME = "ps"
HELP = (
    "list the live runs (in the app, headless or started with `cockpit start`) and who is attached"
)
EPILOG = (
    "A run is live while its control socket answers; a socket left by a killed run is skipped, "
    "one served by another user is refused (said on stderr). "
    "`cockpit attach RUN_DIR` opens the app on one of them."
)
DEFAULT_ROOT = "runs"
# WHO: how many viewers are attached; each is named on a line below its run's row
HEADERS = ("RUN", "PRESET", "STATE", "STEP", "LOSS", "TOK/S", "UP", "WHO")
RIGHT_ALIGNED = {"STEP", "LOSS", "TOK/S", "UP"}
GAP = "  "  # between columns
# the columns that give way, first to last, when a row is wider than the terminal: the count of
# viewers (each is named below the row anyway), the session's age, its speed, its preset
DROP_ORDER = ("WHO", "UP", "TOK/S", "PRESET")
VIEWER_INDENT = "  - "  # each attached viewer on a line of its own below its run's row


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    add_runs_root_option(parser, DEFAULT_ROOT)
    parser.add_argument(
        "--json", action="store_true",
        help="print a JSON list instead (numbers as numbers, null when unknown)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from engine.control import find_live_runs

    problem = runs_root_problem("ps", args.root)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    root = Path(args.root)
    refused: list[str] = []  # sockets served by another uid: not listed, but said
    runs = find_live_runs(root, refused=refused)
    for line in refused:
        print(f"cockpit ps: {line}", file=sys.stderr)
    now = time.time()
    if args.json:
        print(json.dumps([as_json(live, now) for live in runs], indent=2))
    elif not runs:
        print(f"no live runs under {args.root} (start one with `cockpit start`)")
    else:
        width = shutil.get_terminal_size((80, 24)).columns
        print("\n".join(table(runs, now, width)))
    return 0


# ---------------------------------------------------------------------------- the facts


def uptime_s(live: Any, now: float) -> float | None:
    """Seconds since the run's session started (None while it is still starting)."""
    return None if live.started is None else max(0.0, now - live.started)


def viewer_label(viewer: dict[str, Any]) -> str:
    """'alice@gpu1 (pts/3)', 'viewer 4' for one that gave no name; ', read-only' when it is."""
    who = viewer.get("who")
    name = who if isinstance(who, str) and who.strip() else f"viewer {viewer.get('viewer', '?')}"
    return printable(f"{name}, read-only" if viewer.get("read_only") else name)


def as_json(live: Any, now: float) -> dict[str, Any]:
    """One live run for --json: the table's facts, unrounded, null when unknown."""
    up = uptime_s(live, now)
    return {
        "run_dir": os.path.abspath(live.run_dir),  # usable from any directory
        "pid": live.pid,
        "preset": live.preset,
        "state": live.state,
        "step": live.step,
        "max_steps": live.max_steps,
        "loss": live.loss,
        "tokens_per_s": live.tokens_per_s,
        "step_time_s": live.step_time_s,
        "started": live.started,
        "uptime_s": None if up is None else round(up, 3),
        "viewers": [
            {
                "viewer": v.get("viewer"),
                "who": v.get("who") or None,
                "read_only": bool(v.get("read_only")),
            }
            for v in live.viewers
        ],
    }


# ---------------------------------------------------------------------------- the table


def row(live: Any, now: float) -> dict[str, str]:
    from cockpit.figures.numbers import fmt_loss, fmt_si

    return {
        "RUN": printable(display_path(live.run_dir)),
        "PRESET": printable(live.preset or "-"),
        "STATE": printable(live.state),
        "STEP": fmt_steps(live.step, live.max_steps),
        "LOSS": fmt_loss(live.loss),
        "TOK/S": fmt_si(live.tokens_per_s),
        "UP": fmt_uptime(uptime_s(live, now)),
        "WHO": str(len(live.viewers)) if live.viewers else "-",
    }


def display_path(path: Path) -> str:
    """The shorter of `path` relative to the working directory and absolute (home as ~)."""
    absolute = os.path.abspath(path)
    candidates = [os.path.relpath(absolute)]
    home = os.path.expanduser("~")
    if home not in ("", "/") and absolute.startswith(home + os.sep):
        candidates.append("~" + absolute[len(home) :])
    candidates.append(absolute)
    return min(candidates, key=len)


def fit_columns(widths: dict[str, int], width: int) -> list[str]:
    """The columns kept for rows of these column widths to fit in `width`: the optional ones
    give way in DROP_ORDER; when the rest is still too wide, the rows are wider than `width`."""
    columns = list(HEADERS)
    for header in DROP_ORDER:
        if sum(widths[h] for h in columns) + len(GAP) * (len(columns) - 1) <= width:
            break
        columns.remove(header)
    return columns


def table(runs: Sequence[Any], now: float, width: int = 80) -> list[str]:
    """The listing's lines: a header, one row per run, its viewers on lines below it. A run's
    directory is never cut: it is what `cockpit attach`, `--resume` and `compare` are given, and
    a path cut short cannot be copied; the optional columns give way first, then the row is
    wider than `width`."""
    rows = [row(live, now) for live in runs]
    widths = {h: max(len(h), *(len(r[h]) for r in rows)) for h in HEADERS}
    columns = fit_columns(widths, width)
    lines = [aligned_line({h: h for h in HEADERS}, columns, widths, RIGHT_ALIGNED)]
    for live, cells in zip(runs, rows, strict=True):
        lines.append(aligned_line(cells, columns, widths, RIGHT_ALIGNED))
        lines.extend(VIEWER_INDENT + viewer_label(v) for v in live.viewers)
    return lines
