"""`cockpit fork RUN_DIR[/ckpt-N.pt] --set ...`: a new run that branches from a checkpoint.

The branch is a run directory of its own beside its parent: the checkpoint linked in (no copy
of the weights), `fork.json` naming the parent, its checkpoint and step, and the parent's
records up to that step, so every view draws the branch's curves as the continuation of the
parent's. Then it is resumed with the changed settings (what a resume may change: the LR and
its schedule, the batch and accumulation, optimizer hyperparameters...), in the app or headless.
The parent is never touched.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cockpit.cli.options import add_set_option
from engine.files import DIR_MODE, atomic_write_text, create_new

NAME = "fork"
HELP = "start a new run from one of a run's checkpoints with changed settings (a branch)"
EPILOG = (
    "Example: cockpit fork runs/tiny-20260101-120000/ckpt-00003000.pt --set optim.lr=1e-4 "
    "(a run directory: its newest checkpoint). The branch trains in the app, or --headless."
)
FORK_FILE = "fork.json"


class ForkError(Exception):
    """The one line why a fork cannot be made (exit 2)."""


class NothingToTrain(ForkError):
    """The checkpoint is at the run's max_steps and the settings do not raise it."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


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


def run(args: argparse.Namespace) -> int:
    from engine.config import ConfigError

    def damaged(message: str) -> None:
        print(f"cockpit fork: warning: {message}", file=sys.stderr)

    try:
        branch, checkpoint = make_fork(Path(args.target), args.overrides, args.run_dir, damaged)
    except (ForkError, ConfigError) as e:
        print(f"cockpit fork: {e}", file=sys.stderr)
        return 2
    print(f"branch {branch} from {checkpoint}", file=sys.stderr)
    if args.no_start:
        print(f"train it: cockpit --resume {branch}")
        return 0
    from cockpit.cli.entry import main

    argv = ["train", "--resume", str(branch)]  # fork.json's --set apply (branch_overrides)
    if args.no_telemetry:
        argv.append("--no-telemetry")
    return main([*argv, "--headless"] if args.headless else argv)


def make_fork(
    target: Path,
    overrides: list[str],
    run_dir: str | None,
    on_damaged: Callable[[str], None] | None = None,
) -> tuple[Path, Path]:
    """Make the branch directory; returns (branch, the parent's checkpoint it starts from).
    `on_damaged` gets the one line about the parent's records that are not text (read past)."""
    from engine.checkpoint import plan_resume
    from engine.checkpoint import store as ckpt
    source = _checkpoint_of(target)
    try:
        state = ckpt.load_checkpoint(source, mmap=True)  # the weights are not read
    except ckpt.CheckpointError as e:
        raise ForkError(str(e)) from None
    step = int(state["step"])
    plan = plan_resume(state, overrides, str(source), label=str(source))  # refused: one line
    if plan.finished is not None:  # before anything is made: a branch with nothing to train
        raise NothingToTrain(
            f"{source.name} is at step {step}, the run's max_steps: the branch would train "
            f"nothing; raise it too, e.g. --set train.max_steps={2 * step}",
            step,
        )
    parent = source.parent
    branch = Path(run_dir) if run_dir else parent.with_name(
        f"{parent.name}-fork-{step}-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    if branch.exists():
        raise ForkError(f"{branch} exists already; pick another with --run-dir")
    made = False
    try:
        branch.mkdir(mode=DIR_MODE, parents=True)  # never 0777, whatever the umask
        made = True
        _link(source, branch / source.name)
        _copy_history(parent / "metrics.jsonl", branch / "metrics.jsonl", step, on_damaged)
        record = {"parent": str(parent.resolve()), "checkpoint": source.name, "step": step,
                  "overrides": list(overrides), "time": time.time()}  # fmt: skip
        atomic_write_text(branch / FORK_FILE, json.dumps(record, indent=2))
    except OSError as e:  # a read-only or full disk: nothing half-made is left to list
        if made:
            shutil.rmtree(branch, ignore_errors=True)
        where = "--run-dir" if run_dir else "beside the parent (or give --run-dir)"
        raise ForkError(
            f"cannot make {branch}: {e.strerror or e}; pick a writable place {where}"
        ) from None
    return branch, source


def branch_overrides(resume: Path) -> list[str]:
    """The --set of `cockpit fork` that made the run `resume` names (a run directory or one of
    its checkpoints), while what it resumes from is still the checkpoint the branch was made
    from: so `cockpit --resume BRANCH` (printed by --no-start, or `r` in the app) trains the
    branch with its own settings, not its parent's. Once the branch has saved a checkpoint of
    its own, that checkpoint's config holds them: nothing to add. [] for any other run."""
    from engine.checkpoint import store as ckpt
    run_dir = resume if resume.is_dir() and not ckpt.is_sharded(resume) else resume.parent
    try:
        fork = json.loads((run_dir / FORK_FILE).read_text(encoding="utf-8"))
        inherited, overrides = fork["checkpoint"], fork.get("overrides", [])
    except (OSError, ValueError, KeyError, TypeError):
        return []  # not a branch (or its fork.json is unreadable: the checkpoint's config rules)
    from_checkpoint = ckpt.latest_checkpoint(run_dir) if run_dir == resume else resume
    if from_checkpoint is None or from_checkpoint.name != inherited:
        return []
    return [o for o in overrides if isinstance(o, str)] if isinstance(overrides, list) else []


def _checkpoint_of(target: Path) -> Path:
    from engine.checkpoint import store as ckpt
    if not target.exists():
        raise ForkError(f"{target}: no such run directory or checkpoint")
    if target.is_dir() and not ckpt.is_sharded(target):
        newest = ckpt.latest_checkpoint(target)
        if newest is None:
            raise ForkError(f"{target}: no checkpoint to branch from (ckpt-*.pt)")
        return newest
    return target


def _link(source: Path, target: Path) -> None:
    """The checkpoint in the branch without a copy (hard links; a copy where they fail)."""
    def link(a: Any, b: Any) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    if source.is_dir():  # a sharded checkpoint
        shutil.copytree(source, target, copy_function=link)
    else:
        link(source, target)


def _copy_history(
    parent_metrics: Path, branch_metrics: Path, step: int, on_damaged: Callable[[str], None] | None
) -> None:
    """The parent's records up to `step` (and its run_started), so the branch's curves begin
    where the parent's were; streamed, record by record (a line cut or damaged is read past)."""
    from engine.rundir import read_records

    if not parent_metrics.exists():
        return
    with io.TextIOWrapper(create_new(branch_metrics), encoding="utf-8") as out:
        for record in read_records(parent_metrics, on_damaged):
            at = record.get("step")
            if record.get("kind") == "run_started" or (isinstance(at, int) and at <= step):
                out.write(json.dumps(record, separators=(",", ":")) + "\n")  # as the writer does
