"""Carrying out the fault rules: engine/faults.py decides, the FaultHandler acts on the run.

A NaN or a loss spike pauses, rolls back to the last checkpoint or stops the run; an
out-of-memory error retries with a smaller micro-batch or pauses. The decisions are pure
functions (engine/faults.py, tested alone); this is where they touch the trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from engine import checkpoint as ckpt
from engine.events import LrChanged, RunState
from engine.faults import ROLLBACK_LR_FACTOR, decide_anomaly, decide_out_of_memory
from engine.schedule import lr_factor

if TYPE_CHECKING:
    from engine.trainer import Trainer


class FaultHandler:
    """Anomalies, rollbacks and out-of-memory retries of one run (`run`: its trainer)."""

    def __init__(self, run: Trainer) -> None:
        self.run = run

    def anomaly(self, message: str, code: str) -> None:
        """A NaN or a spike: the step was not applied; carry out what engine/faults.py decides."""
        run = self.run
        decision = decide_anomaly(
            message,
            policy=run.cfg.train.on_anomaly,
            interactive=run.interactive,
            rollbacks=run.rollbacks,
            max_rollbacks=run.cfg.train.max_rollbacks,
            checkpoint_name=run.last_checkpoint.name if run.last_checkpoint else None,
        )
        run._alert(decision.level, decision.message, code)
        if decision.action == "stop":
            run._failure = decision.failure
            run._stop_requested = decision.save_on_stop
        elif decision.action == "rollback":
            self.rollback(ROLLBACK_LR_FACTOR)
        elif run.state == RunState.RUNNING:
            run._set_state(RunState.PAUSED, code)

    def rollback(self, factor: float) -> None:
        """Reload the newest checkpoint and go on with the LR multiplied by `factor`."""
        run = self.run
        run._pending = []
        found = ckpt.latest_checkpoint(run.run_dir) if run.run_dir else None
        if found is None:
            run._alert(
                "warning",
                "no checkpoint to roll back to yet: lower the LR (l) and resume",
                "rollback",
            )
            return
        state = ckpt.load_checkpoint(found)
        old_scale = run.lr_scale
        run.checkpointer.restore(state)
        run.rollbacks += 1
        run.spikes.reset()
        run.lr_scale = old_scale * factor
        schedule = lr_factor(run.step, run.cfg) * run.cfg.optim.lr
        run.emit(
            LrChanged(
                step=run.step,
                old_lr=schedule * old_scale,
                new_lr=schedule * run.lr_scale,
                scale=run.lr_scale,
            )
        )
        run._alert(
            "info", f"rolled back to step {run.step} ({found.name}), LR x{factor:g}", "rollback"
        )
        run._set_state(RunState.RUNNING, "rolled back")

    def shrink_micro_batch(self) -> bool:
        """After an out-of-memory error: retry with half the micro-batch and twice the
        accumulation, or pause (engine/faults.py decides). False when it paused."""
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
