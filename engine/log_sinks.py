"""The run's optional log sinks beside metrics.jsonl (TensorBoard), chosen by `[log]`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.config import RunConfig
from engine.events import Event


def log_sinks(cfg: RunConfig, run_dir: Path, start_step: int = 0) -> list[Callable[[Event], None]]:
    """The sinks `[log]` asks for, opened on `run_dir`; a resumed run starts at `start_step`."""
    return []
