"""What a viewer says about a run in another process, and what it reads to say it: the run's
newest checkpoint on disk, the command that resumes it, the text when its engine is gone, and
who this viewer is.

Torch-free (like engine.remote): the checkpoint names are matched here, not through
engine.checkpoint.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import socket
from pathlib import Path

CKPT_NAME_RE = re.compile(r"^ckpt-(\d+)\.(pt|dcp)$")  # engine.checkpoint's names; group 1: step


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


def engine_gone_message(run_dir: str | os.PathLike[str]) -> str:
    """What a viewer says when its run's engine died: where, its last checkpoint, how to resume."""
    checkpoint = last_checkpoint(run_dir)
    saved = f"last checkpoint {checkpoint.name}" if checkpoint else "no checkpoint was saved"
    return (
        f"the engine of {os.fspath(run_dir)} is gone (killed?) without a final state; "
        f"{saved}; resume it with: {resume_command(run_dir)}"
    )
