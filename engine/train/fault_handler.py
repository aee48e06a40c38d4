"""Carrying out the fault rules: engine/train/faults.py decides, the FaultHandler acts on the run.

A NaN or a loss spike pauses, rolls back to the last checkpoint or stops the run; an
out-of-memory error retries with a smaller micro-batch or pauses. The decisions are pure
functions (engine/train/faults.py, tested alone); this is where they touch the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engine.checkpoint import store as ckpt
from engine.events import LrChanged, RunState
from engine.model.schedule import LrChange, lr_change, lr_plan
from engine.train.faults import (
    ROLLBACK_LR_FACTOR,
    AnomalyDecision,
    decide_anomaly,
    decide_out_of_memory,
)

if TYPE_CHECKING:
    from engine.train.trainer import Trainer


NO_CHECKPOINT = "no checkpoint to roll back to yet: lower the LR and resume"


@dataclass(frozen=True)
class Rollback:
    """A rollback ready to apply: the checkpoint read whole, and the LR change checked."""

    path: Path
    state: dict[str, Any]
    factor: float
    change: LrChange


class FaultHandler:
    """Anomalies, rollbacks and out-of-memory retries of one run (`run`: its trainer)."""

    def __init__(self, run: Trainer) -> None:
        self.run = run

    def anomaly(self, message: str, code: str) -> None:
        """A NaN or a spike: the step was not applied; carry out what engine/train/faults.py decides."""
        run = self.run
        decision = self.decide(message, run.last_checkpoint.name if run.last_checkpoint else None)
        rollback: Rollback | str | None = None
        if decision.action == "rollback":
            rollback = self.prepare_rollback(ROLLBACK_LR_FACTOR)
            if isinstance(rollback, str):
                # The checkpoint cannot be read: decided as with none, which keeps the weights
                # in memory (saved on the way out, or paused for a person).
                decision = self.decide(message, None, checkpoint_problem=rollback)
        run._alert(decision.level, decision.message, code)
        if decision.action == "stop":
            run._failure = decision.failure
            run._stop_requested = decision.save_on_stop
        elif isinstance(rollback, Rollback):
            self.apply_rollback(rollback)
        elif run.state == RunState.RUNNING:
            run._set_state(RunState.PAUSED, code)

    def decide(
        self, message: str, checkpoint_name: str | None, checkpoint_problem: str | None = None
    ) -> AnomalyDecision:
        run = self.run
        return decide_anomaly(
            message,
            policy=run.cfg.train.on_anomaly,
            interactive=run.interactive,
            rollbacks=run.rollbacks,
            max_rollbacks=run.cfg.train.max_rollbacks,
            checkpoint_name=checkpoint_name,
            checkpoint_problem=checkpoint_problem,
        )

    def rollback(self, factor: float) -> None:
        """The rollback command (`r`, the socket): reload the newest checkpoint and go on with
        the LR multiplied by `factor`; refused in one warning line when there is no checkpoint,
        it cannot be read, or `factor` gives no LR in range, and the run goes on (or stays
        paused) with its weights in memory, untouched."""
        rollback = self.prepare_rollback(factor)
        if isinstance(rollback, str):
            run = self.run
            if rollback != NO_CHECKPOINT:  # that one says already what to do
                now = "stays paused" if run.state == RunState.PAUSED else "goes on"
                go_on = f"the run {now} from step {run.step} with the weights in memory"
                rollback = f"rollback refused: {rollback}; {go_on}"
            run._alert("warning", rollback, "rollback")
            return
        self.apply_rollback(rollback)

    def prepare_rollback(self, factor: float) -> Rollback | str:
        """The newest checkpoint read whole and `factor` checked, before anything of the run is
        changed; the one-line reason when it cannot be done."""
        run = self.run
        # `factor` is checked as set_lr and scale_lr are (engine/model/schedule.py): first at this
        # step (a factor of 0 or -2 is refused before any file is read), then at the step the
        # checkpoint returns to, whose planned LR may be another
        change = lr_change("scale_lr", factor, lr_plan(run.step, run.cfg, run.lr_scale))
        if isinstance(change, str):
            return change.removeprefix("LR change refused: ")  # "x-2 is not a factor ..."
        found = ckpt.latest_checkpoint(run.run_dir) if run.run_dir else None
        if found is None:
            return NO_CHECKPOINT
        try:
            state = ckpt.load_checkpoint(found)
            ckpt.check_model_state(run.model, state)
        except ckpt.CheckpointError as e:
            return str(e)
        change = lr_change("scale_lr", factor, lr_plan(int(state["step"]), run.cfg, run.lr_scale))
        if isinstance(change, str):
            return change.removeprefix("LR change refused: ")
        return Rollback(found, state, factor, change)

    def apply_rollback(self, rollback: Rollback) -> None:
        run = self.run
        run._pending = []  # the steps after the checkpoint are undone, their losses with them
        run.checkpointer.restore(rollback.state)
        run.rollbacks += 1
        run.spikes.reset()
        change = rollback.change
        run.lr_scale = change.scale
        run.emit(
            LrChanged(step=run.step, old_lr=change.old_lr, new_lr=change.new_lr, scale=change.scale)
        )
        run._alert(
            "info",
            f"rolled back to step {run.step} ({rollback.path.name}), LR x{rollback.factor:g}",
            "rollback",
        )
        run._set_state(RunState.RUNNING, "rolled back")

    def shrink_micro_batch(self) -> bool:
        """After an out-of-memory error: retry with half the micro-batch and twice the
        accumulation, or pause (engine/train/faults.py decides). False when it paused."""
        run = self.run
        t = run.cfg.train
        if run.world.distributed:
            # one rank alone cannot change its micro-batch: the others are in the same step
            raise RuntimeError(
                f"out of memory on rank {run.world.rank} at batch_size {t.batch_size}; restart "
                "with a smaller train.batch_size (and a larger train.grad_accum)"
            )
        run.optimizer.zero_grad(set_to_none=True)
        if run.device.type == "cuda":
            torch.cuda.empty_cache()
        decision = decide_out_of_memory(t.batch_size, t.grad_accum)
        if decision.retry is not None:
            t.batch_size, t.grad_accum = decision.retry
            run.train_batches.batch_size = t.batch_size
        run._alert(decision.level, decision.message, "oom")
        if decision.retry is None:
            run._set_state(RunState.PAUSED, "out of memory")
        return decision.retry is not None
