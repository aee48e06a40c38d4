"""The runs of one cockpit session: which run a `--resume` names, and the report printed on exit.

Kept apart from the app so that what the user reads after quitting (where each run is, its newest
checkpoint, the command that resumes it) is a pure function of a few facts, tested on its own.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.events import RunState


@dataclass(frozen=True)
class SessionRun:
    """One run of this app's session, as leaving the app reports it (`format_exit_report`); a
    run directory's own record is its summary.json, the engine's RunSummary."""

    preset: str
    run_dir: str
    state: str
    step: int  # the newest step the app saw
    start_step: int  # where this session's run started (0, or the step resumed from)
    checkpoint: tuple[int, str] | None  # the newest checkpoint: (step, path)
    attached: bool = False  # the run is in another process: this app was one of its viewers
    detached: bool = False  # ... and left it going on

    @property
    def unsaved_steps(self) -> int:
        """Steps trained that no checkpoint holds."""
        saved = self.checkpoint[0] if self.checkpoint is not None else self.start_step
        return max(0, self.step - saved)


def format_exit_report(runs: Sequence[SessionRun], forced: bool = False) -> str:
    """The lines printed once the app has closed: per run its directory, newest checkpoint and
    the command that resumes it; after a forced quit, the steps that were not saved."""
    blocks = []
    for i, run in enumerate(runs):
        lines = [f"run dir: {run.run_dir}"]
        if run.attached and (run.detached or run.state not in RunState.ENDED):
            blocks.append("\n".join([*lines, *_left_running(run, forced)]))
            continue
        if run.checkpoint is not None:
            step, path = run.checkpoint
            lines.append(f"last checkpoint: {path} (step {step})")
        else:
            lines.append("no checkpoint was saved")
        lost = run.unsaved_steps
        if forced and i == len(runs) - 1 and lost:
            lines.append(
                f"quit without saving: steps {run.step - lost + 1}-{run.step} ({lost}) are lost"
            )
        if run.checkpoint is not None and run.state == RunState.FINISHED:
            # resuming a finished run only says so: the command that trains on is an extension
            lines.append(
                f"finished; to train on: cockpit --resume {shlex.quote(run.run_dir)} "
                f"--set train.max_steps={train_on_steps(run)}"
            )
        elif run.checkpoint is not None:
            lines.append(f"resume: cockpit --resume {shlex.quote(run.run_dir)}")
        elif run.start_step == 0:
            # the run's own config.toml replays it with --data and every --set it had
            replay = os.path.join(run.run_dir, "config.toml")
            preset = replay if os.path.isfile(replay) else run.preset
            lines.append(f"start again: cockpit --preset {shlex.quote(preset)}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if blocks else "no run was started"


def train_on_steps(run: SessionRun) -> int:
    """The train.max_steps the exit report suggests to train a finished run on: twice the step
    its resume starts from, the newest checkpoint's, which a resume requires max_steps to
    exceed (a branch's start step, doubled, was refused: 'finished at step 3000/600')."""
    saved = run.checkpoint[0] if run.checkpoint is not None else 0
    return 2 * max(saved, run.step, 1)


def _left_running(run: SessionRun, forced: bool) -> list[str]:
    """What a viewer that left a live run says: it goes on, and how to come back."""
    attach = f"cockpit attach {shlex.quote(run.run_dir)}"
    if forced:  # left while the stop it asked for was on its way: the run still saves
        return [
            f"left while the run was stopping (step {run.step}): it saves a checkpoint and "
            f"stops on its own; to see it end: {attach}"
        ]
    return [f"detached at step {run.step}: the run goes on ({run.state}); come back: {attach}"]


def run_dir_of(resume: Any) -> str:
    """The run directory of `--resume`'s argument (a run directory or a checkpoint in one)."""
    path = os.fspath(resume)
    return path if os.path.isdir(path) else os.path.dirname(path) or "."


def resumed_preset(resume: Any) -> str | None:
    """The preset name of the run being resumed, from its config.json; None when unreadable."""
    try:
        with open(os.path.join(run_dir_of(resume), "config.json"), encoding="utf-8") as f:
            name = json.load(f).get("name")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) and name else None
