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


def last_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The newest `ckpt-STEP.pt` in `run_dir` (by step), read from disk; None when none."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return None
    steps = [(int(m.group(1)), name) for name in names if (m := CKPT_NAME_RE.match(name))]
    return Path(run_dir, max(steps)[1]) if steps else None


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
