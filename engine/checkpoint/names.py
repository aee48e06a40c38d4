"""Checkpoint names in a run directory (`ckpt-STEP.pt`, a sharded `ckpt-STEP.dcp/`, `best.pt` or
`best.dcp` a link to the best), and the one listing of them. Torch-free: a viewer, `cockpit ps`,
`runs` and `serve` list checkpoints without importing torch.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# group 1: the step, which the engine pads to 8 digits (a step past 99,999,999 has more)
CHECKPOINT_NAME = re.compile(r"^ckpt-(\d+)\.(pt|dcp)$")
BEST_NAME = "best.pt"
BEST_SHARDED = "best.dcp"
SHARDED = ".dcp"
META_NAME = "meta.pt"  # in a sharded checkpoint: everything but the weights and optimizer state


def checkpoint_path(run_dir: Path, step: int, sharded: bool = False) -> Path:
    """Where the checkpoint of `step` goes in `run_dir`."""
    return run_dir / f"ckpt-{step:08d}{SHARDED if sharded else '.pt'}"


def step_of(name: str) -> int | None:
    """The step a checkpoint's file name says; None for a name that is not a checkpoint's."""
    found = CHECKPOINT_NAME.match(name)
    return int(found.group(1)) if found else None


def list_checkpoints(run_dir: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint in `run_dir`, oldest first; [] when it cannot be read."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    found = [(step, Path(run_dir, name)) for name in names if (step := step_of(name)) is not None]
    return sorted(found)


def latest_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The checkpoint of the highest step in `run_dir`; None when there is none."""
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None
