"""Steps whose loss is still on the device, and the Step events they become when read back.

The loop does not synchronise with the device on every step: it keeps each step's loss, gradient
norm and update ratio as device tensors and reads a batch of them back at once (one sync).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.events import Step


@dataclass
class PendingStep:
    """A step whose loss is still on the device; read back in batches."""

    step: int
    loss: torch.Tensor
    grad_norm: torch.Tensor | None
    lr: float
    data_time_s: float
    update_ratio: torch.Tensor | None


def read_losses(
    pending: list[PendingStep],
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[list[float], list[float]]:
    """The losses and gradient norms of `pending` (NaN norms when not measured): one device
    sync. `reduce` turns this rank's losses into the world's (their mean over ranks)."""
    stacked = torch.stack([p.loss for p in pending]).float()
    losses = (reduce(stacked) if reduce is not None else stacked).tolist()
    norms = [p.grad_norm for p in pending]
    norm_values = (
        torch.stack(norms).float().tolist()
        if all(n is not None for n in norms)
        else [math.nan] * len(pending)
    )
    return losses, norm_values


def step_events(
    pending: list[PendingStep],
    losses: list[float],
    grad_norms: list[float],
    *,
    tokens_per_s: float,
    step_time_s: float,
    tokens_after: int,
    tokens_per_step: int,
    mfu: float,
) -> list[Step]:
    """The Step events of `pending`, oldest first. `tokens_after` is the token count after the
    last of them; the throughput figures are their window's."""
    first_token_count = tokens_after - len(pending) * tokens_per_step
    return [
        Step(
            step=p.step,
            loss=loss,
            lr=p.lr,
            grad_norm=norm,
            tokens_per_s=tokens_per_s,
            step_time_s=step_time_s,
            tokens=first_token_count + (i + 1) * tokens_per_step,
            mfu=mfu,
            data_time_s=p.data_time_s,
            update_ratio=float(p.update_ratio) if p.update_ratio is not None else math.nan,
        )
        for i, (p, loss, norm) in enumerate(zip(pending, losses, grad_norms, strict=True))
    ]
