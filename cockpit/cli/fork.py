"""`cockpit fork RUN_DIR[/ckpt-N.pt] --set ...`: a new run that branches from a checkpoint,
then resumed with the changed settings (what a resume may change: the LR and its schedule, the
batch and accumulation, optimizer hyperparameters...), in the app or headless."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cockpit.cli.options import add_set_option

NAME = "fork"
HELP = "start a new run from one of a run's checkpoints with changed settings (a branch)"
EPILOG = (
    "Example: cockpit fork runs/tiny-20260101-120000/ckpt-00003000.pt --set optim.lr=1e-4 "
    "(a run directory: its newest checkpoint). The branch trains in the app, or --headless."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "target", metavar="RUN_DIR|CKPT", help="the checkpoint to branch from (a run directory: its newest)"
    )
    add_set_option(parser, example="optim.lr=1e-4")
    parser.add_argument(
        "--run-dir", metavar="DIR", help="the branch's directory (default: beside the parent, PARENT-fork-STEP-TIME)"
    )
    parser.add_argument("--headless", action="store_true", help="train the branch without the app")
    parser.add_argument("--no-start", action="store_true", help="make the branch, do not train it")
    parser.add_argument("--no-telemetry", action="store_true", help="do not poll GPU/CPU telemetry")


def carried(branch: Path) -> str:
    """", with the changes made before it: step 7 optim.weight_decay=0.0, ..." (or nothing)."""
    from engine.rundir import carried_changes

    made = []
    for change in carried_changes(branch):
        settings = change.get("settings")
        if isinstance(settings, dict):
            values = ", ".join(f"{key}={value!r}" for key, value in settings.items())
            made.append(f"step {change.get('step')} {values}")
    return f", with the changes made before it: {'; '.join(made)}" if made else ""


def run(args: argparse.Namespace) -> int:
    from engine.config import ConfigError
    from engine.rundir import ForkError, make_fork

    def damaged(message: str) -> None:
        print(f"cockpit fork: warning: {message}", file=sys.stderr)

    try:
        branch, checkpoint = make_fork(Path(args.target), args.overrides, args.run_dir, damaged)
    except (ForkError, ConfigError) as e:
        print(f"cockpit fork: {e}", file=sys.stderr)
        return 2
    print(f"branch {branch} from {checkpoint}{carried(branch)}", file=sys.stderr)
    if args.no_start:
        print(f"train it: cockpit --resume {branch}")
        return 0
    from cockpit.cli.launch import train, train_arguments
    from cockpit.cli.stop_signals import StopSignals

    # fork.json's --set apply (branch_overrides)
    branch_args = train_arguments(
        resume=str(branch), no_telemetry=args.no_telemetry, headless=args.headless
    )
    signals = StopSignals()
    signals.install()
    try:
        return train(branch_args, signals)
    finally:
        signals.restore()
