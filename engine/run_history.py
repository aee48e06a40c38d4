"""A finished (or any) run's history read back from its files, fast enough for a million steps.

`read_curves(run_dir)` gives every step's loss with its tokens and training time, and every
eval, as numpy arrays: what an overlay of that run on another's loss curve draws. Torch-free
and textual-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


class RunHistoryError(Exception):
    """One line: why a run's history cannot be read, and what to do."""


@dataclass(frozen=True)
class RunCurves:
    """One run's loss curves, every step recorded (for a step recorded twice, after a crash and
    a resume, the later record; a resume from an older checkpoint drops the abandoned branch)."""

    run_dir: Path
    name: str  # how the run is called on screen: its directory's name
    step: np.ndarray  # int64, increasing
    tokens: np.ndarray  # float64: tokens trained on at that step
    train_s: np.ndarray  # float64: training time at that step (evaluation excluded)
    loss: np.ndarray  # float64: the train loss of that step (NaN for a NaN loss)
    val_step: np.ndarray  # int64: the steps with an eval
    val_tokens: np.ndarray  # float64
    val_train_s: np.ndarray  # float64
    val_loss: np.ndarray  # float64 (NaN for a NaN val loss)
    tokens_per_step: int
    max_steps: int
    preset: str
