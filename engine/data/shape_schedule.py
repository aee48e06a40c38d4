"""The batch-size schedule and the sequence-length warmup: the shape of each step's batches.

As in the modded-nanogpt speedrun, each grows linearly from its start to the configured size
over its ramp, rounded down to a multiple of its start (a handful of shapes for torch.compile).
Pure functions of the step, so a resume, replay, rollback or rank sees the same shapes; a start
of 0 is off.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.config import split_micro_batch

if TYPE_CHECKING:
    from engine.config.run_config import RunConfig


def ramped(step: int, *, start: int, final: int, steps: int) -> int:
    """`start` at step 0 growing linearly to `final` at step `steps`, rounded down to a multiple
    of `start`; `final` from step `steps` on, and always when `start` is 0 (off)."""
    if start <= 0 or step >= steps:
        return final
    value = start + (final - start) * step // steps
    return min(final, max(start, value // start * start))


def batch_size_at(step: int, *, start: int, ramp_steps: int, final: int) -> int:
    """Sequences per micro-batch at `step` (the number of steps done before it)."""
    return ramped(step, start=start, final=final, steps=ramp_steps)


def seq_len_at(step: int, *, start: int, warmup_steps: int, final: int) -> int:
    """Tokens per sequence at `step` (the number of steps done before it)."""
    return ramped(step, start=start, final=final, steps=warmup_steps)


def micro_batch_sizes(sequences: int, micro_steps: int) -> tuple[int, ...]:
    """A step's `sequences` split over its `micro_steps` micro-batches as evenly as whole
    sequences go, the smaller first (an out-of-memory retry's halves of a scheduled 3: 1 + 2).
    A 0 is a micro-step with nothing to take (fewer sequences than micro-steps); the last
    always takes some."""
    fewer, more = divmod(sequences, micro_steps)
    return (fewer,) * (micro_steps - more) + (fewer + 1,) * more


def ramped_micro_batch(batch_size: int, grad_accum: int, started: int) -> tuple[int, int]:
    """(micro-batch, accumulation) a batch-size schedule grows to, of a run now at `batch_size`
    x `grad_accum` that started at micro-batch `started`: the start's when an out-of-memory
    retry has halved it since (8 x 1 halved to 4 x 2: 8 x 1, the schedule the run recorded
    and trains, 3 sequences a step at its start, not 3 of 4 twice); else the config's."""
    sequences = batch_size * grad_accum
    if started > batch_size and started % batch_size == 0 and sequences % started == 0:
        return started, sequences // started
    return batch_size, grad_accum


def tokens_through(changes: Sequence[tuple[int, int]], step: int) -> int:
    """Tokens of the steps before `step` from a schedule's `changes` ((step, tokens a step
    from it on) pairs from step 0, as RunStarted.tokens_schedule records them)."""
    total = 0
    for i, (start, tokens) in enumerate(changes):
        end = min(changes[i + 1][0] if i + 1 < len(changes) else step, step)
        total += max(0, end - start) * tokens
    return total


def recorded_changes(value: object) -> tuple[tuple[int, int], ...]:
    """A tokens_schedule as a metrics file holds it (`[[step, tokens], ...]`), or () when it is
    missing or not that (a damaged or hand-edited record is read past)."""
    if not isinstance(value, (list, tuple)):
        return ()
    changes = []
    for item in value:
        if not (
            isinstance(item, (list, tuple))
            and len(item) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in item)
        ):
            return ()
        changes.append((item[0], item[1]))
    return tuple(changes)


@dataclass(frozen=True)
class ShapeSchedule:
    """A run's batch shapes step by step: sequences per micro-batch (the world's, as
    train.batch_size counts them) and tokens per sequence, and the tokens a step trains on."""

    batch_size: int  # sequences per micro-batch once ramped (train.batch_size)
    block_size: int  # tokens per sequence once warmed up (model.block_size)
    grad_accum: int = 1
    batch_start: int = 0  # 0: no batch-size schedule
    batch_ramp_steps: int = 0
    seq_start: int = 0  # 0: no sequence-length warmup
    seq_warmup_steps: int = 0

    @classmethod
    def of(cls, cfg: RunConfig, started: RunConfig | None = None) -> ShapeSchedule:
        """`cfg`'s schedule; `started`: the config its run started with (a resume's), whose
        micro-batch the ramp grows to when an out-of-memory retry has split it since."""
        t = cfg.train
        batch, accum = t.batch_size, t.grad_accum
        if started is not None:
            batch, accum = ramped_micro_batch(batch, accum, started.train.batch_size)
        if t.batch_start > batch:  # a config whose micro-batch was split since it started
            batch, accum = split_micro_batch(batch, accum, t.batch_start) or (batch, accum)
        return cls(
            batch_size=batch,
            block_size=cfg.model.block_size,
            grad_accum=accum,
            batch_start=t.batch_start,
            batch_ramp_steps=t.batch_ramp_steps,
            seq_start=t.seq_start,
            seq_warmup_steps=t.seq_warmup_steps,
        )

    @property
    def on(self) -> bool:
        return self.batch_start > 0 or self.seq_start > 0

    @property
    def ramp_ends(self) -> int:
        """The first step at the configured shape (0 when off)."""
        batch = self.batch_ramp_steps if self.batch_start else 0
        seq = self.seq_warmup_steps if self.seq_start else 0
        return max(batch, seq)

    def batch_at(self, step: int) -> int:
        return batch_size_at(
            step, start=self.batch_start, ramp_steps=self.batch_ramp_steps, final=self.batch_size
        )

    def seq_at(self, step: int) -> int:
        return seq_len_at(
            step, start=self.seq_start, warmup_steps=self.seq_warmup_steps, final=self.block_size
        )

    def tokens_at(self, step: int) -> int:
        """Tokens step `step` trains on, over the world."""
        return self.batch_at(step) * self.grad_accum * self.seq_at(step)

    @property
    def final_tokens(self) -> int:
        return self.batch_size * self.grad_accum * self.block_size

    def tokens_before(self, step: int) -> int:
        """Tokens of the steps before `step` (with this accumulation throughout)."""
        ramp = min(step, self.ramp_ends)
        ramping = sum(self.tokens_at(s) for s in range(ramp))
        return ramping + (step - ramp) * self.final_tokens

    def changes(self, max_steps: int) -> tuple[tuple[int, int], ...]:
        """(step, tokens a step from it on) at step 0 and wherever the shape changes before
        `max_steps`; () when off (every step has the configured shape)."""
        if not self.on:
            return ()
        points = [(0, self.tokens_at(0))]
        for step in range(1, min(self.ramp_ends, max_steps - 1) + 1):
            tokens = self.tokens_at(step)
            if tokens != points[-1][1]:
                points.append((step, tokens))
        return tuple(points)

    def describe(self) -> str:
        """The schedule in words (the plan's line), '' when off."""
        parts = []
        if self.batch_start:
            parts.append(
                f"batch {self.batch_start} -> {self.batch_size} sequences over "
                f"{self.batch_ramp_steps:,} steps"
            )
        if self.seq_start:
            parts.append(
                f"sequences {self.seq_start} -> {self.block_size} tokens over "
                f"{self.seq_warmup_steps:,} steps"
            )
        return ", ".join(parts)
