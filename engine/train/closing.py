"""Letting go of what a run holds: the telemetry poller and the sinks, each closed once.

A sink may say something on closing (a TensorBoard writer that could not flush): that becomes a
warning, reported before the final state where the final state has yet to come.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from engine.train.reporter import Reporter


def close_sinks(sinks: Iterable[Callable[..., Any]], report: Reporter) -> None:
    """Close each sink that can be closed, in order; what one says on closing is a warning."""
    for sink in sinks:
        close = getattr(sink, "close", None)
        problem = close() if close else None
        if isinstance(problem, str):
            report.alert("warning", problem, "log")


def weights_finite(model: torch.nn.Module) -> bool:
    """No NaN or infinity in any weight: weights fit to be saved as the newest checkpoint."""
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())
