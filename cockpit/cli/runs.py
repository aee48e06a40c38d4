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
    "runs and who watches them. With --since: DIR is one run, and what it did in that time is "
    "printed instead (steps and tokens, evaluations, alerts and what was done, settings changed "
    "and by whom, checkpoints): the digest a viewer gets on attaching after a while away."
)
DEFAULT_ROOT = "runs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    add_runs_root_option(parser, DEFAULT_ROOT)
    parser.add_argument(
        "--json", action="store_true",
        help="print JSON instead: a list of the runs, or with --since the digest (every fact, numbers as numbers, null when unknown)",
    )  # fmt: skip
    parser.add_argument(
        "--since", metavar="DURATION",
        help="what the run in DIR did in the last DURATION (90s, 30m, 8h, 2d): a digest, not the list",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    problem = runs_root_problem("runs", args.root)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    if args.since is not None:
        return print_digest(Path(args.root), args.since, args.json)
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


def print_digest(run_dir: Path, since: str, as_json: bool) -> int:
    """The digest of what the run in `run_dir` did in the last `since`."""
    from engine.rundir import METRICS_NAME, digest_lines, parse_duration, read_digest

    try:
        seconds = parse_duration(since)
    except ValueError as e:
        print(f"cockpit runs: --since {e}", file=sys.stderr)
        return 2
    metrics = run_dir / METRICS_NAME
    if not metrics.is_file():
        print(
            f"cockpit runs: {run_dir} holds no run ({METRICS_NAME} missing); --since takes one run's "
            "directory: cockpit runs RUN_DIR --since 8h",
            file=sys.stderr,
        )
        return 2
    now = time.time()
    found = read_digest(metrics, now - seconds)
    if as_json:
        print(json.dumps({"run_dir": str(run_dir), **found.as_json()}, indent=2))
    else:
        print("\n".join([str(run_dir), *digest_lines(found, now)]))
    return 0
