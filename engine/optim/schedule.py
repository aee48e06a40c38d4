"""Learning-rate schedules as pure functions of the step, and the rule for changing the LR:
`lr_at(step, ...)` is the LR of optimizer step `step` before any hand-set multiplier,
`planned_curve` the whole run's for the LR panel, and `lr_change` decides a hand-set LR on its
step's `lr_plan` (a typed LR is the LR once warmup is over; never past MAX_LR).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from engine.config.run_config import MAX_LR, RunConfig


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
    step: int,
    peak: float,
    floor: float,
    warmup: int,
    total: int,
    decay_fraction: float,
    decay_start: int = 0,
) -> float:
    """Warmup-stable-decay: linear warmup, constant peak, linear decay to `floor` at the end,
    from `decay_start` (0: the last `decay_fraction` of the run)."""
    if step < warmup:
        return peak * (step + 1) / (warmup + 1)
    decay_start = decay_start or total - round(total * decay_fraction)
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
        return wsd_lr(
            step, peak, s.min_lr, s.warmup_steps, cfg.train.max_steps, s.decay_fraction,
            s.decay_start,
        )
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


def lr_multiplied(step: int, cfg: RunConfig, scale: float) -> float:
    """The factor on every parameter group's peak LR at `step`: the schedule times the hand-set
    multiplier `scale`, and never more than takes the LR to MAX_LR (a multiplier set late in a
    decay meets a schedule that rises again only when a resume changes the plan)."""
    return min(lr_factor(step, cfg) * scale, MAX_LR / cfg.optim.lr)


@dataclass(frozen=True)
class LrPlan:
    """What a hand-set LR means at one step: the typed LR is the LR once warmup is over (from
    `settled_step`, the step itself after warmup); during warmup the LR follows the ramp to it.
    Built by `lr_plan` from the run's config, the same in the engine and in the LR dialog."""

    step: int
    scale: float  # the hand-set multiplier now
    scheduled: float  # the planned LR at `step`, before the multiplier
    settled_step: int  # the first step the typed LR is the LR of: `step`, or warmup's end
    settled: float  # the planned LR at `settled_step`
    highest: float  # the highest planned LR from `step` on (warmup rises; after it, only falls)

    @property
    def in_warmup(self) -> bool:
        return self.settled_step > self.step

    def applied(self, scale: float) -> float:
        """The LR applied at `step` under multiplier `scale`, capped at MAX_LR as trained."""
        return min(self.scheduled * scale, MAX_LR)


def lr_plan(step: int, cfg: RunConfig, scale: float) -> LrPlan:
    warmup = cfg.schedule.warmup_steps
    settled_step = max(step, warmup)
    ahead = {step, max(step, warmup - 1), settled_step}  # the ramp's top and what follows it
    return LrPlan(
        step=step,
        scale=scale,
        scheduled=lr_at(step, cfg),
        settled_step=settled_step,
        settled=lr_at(settled_step, cfg),
        highest=max(lr_at(s, cfg) for s in ahead),
    )


@dataclass(frozen=True)
class LrChange:
    """An accepted LR change: the LR applied before and after (at the plan's step), the new
    multiplier on the schedule, and during warmup the LR the ramp reaches at `settled_step`."""

    old_lr: float
    new_lr: float
    scale: float
    settled_step: int
    settled_lr: float

    @property
    def unchanged(self) -> bool:
        """The multiplier stays what it was (typing the LR there is): nothing to do."""
        return math.isclose(self.new_lr, self.old_lr, rel_tol=1e-6)


def lr_change(command: Literal["set_lr", "scale_lr"], value: float, plan: LrPlan) -> LrChange | str:
    """`set_lr` to `value` (the LR from the plan's settled step on) or `scale_lr` by `value`.
    Returns the change, or the one-line refusal when the LR would leave (0, MAX_LR] anywhere
    ahead (a zero planned LR cannot be set: the multiplier would be infinite)."""
    if command == "set_lr":
        if not (math.isfinite(value) and 0 < value <= MAX_LR):
            return f"LR change refused: {value:g} is not an LR in (0, {MAX_LR:g}]"
        if plan.settled <= 0:
            return (
                f"LR change refused: the planned LR at step {plan.settled_step} is 0, so no "
                f"multiplier makes it {value:g}; change it by a factor later"
            )
        new_scale = value / plan.settled
    else:
        if not (math.isfinite(value) and value > 0):
            return f"LR change refused: x{value:g} is not a factor greater than 0"
        new_scale = plan.scale * value
    highest = plan.highest * new_scale
    if not (math.isfinite(highest) and highest <= MAX_LR * (1 + 1e-9)):
        where = f" at step {plan.settled_step} (after warmup)" if plan.in_warmup else ""
        typed = f"{value:g}" if command == "set_lr" else f"x{value:g}"
        return (
            f"LR change refused: {typed} would take the LR to {highest:.3g}{where}; "
            f"the maximum is {MAX_LR:g}"
        )
    return LrChange(
        old_lr=plan.applied(plan.scale),
        new_lr=plan.applied(new_scale),
        scale=new_scale,
        settled_step=plan.settled_step,
        settled_lr=min(plan.settled * new_scale, MAX_LR),
    )
