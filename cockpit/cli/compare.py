"""`cockpit compare RUN RUN ...`: the app on the first run, the others' loss curves over it.

The first run is opened as the runs screen opens one: attached to while it is live (steer it as
usual), else in a read-only view drawn from its files. Each other run is overlaid in a colour
of its own, with a legend of its loss at the first run's step and the difference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cockpit.cli.options import add_notify_options

NAME = "compare"
HELP = "open the cockpit on a run with other runs' loss curves overlaid (live or finished)"
EPILOG = (
    "Example: cockpit compare runs/tiny-20260101-120000 runs/tiny-20260102-090000. In the app, "
    "t cycles the x axis (steps, tokens, training time), m the smoothing, h lists every run. "
    "Runs of different tokenizers (char and BPE) compare by --bpb: a loss per token is not "
    "comparable across tokenizers, bits per byte of text are."
)
MAX_OVERLAYS = 8  # more lines than this on one small plot are no longer told apart


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "runs", nargs="+", metavar="RUN_DIR", help="run directories; the first is the one shown, the others are overlaid"
    )
    parser.add_argument(
        "--runs", dest="runs_root", default="runs", metavar="DIR", help="where the runs screen (h) looks (default: runs)"
    )
    parser.add_argument(
        "--bpb", action="store_true",
        help="draw the losses in bits per byte of text (loss / ln 2 * tokens / bytes of the split), "
        "comparable across tokenizers; runs recorded before bits per byte are left out",
    )  # fmt: skip
    parser.add_argument(
        "--no-mouse", action="store_true", help="turn off mouse tracking (saves bandwidth over slow SSH links)"
    )
    add_notify_options(parser)


def problem(runs: list[str]) -> str | None:
    """The one line why these cannot be compared, or None."""
    from engine.rundir import METRICS_NAME

    for run in runs:
        path = Path(run)
        if not path.exists():
            return f"{run}: no such run directory; `cockpit runs` lists them"
        if not (path / METRICS_NAME).is_file():
            return f"{run}: not a run directory (no {METRICS_NAME}); `cockpit runs` lists them"
    unique = {str(Path(r).resolve()) for r in runs}
    if len(unique) < len(runs):
        return "a run is named twice; name each run once"
    if len(runs) > MAX_OVERLAYS + 1:
        return f"{len(runs)} runs: compare at most {MAX_OVERLAYS + 1} at once"
    return None


def run(args: argparse.Namespace) -> int:
    from cockpit.cli.terminal import no_app_here

    why = problem(args.runs)
    no_app = no_app_here() if why is None else None
    if no_app is not None:
        why = f"{no_app.reason}: cannot open the app here; {no_app.fix} (`cockpit runs --json` for scripts)"
    if why is not None:
        print(f"cockpit compare: {why}", file=sys.stderr)
        return 2
    from cockpit.app.run_opening import open_engine
    from cockpit.cli.launch import run_app, train_arguments

    first = Path(args.runs[0])
    try:
        engine = open_engine(first)
    except Exception as e:  # noqa: BLE001 - unreachable socket, unreadable files: one line
        print(f"cockpit compare: {e}", file=sys.stderr)
        return 2
    train = train_arguments(
        preset=first.resolve().name,
        no_mouse=args.no_mouse,
        bell=args.bell,
        no_notify=args.no_notify,
    )
    from engine.rundir import run_tokenizer

    return run_app(
        train,
        first_engine=lambda: engine,
        overlays=args.runs[1:],
        runs_root=args.runs_root,
        loss_unit="bpb" if args.bpb else "loss",
        current_tokenizer=run_tokenizer(first),
    )
