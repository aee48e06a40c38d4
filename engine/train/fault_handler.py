"""Carrying out the fault rules' decisions: pausing, rolling back, stopping, retrying.

A NaN or a loss spike pauses, rolls back to the last checkpoint or stops the run; an
out-of-memory error retries with a smaller micro-batch or pauses. The rules decide (pure
functions, tested alone); the FaultHandler carries their decision out on the run's parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engine.checkpoint import store as ckpt
from engine.distributed.world import World
from engine.events import LrChanged, RunState
from engine.optim.schedule import LrChange, lr_change, lr_plan
from engine.train.faults import (
    ROLLBACK_LR_FACTOR,
    AnomalyDecision,
    FaultAction,
    SpikeDetector,
    decide_anomaly,
    decide_out_of_memory,
)

if TYPE_CHECKING:
    from engine.checkpoint.checkpointer import Checkpointer, OptimizerHolder
    from engine.config.run_config import RunConfig
    from engine.data.batches import BatchSampler
    from engine.train.commands import StopRequest
    from engine.train.counters import Counters
    from engine.train.reporter import Reporter


NO_CHECKPOINT = "no checkpoint to roll back to yet: lower the LR and resume"


@dataclass(frozen=True)
class Rollback:
    """A rollback ready to apply: the checkpoint read whole, and the LR change checked."""

    path: Path
    state: dict[str, Any]
    factor: float
    change: LrChange


class FaultHandler:
    """Anomalies, rollbacks and out-of-memory retries of one run. `interactive`: a person is
    watching (an anomaly pauses rather than rolls back); `forget_pending`: drop the steps not
    read back yet (a rollback undoes them); `settings_back(state, lr_scale)`: after a rollback
    to `state`, its settings and timeline in force again; returns them as one line ('': none)."""

    def __init__(
        self,
        *,
        cfg: RunConfig,
        interactive: bool,
        world: World,
        checkpointer: Checkpointer,
        counters: Counters,
        reporter: Reporter,
        stopping: StopRequest,
        spikes: SpikeDetector,
        model: torch.nn.Module,
        optimizer: OptimizerHolder,
        batches: BatchSampler,
        device_type: str,
        forget_pending: Callable[[], None],
        settings_back: Callable[[dict[str, Any], float], str] = lambda state, lr_scale: "",
    ) -> None:
        self.cfg = cfg
        self.interactive = interactive
        self.world = world
        self.checkpointer = checkpointer
        self.counters = counters
        self.reporter = reporter
        self.stopping = stopping
        self.spikes = spikes
        self.model = model
        self.holder = optimizer
        self.batches = batches
        self.device_type = device_type
        self.forget_pending = forget_pending
        self.settings_back = settings_back

    def anomaly(self, message: str, code: str) -> None:
        """A NaN or a spike: the step was not applied; carry out what the rules decide."""
        last = self.checkpointer.last_checkpoint
        decision = self.decide(message, last.name if last else None)
        rollback: Rollback | str | None = None
        if decision.action == FaultAction.ROLL_BACK:
            rollback = self.prepare_rollback(ROLLBACK_LR_FACTOR)
            if isinstance(rollback, str):
                # The checkpoint cannot be read: decided as with none, which keeps the weights
                # in memory (saved on the way out, or paused for a person).
                decision = self.decide(message, None, checkpoint_problem=rollback)
        self.reporter.alert(decision.level, decision.message, code)
        if decision.action == FaultAction.STOP:
            assert decision.failure is not None
            self.stopping.give_up(decision.failure, decision.save_on_stop)
        elif isinstance(rollback, Rollback):
            self.apply_rollback(rollback)
        elif self.reporter.state == RunState.RUNNING:
            self.reporter.set_state(RunState.PAUSED, code)

    def decide(
        self, message: str, checkpoint_name: str | None, checkpoint_problem: str | None = None
    ) -> AnomalyDecision:
        train = self.cfg.train
        return decide_anomaly(
            message,
            policy=train.on_anomaly,
            interactive=self.interactive,
            rollbacks=self.counters.rollbacks,
            max_rollbacks=train.max_rollbacks,
            checkpoint_name=checkpoint_name,
            checkpoint_problem=checkpoint_problem,
        )

    def rollback(self, factor: float, named: str | None = None) -> None:
        """The rollback command: reload the newest checkpoint and go on with the LR multiplied
        by `factor`; refused in one warning line when there is no checkpoint, it cannot be
        read, it is not the one `named` (the file the user was asked about), or `factor` gives
        no LR in range, and the run goes on (or stays paused) with its weights in memory,
        untouched."""
        rollback = self.prepare_rollback(factor, named)
        if isinstance(rollback, str):
            if rollback != NO_CHECKPOINT:  # that one says already what to do
                now = "stays paused" if self.reporter.state == RunState.PAUSED else "goes on"
                go_on = f"the run {now} from step {self.counters.step} with the weights in memory"
                rollback = f"rollback refused: {rollback}; {go_on}"
            self.reporter.alert("warning", rollback, "rollback")
            return
        self.apply_rollback(rollback)

    def prepare_rollback(self, factor: float, named: str | None = None) -> Rollback | str:
        """The newest checkpoint read whole (only if it is the one `named`, when one is) and
        `factor` checked, before anything of the run is changed; the one-line reason when it
        cannot be done."""
        cfg, counters = self.cfg, self.counters
        # `factor` is checked as set_lr and scale_lr are: first at this step (a factor of 0 or
        # -2 is refused before any file is read), then at the step the checkpoint returns to,
        # whose planned LR may be another
        change = lr_change("scale_lr", factor, lr_plan(counters.step, cfg, counters.lr_scale))
        if isinstance(change, str):
            return change.removeprefix("LR change refused: ")  # "x-2 is not a factor ..."
        run_dir = self.checkpointer.run_dir
        found = ckpt.latest_checkpoint(run_dir) if run_dir else None
        if found is None:
            return NO_CHECKPOINT
        if named is not None and Path(named).name != found.name:
            # saved after the question was asked (another viewer's c, a periodic save): a yes
            # to one checkpoint is no yes to another
            return (
                f"the newest checkpoint is {found.name}, saved after the question named "
                f"{Path(named).name}; r asks again"
            )
        try:
            state = ckpt.load_checkpoint(found)
            ckpt.check_model_state(self.model, state)
        except ckpt.CheckpointError as e:
            return str(e)
        plan = lr_plan(int(state["step"]), cfg, counters.lr_scale)
        change = lr_change("scale_lr", factor, plan)
        if isinstance(change, str):
            return change.removeprefix("LR change refused: ")
        return Rollback(found, state, factor, change)

    def apply_rollback(self, rollback: Rollback) -> None:
        counters, report = self.counters, self.reporter
        self.forget_pending()  # the steps after the checkpoint are undone, their losses with them
        self.checkpointer.restore(rollback.state)
        counters.rollbacks += 1
        self.spikes.reset()
        change = rollback.change
        counters.lr_scale = change.scale
        # the changes made after the checkpoint are undone with its steps
        back = self.settings_back(rollback.state, change.scale)
        report.emit(
            LrChanged(
                step=counters.step, old_lr=change.old_lr, new_lr=change.new_lr, scale=change.scale
            )
        )
        settings = f"; settings back to those at step {counters.step}: {back}" if back else ""
        report.alert(
            "info",
            f"rolled back to step {counters.step} ({rollback.path.name}), LR x{rollback.factor:g}"
            f"{settings}",
            "rollback",
        )
        report.set_state(RunState.RUNNING, "rolled back")

    def shrink_micro_batch(self) -> bool:
        """After an out-of-memory error: retry with half the micro-batch and twice the
        accumulation, or pause (the rules decide). False when it paused."""
        t = self.cfg.train
        if self.world.distributed:
            # one rank alone cannot change its micro-batch: the others are in the same step
            raise RuntimeError(
                f"out of memory on rank {self.world.rank} at batch_size {t.batch_size}; restart "
                "with a smaller train.batch_size (and a larger train.grad_accum)"
            )
        self.holder.optimizer.zero_grad(set_to_none=True)
        if self.device_type == "cuda":
            torch.cuda.empty_cache()
        decision = decide_out_of_memory(t.batch_size, t.grad_accum)
        if decision.retry is not None:
            t.batch_size, t.grad_accum = decision.retry
            self.batches.batch_size = t.batch_size
        self.reporter.alert(decision.level, decision.message, "oom")
        if decision.action == FaultAction.PAUSE:
            self.reporter.set_state(RunState.PAUSED, "out of memory")
        return decision.retry is not None
