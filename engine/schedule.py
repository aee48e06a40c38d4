"""Learning-rate schedules as pure functions of the step, and the rule for changing the LR.

`lr_at(step, ...)` is the LR the optimizer applies for optimizer step `step` (0-based), before
any hand-set multiplier. `planned_curve` samples the whole run for the cockpit's LR panel.
`lr_change` decides a hand-set LR (set_lr, scale_lr): the new multiplier, or why not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from engine.config import MAX_LR, RunConfig


def cosine_lr(step: int, peak: float, floor: float, warmup: int, decay_steps: int) -> float:
    """nanoGPT's schedule: linear warmup, cosine decay to `floor` at `decay_steps`, then `floor`."""
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    if step > decay_steps:
        return floor
    span = max(1, decay_steps - warmup)
    ratio = (step - warmup) / span
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return floor + coeff * (peak - floor)


def wsd_lr(
    step: int, peak: float, floor: float, warmup: int, total: int, decay_fraction: float
) -> float:
    """Warmup-stable-decay: linear warmup, constant peak, linear decay to `floor` at the end."""
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    decay_start = total - round(total * decay_fraction)
    if step < decay_start:
        return peak
    span = max(1, total - decay_start)
    frac = min(1.0, (step - decay_start) / span)
    return peak + frac * (floor - peak)


def constant_lr(step: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    return peak


def lr_at(step: int, cfg: RunConfig) -> float:
    s, peak = cfg.schedule, cfg.optim.lr
    if s.kind == "cosine":
        return cosine_lr(step, peak, s.min_lr, s.warmup_steps, cfg.decay_steps)
    if s.kind == "wsd":
        return wsd_lr(step, peak, s.min_lr, s.warmup_steps, cfg.train.max_steps, s.decay_fraction)
    return constant_lr(step, peak, s.warmup_steps)


def lr_factor(step: int, cfg: RunConfig) -> float:
    """The schedule as a fraction of the peak LR: every parameter group scales by it."""
    return lr_at(step, cfg) / cfg.optim.lr


def planned_curve(cfg: RunConfig, points: int = 400) -> tuple[tuple[int, float], ...]:
    """(step, lr) pairs over the whole run, evenly spaced, always including the first and last."""
    total = cfg.train.max_steps
    if total <= points:
        steps = range(total)
    else:
        steps = sorted({round(i * (total - 1) / (points - 1)) for i in range(points)})
    return tuple((step, lr_at(step, cfg)) for step in steps)


@dataclass(frozen=True)
class LrChange:
    """An accepted LR change: the LR before and after, and the new multiplier on the schedule."""

    old_lr: float
    new_lr: float
    scale: float


def lr_change(
    command: Literal["set_lr", "scale_lr"], value: float, scheduled_lr: float, scale: float
) -> LrChange | str:
    """`set_lr` to `value`, or `scale_lr` by `value`, at a step whose schedule gives
    `scheduled_lr` and whose multiplier is `scale`. Returns the change, or the refusal message
    when the result is not an LR in (0, MAX_LR] (a zero scheduled LR cannot be set: the
    multiplier would be infinite)."""
    old_lr = scheduled_lr * scale
    if command == "set_lr":
        new_scale = value / scheduled_lr if scheduled_lr > 0 else math.nan
    else:
        new_scale = scale * value
    new_lr = scheduled_lr * new_scale
    if not (math.isfinite(new_scale) and new_scale > 0 and 0 < new_lr <= MAX_LR):
        return (
            f"LR change refused: {value!r} would give an LR of {new_lr:.3g}; "
            f"use a value in (0, {MAX_LR:g}]"
        )
    return LrChange(old_lr=old_lr, new_lr=new_lr, scale=new_scale)
