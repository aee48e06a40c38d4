"""How to carry on with a run whose engine is over or out of reach: the command that resumes it
(or starts it again), and what a viewer says when the engine died under it.

Torch-free, like the client that says it.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from engine.checkpoint.names import latest_checkpoint


def resume_command(run_dir: str | os.PathLike[str]) -> str:
    """The command line that resumes `run_dir` from its newest checkpoint."""
    return f"cockpit --resume {shlex.quote(os.fspath(run_dir))}"


def carry_on(run_dir: str | os.PathLike[str]) -> str:
    """The command that goes on with a run that is over, as the exit report gives it: resume
    from its newest checkpoint; with none, `--resume` is refused, so start it again from its
    own config.toml (its preset with --data and every --set it had)."""
    if latest_checkpoint(run_dir) is not None:
        return f"resume it with: {resume_command(run_dir)}"
    config = Path(run_dir, "config.toml")
    if config.is_file():
        return f"start it again with: cockpit --preset {shlex.quote(os.fspath(config))}"
    return "start a new run: cockpit --preset NAME"


def engine_gone_message(run_dir: str | os.PathLike[str]) -> str:
    """What a viewer says when its run's engine died: where, its last checkpoint, and the
    command that goes on with it (carry_on)."""
    checkpoint = latest_checkpoint(run_dir)
    saved = f"last checkpoint {checkpoint.name}" if checkpoint else "no checkpoint was saved"
    return (
        f"the engine of {os.fspath(run_dir)} is gone (killed?) without a final state; "
        f"{saved}; {carry_on(run_dir)}"
    )
