"""What the screen knows about the run on it, as one record.

A new run (a start, a preset switch) starts from a fresh `RunView`: replacing the record resets
everything at once, so no field can be forgotten in a reset. The status line is drawn from it
(`cockpit.widgets.status.status_segments`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cockpit.figures.anomaly import Anomaly
from cockpit.figures.progress import ProgressTracker
from engine.events import RunStarted


@dataclass
class RunView:
    info: RunStarted | None = None  # the run's RunStarted event, once it came
    step: int = 0
    max_steps: int = 0
    tokens_per_s: float | None = None  # None until this session's first live step
    grad_norm: float | None = None
    mfu: float = 0.0
    data_share: float = 0.0  # of the step time, the part spent waiting for batches
    update_ratio: float | None = None
    lr: float | None = None
    scale: float = 1.0
    last_checkpoint: tuple[int, str, str] | None = None  # step, path, reason
    # the run's config (RunStarted's, with the changes since) when that checkpoint was saved
    checkpoint_config: Mapping[str, Any] | None = None
    tracker: ProgressTracker = field(default_factory=ProgressTracker)
    alert: tuple[str, str, int | None] | None = None  # level, message, expires at step
    anomaly: Anomaly | None = None  # a NaN or spike the run is stopped at, until resumed
    requested: str | None = None  # optimistic pause/resume until acknowledged
    checkpoint_pending: bool = False  # c was pressed and the engine has not answered yet
    checkpoint_nagged: bool = False  # "already saving" was said for the pending save
    checkpoint_said: bool = False  # the pending save's "saving..." toast was shown
