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
from cockpit.figures.run_table import fmt_steps, fmt_uptime, printable

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
MIN_RUN_WIDTH = 16  # a run directory is shortened to fit the width, never below this
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






def row(live: Any, now: float, run_name: str) -> list[str]:
    from cockpit.figures.numbers import fmt_loss, fmt_si

    return [
        run_name,
        printable(live.preset or "-"),
        printable(live.state),
        fmt_steps(live.step, live.max_steps),
        fmt_loss(live.loss),
        fmt_si(live.tokens_per_s),
        fmt_uptime(uptime_s(live, now)),
        str(len(live.viewers)) if live.viewers else "-",
    ]


def display_path(path: Path) -> str:
    """The shorter of `path` relative to the working directory and absolute (home as ~)."""
    absolute = os.path.abspath(path)
    candidates = [os.path.relpath(absolute)]
    home = os.path.expanduser("~")
    if home not in ("", "/") and absolute.startswith(home + os.sep):
        candidates.append("~" + absolute[len(home) :])
    candidates.append(absolute)
    return min(candidates, key=len)


def shorten(text: str, width: int) -> str:
    """`text` in `width` characters, its end kept (a run's name is at the end of its path)."""
    if len(text) <= width:
        return text
    return "..." + text[len(text) - width + 3 :] if width > 3 else text[len(text) - width :]


def table(runs: Sequence[Any], now: float, width: int = 80) -> list[str]:
    """The listing's lines: a header, one row per run, its viewers on lines below it. The run
    directory gives way first when the rows are wider than `width`."""
    names = [printable(display_path(live.run_dir)) for live in runs]
    rows = [row(live, now, name) for live, name in zip(runs, names, strict=True)]
    widths = [max(len(r[i]) for r in [list(HEADERS), *rows]) for i in range(len(HEADERS))]
    excess = sum(widths) + len(GAP) * (len(widths) - 1) - width
    if excess > 0:
        widths[0] = max(min(widths[0], MIN_RUN_WIDTH), widths[0] - excess)
    lines = [_line(list(HEADERS), widths)]
    for live, cells in zip(runs, rows, strict=True):
        cells[0] = shorten(cells[0], widths[0])
        lines.append(_line(cells, widths))
        lines.extend(VIEWER_INDENT + viewer_label(v) for v in live.viewers)
    return lines


def _line(cells: list[str], widths: list[int]) -> str:
    padded = [
        cell.rjust(w) if header in RIGHT_ALIGNED else cell.ljust(w)
        for cell, w, header in zip(cells, widths, HEADERS, strict=True)
    ]
    return GAP.join(padded).rstrip()
