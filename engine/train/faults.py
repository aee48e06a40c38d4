"""Fault handling as pure rules: when a loss is a spike, what to do about an anomaly, how to
retry after running out of memory.

These only decide, returning a decision the loop carries out (pausing, rolling back, stopping,
retrying), so they are tested with hand-computed cases, without a model. Their messages say
what to do in words: a viewer may add the key it binds to each.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

ROLLBACK_LR_FACTOR = 0.5  # an automatic rollback halves the LR
ROLLBACK_HINT = "roll back to the last checkpoint with half the LR, or lower the LR"
LOWER_THEN_RESUME = "lower the LR, then resume"


class FaultAction(StrEnum):
    """What the loop does about a fault."""

    PAUSE = "pause"  # a person decides
    ROLL_BACK = "rollback"  # to the last checkpoint, with the LR halved
    STOP = "stop"  # the run fails (keeping its weights when `save_on_stop`)
    RETRY = "retry"  # the step again, with a smaller micro-batch


class SpikeDetector:
    """A loss far above its exponential moving average, once there is enough history.

    `sigma` standard deviations above the mean is a spike (0 turns detection off); the first
    `warmup` losses after the first only build the statistics. A spike is not folded into the
    statistics it is judged by.
    """

    def __init__(self, sigma: float, warmup: int = 50, beta: float = 0.98) -> None:
        self.sigma = sigma
        self.warmup = warmup
        self.beta = beta
        self.reset()

    def reset(self) -> None:
        """Forget the history (after a rollback the losses start again from a checkpoint)."""
        self.mean: float | None = None
        self.var = 0.0
        self.count = 0

    def observe(self, loss: float) -> bool:
        """Judge `loss` against the history so far; True when it is a spike."""
        if self.mean is None:
            self.mean, self.var, self.count = loss, 0.0, 1
            return False
        mean, var = self.mean, self.var
        spike = (
            self.sigma > 0
            and self.count > self.warmup
            and loss > mean + self.sigma * max(var, 1e-12) ** 0.5
        )
        if not spike:
            self.mean = self.beta * mean + (1 - self.beta) * loss
            self.var = self.beta * var + (1 - self.beta) * (loss - mean) ** 2
            self.count += 1
        return spike


@dataclass(frozen=True)
class AnomalyDecision:
    """What to do about a NaN or a spike, and what to tell the user."""

    action: FaultAction  # PAUSE, ROLL_BACK or STOP
    level: Literal["error", "warning"]  # of the alert carrying `message`
    message: str
    failure: str | None = None  # stop: the failed run's final reason
    save_on_stop: bool = False  # stop: keep the current weights (when intact) on the way out


def decide_anomaly(
    message: str,
    *,
    policy: str,
    interactive: bool,
    rollbacks: int,
    max_rollbacks: int,
    checkpoint_name: str | None,
    checkpoint_problem: str | None = None,
) -> AnomalyDecision:
    """The anomaly policy `policy` (train.on_anomaly; "auto": pause when a person is watching,
    else roll back) given the last checkpoint's name (None: none; `checkpoint_problem`: why it
    cannot be read, decided as none). After `max_rollbacks` the run fails without saving; with
    nothing to roll back to a person decides (pause); unattended, the run fails, keeping its
    weights."""
    if policy == "auto":
        policy = "pause" if interactive else "rollback"
    if policy == "rollback" and rollbacks >= max_rollbacks:
        gave_up = f"{message}; {rollbacks} rollbacks did not help"
        return AnomalyDecision(
            FaultAction.STOP, "error", f"{gave_up}: stopping, resume with a lower LR", failure=gave_up
        )
    if policy == "rollback" and checkpoint_name is not None and checkpoint_problem is None:
        return AnomalyDecision(
            FaultAction.ROLL_BACK, "warning", f"{message}; rolling back to {checkpoint_name} with the LR halved"
        )
    if checkpoint_problem is not None:
        unreadable = f"{message}; cannot roll back: {checkpoint_problem}"
        if not interactive:  # nobody to decide: keep the weights in memory and fail
            return AnomalyDecision(
                FaultAction.STOP,
                "error",
                f"{unreadable}: stopping",
                failure=unreadable,
                save_on_stop=True,
            )
        return AnomalyDecision(
            FaultAction.PAUSE, "error", f"{unreadable}: paused; {LOWER_THEN_RESUME}"
        )
    if not interactive:  # nobody to decide: keep what there is and fail
        no_checkpoint = f"{message}; no checkpoint to roll back to"
        return AnomalyDecision(
            FaultAction.STOP,
            "error",
            f"{no_checkpoint}: stopping",
            failure=no_checkpoint,
            save_on_stop=True,
        )
    return AnomalyDecision(FaultAction.PAUSE, "error", f"{message}: paused; {ROLLBACK_HINT}")


def halved_micro_batch(batch_size: int, grad_accum: int) -> tuple[int, int] | None:
    """After running out of memory: half the micro-batch, twice the accumulation (the same
    effective batch); None when the micro-batch cannot be halved exactly (1, or odd)."""
    if batch_size <= 1 or batch_size % 2:
        return None
    return batch_size // 2, grad_accum * 2


@dataclass(frozen=True)
class OutOfMemoryDecision:
    """Retry the step with `retry` = (micro-batch, accumulation), or pause (None)."""

    retry: tuple[int, int] | None
    level: Literal["error", "warning"]
    message: str

    @property
    def action(self) -> FaultAction:
        return FaultAction.PAUSE if self.retry is None else FaultAction.RETRY


def decide_out_of_memory(batch_size: int, grad_accum: int) -> OutOfMemoryDecision:
    """What an out-of-memory error at this micro-batch leads to, and what the alert says."""
    halved = halved_micro_batch(batch_size, grad_accum)
    if halved is None:
        return OutOfMemoryDecision(
            None,
            "error",
            f"out of memory at micro-batch {batch_size}: paused; `cockpit plan` lists what to "
            "change (gradient checkpointing, bf16, a lighter optimizer, a smaller model)",
        )
    return OutOfMemoryDecision(
        halved,
        "warning",
        f"out of memory: retrying the step with micro-batch {halved[0]} x {halved[1]} "
        "accumulation (same effective batch)",
    )
