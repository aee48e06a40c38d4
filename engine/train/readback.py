"""Steps whose loss is still on the device, and the Step events they become when read back.

The loop does not synchronise with the device on every step: it keeps each step's loss, gradient
norm, update ratio and whether its update was held back as device tensors, and reads a batch of
them back at once (one sync). `PendingSteps` holds the steps trained since the last read-back
and their throughput window, and turns them into Step events and anomaly checks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from engine.events import Event, Step
from engine.plan.flops import flops_per_token_at

if TYPE_CHECKING:
    from engine.config.run_config import RunConfig
    from engine.plan.flops import PeakMeter
    from engine.train.counters import Counters
    from engine.train.faults import SpikeDetector


# The loss is read back only every few steps: the steps in between form a window whose wall
# time, less what was not training (evaluations, samples, pauses, commands), gives the throughput
# and step time of every Step read back at its end. The clock is passed in for the tests.
class ThroughputWindow:
    """Wall time since the window started, minus the time excluded from it."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.restart()

    def restart(self) -> None:
        """Start a new, empty window now."""
        self._start = self._clock()
        self._excluded = 0.0

    def exclude(self, since: float, has_steps: bool) -> None:
        """Leave the time from `since` to now out of the window; with no step in the window
        yet (`has_steps` False), the window simply starts now."""
        if has_steps:
            self._excluded += self._clock() - since
        else:
            self.restart()

    def rates(self, steps: int, tokens_per_step: int) -> tuple[float, float]:
        """(tokens per second, seconds per step) for `steps` steps trained in the window."""
        window = max(self._clock() - self._start - self._excluded, 1e-9)
        return steps * tokens_per_step / window, window / steps


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
    # the tokens this rank trained on in the step, and their sequence length (a batch-size
    # schedule or sequence-length warmup varies both); 0: the configured shape's
    tokens: int = 0
    seq_len: int = 0


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
    step_tokens: Sequence[int] | None = None,
) -> list[Step]:
    """The Step events of `pending` (the first of `read`'s values: the applied steps, when a
    later one was held back), oldest first. `tokens_after` is the token count after the last of
    them; `step_tokens` each one's tokens (None: `tokens_per_step` each); the throughput figures
    are their window's."""
    if step_tokens is None:
        step_tokens = [tokens_per_step] * len(pending)
    count = tokens_after - sum(step_tokens)
    events = []
    for i, p in enumerate(pending):
        count += step_tokens[i]
        events.append(
            Step(
                step=p.step,
                loss=read.losses[i],
                lr=p.lr,
                grad_norm=read.grad_norms[i],
                tokens_per_s=tokens_per_s,
                step_time_s=step_time_s,
                tokens=count,
                mfu=mfu,
                data_time_s=p.data_time_s,
                update_ratio=read.update_ratios[i],
            )
        )
    return events


class PendingSteps:
    """The steps trained since the last read-back, oldest first, and the throughput window
    they were trained in. `counters`: put back to before a step refused on the device;
    `reduce`: this rank's losses to the world's; `peak_meter`, `flops_per_token` and `ranks`:
    each device's share of the world's throughput against one device's peak (MFU)."""

    def __init__(
        self,
        *,
        cfg: RunConfig,
        counters: Counters,
        reduce: Callable[[torch.Tensor], torch.Tensor] | None,
        spikes: SpikeDetector,
        peak_meter: PeakMeter,
        flops_per_token: float,
        ranks: int,
        emit: Callable[[Event], None],
    ) -> None:
        self.cfg = cfg
        self.counters = counters
        self.reduce = reduce
        self.spikes = spikes
        self.peak_meter = peak_meter
        self.flops_per_token = flops_per_token
        self.ranks = ranks
        self.emit = emit
        self.steps: list[PendingStep] = []
        self.window = ThroughputWindow()

    def __len__(self) -> int:
        return len(self.steps)

    def tokens_of(self, pending: PendingStep) -> int:
        """The world's tokens of a step: its shape's on every rank (a batch-size schedule or
        sequence-length warmup varies it; 0 counted: the configured shape's)."""
        return pending.tokens * self.ranks if pending.tokens else self.cfg.tokens_per_step

    def _flops_per_token(self, pending: Sequence[PendingStep]) -> float:
        """FLOPs per token over `pending`, weighted by their tokens: attention's part grows with
        the sequence length, which a sequence-length warmup varies."""
        block = self.cfg.model.block_size
        if all(p.seq_len in (0, block) for p in pending):
            return self.flops_per_token
        weighted = sum(
            p.tokens * flops_per_token_at(self.flops_per_token, self.cfg.model, p.seq_len or block)
            for p in pending
        )
        return weighted / max(sum(p.tokens for p in pending), 1)

    def add(self, pending: PendingStep) -> None:
        self.steps.append(pending)

    @property
    def held_back(self) -> torch.Tensor | None:
        """Whether the newest step's update was held back: one refused since the last
        read-back holds back the updates after it too (None with no step pending)."""
        return self.steps[-1].held_back if self.steps else None

    def forget(self) -> None:
        """Drop the steps not read back yet (a rollback undoes them)."""
        self.steps = []

    def exclude(self, since: float) -> None:
        """Leave the time from `since` to now (not training) out of the next Step's throughput."""
        self.window.exclude(since, bool(self.steps))

    def flush(self, anomaly: Callable[[str, str], None]) -> None:
        """Read the steps back from the device (one sync) and emit their Step events; a
        non-finite loss, a spike or a refused step goes to `anomaly(message, code)`. A refused
        step's later updates were held back with it: the run goes back to the step before it."""
        pending, self.steps = self.steps, []
        if not pending:
            return
        # the sync, timed inside the window; across ranks, the mean loss of the whole batch
        read = read_back(pending, self.reduce)
        refused = None
        if read.applied < len(pending):
            refused = refusal_message(pending[read.applied].step, read.losses[read.applied])
            self._undo_held_back(pending, read.applied)
            pending = pending[: read.applied]
        if pending:
            self._emit_steps(pending, read, anomaly)
        self.window.restart()
        if refused is not None:
            anomaly(refused, "nan")

    def _undo_held_back(self, pending: list[PendingStep], applied: int) -> None:
        """The counters as they were before the refused step `pending[applied]`: no update was
        applied from it on (the weights and optimizer state are those of the step before)."""
        counters, undone = self.counters, len(pending) - applied
        counters.step -= undone
        counters.tokens -= sum(self.tokens_of(p) for p in pending[applied:])
        counters.current_lr = pending[max(applied - 1, 0)].lr

    def _emit_steps(
        self, pending: list[PendingStep], read: ReadBack, anomaly: Callable[[str, str], None]
    ) -> None:
        """The Step events of the applied steps read back, then their NaN and spike checks."""
        step_tokens = [self.tokens_of(p) for p in pending]
        tokens = sum(step_tokens)
        tokens_per_s, step_time = self.window.rates(len(pending), tokens / len(pending))
        spikes = self.spikes
        for event in step_events(
            pending,
            read,
            tokens_per_s=tokens_per_s,
            step_time_s=step_time,
            tokens_after=self.counters.tokens,
            tokens_per_step=self.cfg.tokens_per_step,
            # each device's share of the world's throughput against one device's peak
            mfu=self.peak_meter.mfu(tokens_per_s / self.ranks, self._flops_per_token(pending)),
            step_tokens=step_tokens,
        ):
            self.emit(event)
        for p, loss in zip(pending, read.losses, strict=False):  # the applied ones come first
            if not math.isfinite(loss):
                anomaly(f"loss is not finite at step {p.step}", "nan")
                break
            if spikes.observe(loss):
                anomaly(
                    f"loss spike at step {p.step}: {loss:.4f} against a moving average of {spikes.mean:.4f}",
                    "spike",
                )
                break
