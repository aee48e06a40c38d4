"""Carrying out a run's commands at a step boundary, and waiting there while paused.

The Trainer's public methods (pause, set_lr, stop, ...) only queue a command, from any thread
(engine/train/command_queue.py); the loop calls `apply_queued` between steps, where each command is
carried out and acknowledged by an event. Under torchrun every rank carries out the same
commands at the same step (engine/distributed/ranks.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.distributed.ranks import apply_commands_on_every_rank
from engine.events import LrChanged, RunState
from engine.model.optimizers import applied_lr, set_lr_factor
from engine.model.schedule import lr_change, lr_multiplied, lr_plan

if TYPE_CHECKING:
    from engine.train.trainer import Trainer


class CommandHandler:
    """The commands of one run (`run`: its trainer), carried out on the loop's thread."""

    def __init__(self, run: Trainer) -> None:
        self.run = run

    def apply_queued(self) -> None:
        """Run queued commands; while paused, block here until resumed or stopped."""
        run = self.run
        if run.world.distributed:
            apply_commands_on_every_rank(run)
            return
        while command := run._commands.take(run.state == RunState.PAUSED, run._should_stop):
            self.carry_out(*command)
            if run._stop_requested is not None:
                return

    def carry_out(self, name: str, arg: Any) -> None:
        """One command; one that does not fit the state (resume while running) does nothing."""
        run = self.run
        if name in ("resume", "checkpoint") and run.disk.waiting and not run.disk.retry(True):
            return  # paused for a full disk, still no room: said in one line (disk_full.py)
        if name == "pause" and run.state == RunState.RUNNING:
            run._flush()
            run._set_state(RunState.PAUSED, "paused by user")
        elif name == "resume" and run.state == RunState.PAUSED:
            run._set_state(RunState.RUNNING, "resumed by user")
        elif name == "checkpoint":
            run._flush()
            run.checkpointer.save_manual()
        elif name in ("set_lr", "scale_lr"):
            self.change_lr(name, arg)
        elif name == "sample":
            run._sample()
        elif name == "evaluate":
            run._evaluate()
        elif name == "stop" and run._stop_requested is None:  # the first stop asked for wins
            run._stop_requested, run._stop_reason = arg
        elif name == "rollback":
            run.faults.rollback(arg)
        elif name == "disk_full":  # queued by the metrics writer (engine/train/disk_full.py)
            run.disk.metrics_failed()
        elif name == "disk_retry":  # queued by the disk's retry timer
            run.disk.retry()

    def change_lr(self, name: str, value: float) -> None:
        """set_lr or scale_lr: kept as a multiplier of the schedule, so its shape goes on; a
        typed LR is the LR once warmup is over (engine/model/schedule.py decides, as the dialog does)."""
        run = self.run
        change = lr_change(name, value, lr_plan(run.step, run.cfg, run.lr_scale))
        if isinstance(change, str):
            run._alert("warning", change, "lr")
            return
        if change.unchanged:  # nothing to acknowledge, nothing for the journal
            after = ""
            if change.settled_step > run.step:
                after = f" from step {change.settled_step} (after warmup)"
            run._alert("info", f"LR unchanged: it is {change.settled_lr:.3g}{after} already", "lr")
            return
        run.lr_scale = change.scale
        set_lr_factor(run.optimizer, lr_multiplied(run.step, run.cfg, run.lr_scale))
        run.current_lr = applied_lr(run.optimizer)
        in_warmup = change.settled_step > run.step
        run.emit(
            LrChanged(
                step=run.step,
                old_lr=change.old_lr,
                new_lr=change.new_lr,
                scale=change.scale,
                after_warmup_lr=change.settled_lr if in_warmup else None,
                warmup_ends=change.settled_step if in_warmup else None,
            )
        )
