"""Which checkpoint becomes best.pt: a pure decision.

A checkpoint is best only when the evaluation at its own step beat the best val loss so far.
An evaluation between checkpoints marks nothing: its weights are not on disk, and the next
checkpoint's weights are not the ones it measured.
"""

from __future__ import annotations

import math

from engine.events import Eval


def is_new_best(last_eval: Eval | None, step: int, best_val: float) -> bool:
    """True when a checkpoint saved at `step` should become best.pt."""
    return (
        last_eval is not None
        and last_eval.step == step
        and math.isfinite(last_eval.val_loss)
        and last_eval.val_loss < best_val
    )
