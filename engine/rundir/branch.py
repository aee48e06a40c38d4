"""A branch: a run directory of its own beside its parent, made from one of the parent's
checkpoints. The checkpoint is linked in (no copy of the weights), `fork.json` names the parent,
its checkpoint, its step, the branch's --set and the changes of settings the parent made up to
that checkpoint (which the branch goes on with: the checkpoint holds them), and the parent's
records up to that step are copied, so every view draws the branch's curves as the
continuation of the parent's. The parent is never touched."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.config.run_config import ConfigError
from engine.config.user_files import read_small_text
from engine.files import atomic_write_text, create_new

FORK_FILE = "fork.json"


class ForkError(Exception):
    """The one line why a fork cannot be made (exit 2)."""


class NothingToTrain(ForkError):
    """The checkpoint is at the run's max_steps and the settings do not raise it."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


def make_fork(
    target: Path,
    overrides: list[str],
    run_dir: str | None,
    on_damaged: Callable[[str], None] | None = None,
) -> tuple[Path, Path]:
    """Make the branch directory; returns (branch, the parent's checkpoint it starts from).
    `on_damaged` gets the one line about the parent's records that are not text (read past)."""
    from engine.checkpoint import CheckpointError, load_checkpoint, plan_resume
    source = _checkpoint_of(target)
    try:
        state = load_checkpoint(source, mmap=True)  # the weights are not read
    except CheckpointError as e:
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
    branch = _make_branch_dir(parent, step, run_dir)
    try:
        _link(source, branch / source.name)
        _copy_history(parent / "metrics.jsonl", branch / "metrics.jsonl", step, on_damaged)
        record = {"parent": str(parent.resolve()), "checkpoint": source.name, "step": step,
                  "overrides": list(overrides), "time": time.time(),
                  "settings_changes": list(state.get("settings_changes") or [])}  # fmt: skip
        atomic_write_text(branch / FORK_FILE, json.dumps(record, indent=2))
    except OSError as e:  # a read-only or full disk: nothing half-made is left to list
        shutil.rmtree(branch, ignore_errors=True)
        where = "--run-dir" if run_dir else "beside the parent (or give --run-dir)"
        raise ForkError(
            f"cannot make {branch}: {e.strerror or e}; pick a writable place {where}"
        ) from None
    return branch, source


def _make_branch_dir(parent: Path, step: int, run_dir: str | None) -> Path:
    """The branch's directory, made private as a run's (engine.rundir.layout): at --run-dir,
    which must not exist (a link included), or beside the parent, where a name taken (a link
    another user planted at the predictable name) gives way to NAME.2, NAME.3..."""
    from engine.rundir.layout import create_free_run_dir, create_run_dir

    try:
        if not run_dir:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            return create_free_run_dir(parent.with_name(f"{parent.name}-fork-{step}-{stamp}"))
        branch = Path(run_dir)
        if os.path.lexists(branch):
            raise ForkError(f"{branch} exists already; pick another with --run-dir")
        create_run_dir(branch)
        return branch
    except ConfigError as e:  # not a safe place for a run: one line, nothing made
        raise ForkError(str(e)) from None


def branch_overrides(resume: Path) -> list[str]:
    """The --set of `cockpit fork` that made the run `resume` names (a run directory or one of
    its checkpoints), while what it resumes from is still the checkpoint the branch was made
    from: so `cockpit --resume BRANCH` (printed by --no-start, or `r` in the app) trains the
    branch with its own settings, not its parent's. Once the branch has saved a checkpoint of
    its own, that checkpoint's config holds them: nothing to add. [] for any other run."""
    from engine.checkpoint import is_sharded, latest_checkpoint
    run_dir = resume if resume.is_dir() and not is_sharded(resume) else resume.parent
    try:
        fork = json.loads(read_small_text(run_dir / FORK_FILE, "a fork record"))
        inherited, overrides = fork["checkpoint"], fork.get("overrides", [])
    except (OSError, ValueError, KeyError, TypeError):
        return []  # not a branch (or its fork.json is unreadable: the checkpoint's config rules)
    from_checkpoint = latest_checkpoint(run_dir) if run_dir == resume else resume
    if from_checkpoint is None or from_checkpoint.name != inherited:
        return []
    return [o for o in overrides if isinstance(o, str)] if isinstance(overrides, list) else []


def carried_changes(branch: Path) -> list[dict[str, Any]]:
    """The changes of settings a branch goes on with (its fork.json's; [] when unreadable)."""
    try:
        fork = json.loads(read_small_text(branch / FORK_FILE, "a fork record"))
    except (OSError, ValueError):
        return []
    changes = fork.get("settings_changes") if isinstance(fork, dict) else None
    return [c for c in changes if isinstance(c, dict)] if isinstance(changes, list) else []


def _checkpoint_of(target: Path) -> Path:
    from engine.checkpoint import is_sharded, latest_checkpoint
    if not target.exists():
        raise ForkError(f"{target}: no such run directory or checkpoint")
    if target.is_dir() and not is_sharded(target):
        newest = latest_checkpoint(target)
        if newest is None:
            raise ForkError(f"{target}: no checkpoint to branch from (ckpt-*.pt)")
        return newest
    return target


def _link(source: Path, target: Path) -> None:
    """The checkpoint in the branch without a copy (hard links; a copy where they fail, and of
    another user's file: a link to it would stay theirs to rewrite under the branch)."""
    def link(a: Any, b: Any) -> None:
        if os.stat(a).st_uid == os.geteuid():
            try:
                os.link(a, b)
                return
            except OSError:
                pass  # another file system: copied
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
    from engine.rundir.metrics_log import read_records

    if not parent_metrics.exists():
        return
    with io.TextIOWrapper(create_new(branch_metrics), encoding="utf-8") as out:
        for record in read_records(parent_metrics, on_damaged):
            at = record.get("step")
            if record.get("kind") == "run_started" or (isinstance(at, int) and at <= step):
                out.write(json.dumps(record, separators=(",", ":")) + "\n")  # as the writer does
