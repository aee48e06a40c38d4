"""The work a run does between updates: evaluations, samples and checkpoints.

Each is due at its interval (`eval.interval`, `sample.interval`, `checkpoint.interval`; 0: never),
but none at the last step: the end of the run evaluates, samples and saves there in its own way
(engine/train/finish.py). `evaluate` and `sample` also answer the e and s commands
(engine/train/commands.py). The measuring itself is the Evaluator's (engine/model/evaluation.py);
here it becomes Eval and Sample events.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from engine.events import Eval, Sample

if TYPE_CHECKING:
    from engine.train.trainer import Trainer


class DueWork(NamedTuple):
    """What is due at the step just trained; `any(due)` asks whether anything is."""

    evaluate: bool
    sample: bool
    checkpoint: bool


def work_due(run: Trainer) -> DueWork:
    """The work due at `run.step` by the intervals; none at the last step (run_end.finish's)."""
    cfg, step = run.cfg, run.step

    def due(interval: int) -> bool:
        return interval > 0 and step % interval == 0 and step < cfg.train.max_steps

    return DueWork(due(cfg.eval.interval), due(cfg.sample.interval), due(cfg.checkpoint.interval))


def do_work(run: Trainer, due: DueWork) -> None:
    """The due work, in this order: a checkpoint after an eval at its step may become best.pt."""
    if due.evaluate:
        run._last_eval = evaluate(run)
    if due.sample:
        sample(run)
    if due.checkpoint:
        run.checkpointer.save_and_mark("interval")


def evaluate(run: Trainer) -> Eval:
    """Measure the train and val losses now (pending steps read back first) and emit them."""
    run._flush()
    train_loss, val_loss = run.evaluator.losses(run.data)
    event = Eval(
        step=run.step,
        train_loss=train_loss,
        val_loss=val_loss,
        train_time_s=run.train_time_s,
        full_split=run.evaluator.val_full,  # False when a bound cut the split short
    )
    run.emit(event)
    if (note := run.evaluator.capped_note()) is not None:
        run._alert("info", note, "eval")  # once per run, not at every eval
    if not math.isfinite(val_loss):
        run._alert("error", f"val loss is {val_loss} at step {run.step}", "nan")
    return event


def sample(run: Trainer) -> None:
    """Generate from the configured prompts with the run's own sample RNG and emit the texts."""
    if (note := run.evaluator.prompt_note(run.data.tokenizer)) is not None:
        run._alert("info", note, "sample")  # once per run: characters left out of a prompt
    for prompt, text in run.evaluator.samples(run.data.tokenizer, run.sample_generator):
        run.emit(Sample(step=run.step, prompt=prompt, text=text))
