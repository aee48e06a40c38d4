"""The work a run does between updates: evaluations, samples and checkpoints, each at its
interval (0: never) but none at the last step, which the end of the run does in its own way.

With a target val loss (`train.stop_at_val`), `eval.fine_interval` takes over once the next
periodic evaluation may reach it (`eval_interval`). `Readings` reads the steps back, evaluates
and samples for the loop and the e and s commands; the measuring itself is the Evaluator's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import torch

from engine.config.run_config import RunConfig
from engine.data.preparation import PreparedData
from engine.events import Eval, Sample
from engine.train.counters import Counters
from engine.train.reporter import Reporter

if TYPE_CHECKING:
    from engine.data.tokenizers import Tokenizer
    from engine.model.evaluation import Evaluator
    from engine.train.readback import PendingSteps


class DueWork(NamedTuple):
    """What is due at the step just trained; `any(due)` asks whether anything is."""

    evaluate: bool
    sample: bool
    checkpoint: bool


ValPoint = tuple[int, float]  # an evaluation's step and val loss

NEAR_FACTOR = 3.0  # "may reach": within 3 times what the val loss fell over the last interval


def projects_to(points: Sequence[ValPoint], target: float, interval: int) -> bool:
    """Whether the evaluation `interval` steps after the last of `points` (this run's, in step
    order) may reach `target`: the last val loss is at most NEAR_FACTOR times what the val loss
    fell over the last `interval` steps above it, the fall measured from the latest evaluation
    at least `interval` steps before the last (else the first) and scaled to `interval` steps.
    False with fewer than two evaluations, or a val loss that did not fall."""
    if not points:
        return False
    last_step, last_val = points[-1]
    gap = last_val - target
    if gap <= 0:
        return True
    ref = next((p for p in reversed(points) if p[0] <= last_step - interval), points[0])
    if ref[0] >= last_step:
        return False
    fell = (ref[1] - last_val) * interval / (last_step - ref[0])
    return fell > 0 and gap <= NEAR_FACTOR * fell


def near_target(points: Sequence[ValPoint], target: float, interval: int) -> bool:
    """Whether the run is near `target`: `projects_to` held at one of its evaluations of the
    last `interval` steps, so that a noisy evaluation on the way (a val estimate above the one
    before) does not take it back to evaluating every `interval` steps before that one's
    projection has had its `interval` steps."""
    if not points:
        return False
    since = points[-1][0] - interval
    return any(
        projects_to(points[: k + 1], target, interval)
        for k in range(len(points) - 1, -1, -1)
        if points[k][0] >= since
    )


def eval_interval(cfg: RunConfig, points: Sequence[ValPoint] = ()) -> int:
    """The steps between evaluations now: `eval.fine_interval` when the run has a target
    (`train.stop_at_val`) that the next evaluation at `eval.interval` may reach (`near_target`
    of the run's evaluations so far), else `eval.interval` (0: none before the end)."""
    coarse, fine, target = cfg.eval.interval, cfg.eval.fine_interval, cfg.train.stop_at_val
    if coarse and fine and target and near_target(points, target, coarse):
        return min(fine, coarse)
    return coarse


def work_due(step: int, cfg: RunConfig, val_points: Sequence[ValPoint] = ()) -> DueWork:
    """The work due after `step` steps by the intervals; none at the last step (the run's end).
    `val_points` are the run's evaluations so far (step, val loss), for `eval_interval`."""

    def due(interval: int) -> bool:
        return interval > 0 and step % interval == 0 and step < cfg.train.max_steps

    return DueWork(
        due(eval_interval(cfg, val_points)), due(cfg.sample.interval), due(cfg.checkpoint.interval)
    )


def val_target_note(event: Eval | None, cfg: RunConfig, step: int) -> str | None:
    """Why the run finishes now, when `event` is the evaluation at `step` and its val loss is at
    or below `train.stop_at_val` (the time to a target val loss, as `cockpit ablate` measures
    it); None otherwise, and always when the setting is 0 (off)."""
    target = cfg.train.stop_at_val
    if not target or event is None or event.step != step or not event.val_loss <= target:
        return None
    return f"val loss {event.val_loss:.4f} reached train.stop_at_val {target:g} at step {step}"


def time_budget_note(cfg: RunConfig, train_time_s: float) -> str | None:
    """Why the run finishes now, when its training time (steps alone, as `Counters` counts it,
    a resume's earlier sessions included) has reached `train.time_budget`; None otherwise, and
    always when the setting is 0 (off)."""
    budget = cfg.train.time_budget
    if not budget or train_time_s < budget:
        return None
    return f"training time {train_time_s:.1f} s reached train.time_budget {budget:g} s"


def evaluate(
    evaluator: Evaluator, data: PreparedData, counters: Counters, report: Reporter
) -> Eval:
    """Measure the train and val losses now and emit them (the caller reads back the steps
    still on the device first, so that the curves stay in order)."""
    train_loss, val_loss = evaluator.losses(data)
    train_bpb, val_bpb = evaluator.bits_per_byte(data, train_loss, val_loss)
    event = Eval(
        step=counters.step,
        train_loss=train_loss,
        val_loss=val_loss,
        train_time_s=counters.train_time_s,
        full_split=evaluator.val_full,  # False when a bound cut the split short
        train_bpb=train_bpb,
        val_bpb=val_bpb,
    )
    report.emit(event)
    if (note := evaluator.capped_note()) is not None:
        report.alert("info", note, "eval")  # once per run, not at every eval
    if not math.isfinite(val_loss):
        report.alert("error", f"val loss is {val_loss} at step {counters.step}", "nan")
    return event


def sample(
    evaluator: Evaluator,
    tokenizer: Tokenizer,
    generator: torch.Generator,
    step: int,
    report: Reporter,
) -> None:
    """Generate from the configured prompts with the run's own sample RNG and emit the texts."""
    if (note := evaluator.prompt_note(tokenizer)) is not None:
        report.alert("info", note, "sample")  # once per run: characters left out of a prompt
    for prompt, text in evaluator.samples(tokenizer, generator):
        report.emit(Sample(step=step, prompt=prompt, text=text))


class Readings:
    """What the loop and the commands read off a run: the steps still on the device (`flush`,
    their anomalies to `anomaly`), an evaluation, a sample. `val_points`: this run's
    evaluations so far (a resume's from its metrics file), for eval.fine_interval."""

    def __init__(
        self,
        *,
        pending: PendingSteps,
        anomaly: Callable[[str, str], None],
        evaluator: Evaluator,
        data: PreparedData,
        sample_generator: torch.Generator,
        counters: Counters,
        reporter: Reporter,
        val_points: list[ValPoint],
    ) -> None:
        self.pending = pending
        self.anomaly = anomaly
        self.evaluator = evaluator
        self.data = data
        self.sample_generator = sample_generator
        self.counters = counters
        self.reporter = reporter
        self.val_points = val_points

    def flush(self) -> None:
        """Read the pending steps back from the device and emit their Step events."""
        self.pending.flush(self.anomaly)

    def evaluate(self) -> Eval:
        """Measure the losses now (pending steps read back first, so the curves stay in order)."""
        self.flush()
        event = evaluate(self.evaluator, self.data, self.counters, self.reporter)
        # a rollback trains steps again: their new evaluations replace the old ones
        self.val_points[:] = [p for p in self.val_points if p[0] < event.step]
        self.val_points.append((event.step, event.val_loss))
        return event

    def sample(self) -> None:
        sample(
            self.evaluator,
            self.data.tokenizer,
            self.sample_generator,
            self.counters.step,
            self.reporter,
        )
