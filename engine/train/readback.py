"""Steps whose loss is still on the device, and the Step events they become when read back.

The loop does not synchronise with the device on every step: it keeps each step's loss, gradient
norm, update ratio and whether its update was held back as device tensors, and reads a batch of
them back at once (one sync).
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
    # 1.0: the update was not applied (this step's gradient was not finite, or an earlier one's
    # since the last read-back); None: not checked (the finite check off, or fp16's GradScaler)
    held_back: torch.Tensor | None = None


@dataclass(frozen=True)
class ReadBack:
    """The values of a batch of pending steps, on the host, oldest first (NaN where a gradient
    norm or update ratio was not measured)."""

    losses: list[float]  # the world's: the mean over ranks
    grad_norms: list[float]
    update_ratios: list[float]
    held_back: list[bool]

    @property
    def applied(self) -> int:
        """How many steps, from the first, had their update applied: the first one held back
        was refused for its non-finite gradient, the ones after it were held back for it."""
        return next((i for i, held in enumerate(self.held_back) if held), len(self.held_back))


def read_back(
    pending: list[PendingStep],
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> ReadBack:
    """The values of `pending` in one device sync. `reduce` turns this rank's losses into the
    world's (their mean over ranks); the rest is the same on every rank."""
    losses = torch.stack([p.loss for p in pending]).float()
    if reduce is not None:
        losses = reduce(losses)

    def row(values: list[torch.Tensor | None], missing: float) -> torch.Tensor:
        out = torch.full_like(losses, missing)
        present = [i for i, v in enumerate(values) if v is not None]
        if present:
            out[present] = torch.stack([values[i].float() for i in present])
        return out

    rows = torch.stack(
        [
            losses,
            row([p.grad_norm for p in pending], math.nan),
            row([p.update_ratio for p in pending], math.nan),
            row([p.held_back for p in pending], 0.0),
        ]
    ).tolist()  # the one sync
    return ReadBack(rows[0], rows[1], rows[2], [held != 0.0 for held in rows[3]])


def refusal_message(step: int, loss: float) -> str:
    """The alert of a step refused for a non-finite gradient."""
    return f"non-finite gradient at step {step} (loss {loss:.4g}); the update was not applied"


def step_events(
    pending: list[PendingStep],
    read: ReadBack,
    *,
    tokens_per_s: float,
    step_time_s: float,
    tokens_after: int,
    tokens_per_step: int,
    mfu: float,
) -> list[Step]:
    """The Step events of `pending` (the first of `read`'s values: the applied steps, when a
    later one was held back), oldest first. `tokens_after` is the token count after the last of
    them; the throughput figures are their window's."""
    first_token_count = tokens_after - len(pending) * tokens_per_step
    return [
        Step(
            step=p.step,
            loss=read.losses[i],
            lr=p.lr,
            grad_norm=read.grad_norms[i],
            tokens_per_s=tokens_per_s,
            step_time_s=step_time_s,
            tokens=first_token_count + (i + 1) * tokens_per_step,
            mfu=mfu,
            data_time_s=p.data_time_s,
            update_ratio=read.update_ratios[i],
        )
        for i, p in enumerate(pending)
    ]
