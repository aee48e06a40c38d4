"""What a viewer says about a run in another process, and what it reads to say it: the run's
newest checkpoint on disk, the command that resumes it, the text when its engine is gone, and
who this viewer is.

Torch-free (like engine.control.client): the checkpoint names are matched here, not through
engine.checkpoint.store.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import socket
from pathlib import Path

CKPT_NAME_RE = re.compile(r"^ckpt-(\d+)\.(pt|dcp)$")  # engine.checkpoint.store's names; group 1: step


def checkpoints(run_dir: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """(step, name) of every `ckpt-STEP.pt` (or sharded `.dcp`) in `run_dir`, newest first."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    found = [(int(m.group(1)), name) for name in names if (m := CKPT_NAME_RE.match(name))]
    return sorted(found, reverse=True)


def last_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The newest `ckpt-STEP.pt` in `run_dir` (by step), read from disk; None when none."""
    found = checkpoints(run_dir)
    return Path(run_dir, found[0][1]) if found else None


def viewer_name() -> str:
    """Who this viewer is, as others see it: "user@host (tty)"."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    try:
        tty = os.ttyname(0).removeprefix("/dev/")
    except OSError:
        tty = "no tty"
    return f"{user}@{socket.gethostname()} ({tty})"


def resume_command(run_dir: str | os.PathLike[str]) -> str:
    return f"cockpit --resume {shlex.quote(os.fspath(run_dir))}"


def carry_on(run_dir: str | os.PathLike[str]) -> str:
    """The command that goes on with a run that is over, as the exit report gives it: resume
    from its newest checkpoint; with none, `--resume` is refused, so start it again from its
    own config.toml (its preset with --data and every --set it had)."""
    if last_checkpoint(run_dir) is not None:
        return f"resume it with: {resume_command(run_dir)}"
    config = Path(run_dir, "config.toml")
    if config.is_file():
        return f"start it again with: cockpit --preset {shlex.quote(os.fspath(config))}"
    return "start a new run: cockpit --preset NAME"


def engine_gone_message(run_dir: str | os.PathLike[str]) -> str:
    """What a viewer says when its run's engine died: where, its last checkpoint, and the
    command that goes on with it (carry_on)."""
    checkpoint = last_checkpoint(run_dir)
    saved = f"last checkpoint {checkpoint.name}" if checkpoint else "no checkpoint was saved"
    return (
        f"the engine of {os.fspath(run_dir)} is gone (killed?) without a final state; "
        f"{saved}; {carry_on(run_dir)}"
    )
