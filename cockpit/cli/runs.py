"""`cockpit runs [DIR]`: every run under a directory, live or not, newest first, as a table or JSON.

Torch-free, numpy-free and textual-free: listing runs costs an interpreter start.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from cockpit.cli.options import add_runs_root_option, runs_root_problem
from cockpit.figures.run_table import table
from engine.rundir import list_runs

NAME = "runs"
HELP = "list every run (live, finished, stopped, failed or crashed) with its step, best val loss, bits per byte and size"
EPILOG = (
    "A run is a directory with a metrics.jsonl, up to 4 levels below DIR. Its summary.json is "
    "brought up to date (or rebuilt when missing) as it is read. `cockpit ps` lists the live "
    "runs and who watches them."
)
DEFAULT_ROOT = "runs"


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
