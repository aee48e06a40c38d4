"""Learning-rate schedules as pure functions of the step.

`lr_at(step, ...)` is the LR the optimizer applies for optimizer step `step` (0-based), before
any hand-set multiplier. `planned_curve` samples the whole run for the cockpit's LR panel.
"""

from __future__ import annotations

import math

from engine.config import RunConfig


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
