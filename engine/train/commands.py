"""Carrying out a run's commands at a step boundary, and waiting there while paused.

The run's public methods (pause, set_lr, stop, ...) only queue a command (a dataclass of
engine.train.command_queue), from any thread; the loop calls `apply_queued` between steps,
where each is carried out by its type and acknowledged by an event. An LR change moves the
multiplier in the counters; the next step applies it. Under torchrun every rank carries out the
same commands at the same step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.config.live import LR_SCALE, live_change
from engine.config.replay import replayed_change
from engine.config.timeline import TimedChange
from engine.events import LrChanged, RunState
from engine.optim.schedule import lr_change, lr_multiplied, lr_plan
from engine.train.command_queue import (
    Checkpoint,
    Command,
    DiskFull,
    DiskRetry,
    Evaluate,
    Pause,
    Resume,
    Rollback,
    Sample,
    ScaleLr,
    SetLr,
    SetSettings,
    Stop,
    from_wire,
)
from engine.train.step import lr_at_factor

if TYPE_CHECKING:
    from engine.checkpoint.checkpointer import Checkpointer, OptimizerHolder
    from engine.config.run_config import RunConfig
    from engine.distributed.ranks import RankCommands
    from engine.train.command_queue import CommandQueue
    from engine.train.counters import Counters
    from engine.train.disk_full import DiskWait
    from engine.train.live_settings import LiveSettings
    from engine.train.reporter import Reporter


@dataclass
class StopRequest:
    """Whether the loop stops at this boundary, and how: the first stop asked for wins."""

    save: bool | None = None  # None: not asked; else whether to save a checkpoint first
    reason: str = "stopped by user"  # the final state's reason: who or what stopped it
    failure: str | None = None  # the run gave up (a NaN it could not recover from): FAILED

    @property
    def requested(self) -> bool:
        return self.save is not None

    def ask(self, save: bool, reason: str | None = None) -> None:
        """A stop (a command, the app closing); `reason` None keeps the default one."""
        if self.save is None:
            self.save = save
            if reason is not None:
                self.reason = reason

    def give_up(self, failure: str, save: bool) -> None:
        """The run fails with `failure`, saving its weights first when they are worth it."""
        self.failure, self.save = failure, save


class CommandHandler:
    """The commands of one run, carried out on the loop's thread."""

    def __init__(
        self,
        *,
        queue: CommandQueue,
        reporter: Reporter,
        counters: Counters,
        stopping: StopRequest,
        should_stop: Callable[[], bool],
        cfg: RunConfig,
        optimizer: OptimizerHolder,
        checkpointer: Checkpointer,
        disk: DiskWait,
        rollback: Callable[[float, str | None], None],
        flush: Callable[[], None],
        sample: Callable[[], object],
        evaluate: Callable[[], object],
        rank_commands: RankCommands | None = None,
        live: LiveSettings | None = None,
    ) -> None:
        self.queue = queue
        self.reporter = reporter
        self.counters = counters
        self.stopping = stopping
        self.should_stop = should_stop  # the app is closing: a paused run stops waiting
        self.cfg = cfg
        self.holder = optimizer
        self.checkpointer = checkpointer
        self.disk = disk
        self.rollback = rollback  # to the last checkpoint, with the LR times the factor
        self.flush = flush  # read back the steps still on the device
        self.sample = sample
        self.evaluate = evaluate
        self.rank_commands = rank_commands  # under torchrun: the exchange between the ranks
        self.live = live  # puts a `set` in force

    def apply_queued(self) -> None:
        """Run queued commands; while paused, block here until resumed or stopped."""
        if self.rank_commands is not None:
            self._apply_on_every_rank(self.rank_commands)
            return
        paused = lambda: self.reporter.state == RunState.PAUSED  # noqa: E731
        while command := self.queue.take(paused(), self.should_stop):
            self.carry_out(command)
            if self.stopping.requested:
                return

    def _apply_on_every_rank(self, ranks: RankCommands) -> None:
        """The same commands at the same step on every rank; while paused, the ranks exchange
        every PAUSED_POLL_S until resumed or stopped."""
        while True:
            for name, arg in ranks.take(self.reporter.state == RunState.PAUSED):
                self.carry_out(from_wire(name, arg))
                if self.stopping.requested:
                    return
            if self.reporter.state != RunState.PAUSED:
                return

    def carry_out(self, command: Command) -> None:
        """One command; one that does not fit the state (resume while running) does nothing."""
        report, disk = self.reporter, self.disk
        if isinstance(command, (Resume, Checkpoint)) and disk.waiting:
            if not disk.retry(self.checkpointer, by_user=True):
                return  # paused for a full disk, still no room: said in one line
        match command:
            case Pause() if report.state == RunState.RUNNING:
                self.flush()
                report.set_state(RunState.PAUSED, "paused by user")
            case Resume() if report.state == RunState.PAUSED:
                report.set_state(RunState.RUNNING, "resumed by user")
            case Checkpoint():
                self.flush()
                self.checkpointer.save_manual()
            case SetLr() | ScaleLr():
                self.change_lr(command)
            case SetSettings(settings, by):
                self.change_settings(settings, by)
            case Sample():
                self.sample()
            case Evaluate():
                self.evaluate()
            case Stop(checkpoint, reason):
                self.stopping.ask(checkpoint, reason)  # the first stop asked for wins
            case Rollback(lr_factor, checkpoint):
                self.rollback(lr_factor, checkpoint)
            case DiskFull():
                disk.metrics_failed()
            case DiskRetry():
                disk.retry(self.checkpointer)

    def change_settings(self, settings: Mapping[str, Any], by: str) -> None:
        """A `set`: decided at this boundary from the config, the step and the world's shape
        only, so every rank, handed the same settings, decides and applies alike."""
        report, live = self.reporter, self.live
        if live is None:  # a part built without the run's live settings (tests of the loop)
            report.alert("warning", "set refused: this run takes no live settings", "set")
            return
        if not isinstance(settings, Mapping):
            report.alert("warning", f"set refused: expected settings by name, got {settings!r}", "set")
            return
        # the steps still on the device are counted at the tokens per step they trained with
        self.flush()
        try:
            change = live_change(self.cfg, settings, self.counters.step, check=live.check)
        except (TypeError, ValueError) as e:  # a value no setting can hold (a table, ...)
            change = f"set refused: {e}"
        if isinstance(change, str):
            report.alert("warning", change, "set")
            return
        if not change.changes:  # nothing to acknowledge, nothing for the journal
            asked = ", ".join(f"{key}={value!r}" for key, value in settings.items())
            report.alert("info", f"settings unchanged: {asked} in force already", "set")
            return
        report.emit(live.apply(change, by))

    def change_lr(self, command: SetLr | ScaleLr) -> None:
        """Kept as a multiplier of the schedule, so its shape goes on; a typed LR is the LR
        once warmup is over (the schedule decides, as the dialog does)."""
        counters, report = self.counters, self.reporter
        name, value = ("set_lr", command.lr) if isinstance(command, SetLr) else ("scale_lr", command.factor)
        change = lr_change(name, value, lr_plan(counters.step, self.cfg, counters.lr_scale))
        if isinstance(change, str):
            report.alert("warning", change, "lr")
            return
        if change.unchanged:  # nothing to acknowledge, nothing for the journal
            after = ""
            if change.settled_step > counters.step:
                after = f" from step {change.settled_step} (after warmup)"
            report.alert("info", f"LR unchanged: it is {change.settled_lr:.3g}{after} already", "lr")
            return
        in_warmup = change.settled_step > counters.step
        self.put_lr_scale(
            change.scale,
            command.by,
            LrChanged(
                step=counters.step,
                old_lr=change.old_lr,
                new_lr=change.new_lr,
                scale=change.scale,
                after_warmup_lr=change.settled_lr if in_warmup else None,
                warmup_ends=change.settled_step if in_warmup else None,
            ),
        )

    def put_lr_scale(self, scale: float, by: str, acknowledged: LrChanged) -> None:
        """The LR multiplier `scale` in force from the next step (which writes the optimizer's
        LRs), in the timeline as made by `by`, acknowledged by `acknowledged`."""
        counters = self.counters
        counters.lr_scale = scale
        factor = lr_multiplied(counters.step, self.cfg, scale)
        counters.current_lr = lr_at_factor(self.holder.optimizer, factor)
        if self.live is not None:  # a change of the timeline (config.toml, the checkpoints)
            self.live.timeline.add(counters.step, {LR_SCALE: scale}, by)
        self.reporter.emit(acknowledged)

    def replay(self, entry: TimedChange) -> None:
        """A change of the config.toml this run replays, made at its step as it was made then
        (checked before the run started; refused now only by what this world cannot share)."""
        report, counters, live = self.reporter, self.counters, self.live
        made = replayed_change(self.cfg, entry)
        if isinstance(made, str) or live is None:
            why = made if isinstance(made, str) else "this run takes no live settings"
            report.alert("warning", f"replayed change at step {entry.step} not made: {why}", "set")
            return
        if made.change is not None and made.change.changes:
            if (why := live.check(made.change.config)) is not None:
                report.alert("warning", f"replayed change at step {entry.step} not made: {why}", "set")
                return
            self.flush()  # the steps on the device counted with the tokens per step they had
            report.emit(live.apply(made.change, entry.by, replayed=True))
        if made.lr_scale is not None:
            factor = lr_multiplied(counters.step, self.cfg, made.lr_scale)
            new_lr = lr_at_factor(self.holder.optimizer, factor)
            acknowledged = LrChanged(
                step=counters.step, old_lr=counters.current_lr, new_lr=new_lr, scale=made.lr_scale
            )
            self.put_lr_scale(made.lr_scale, entry.by, acknowledged)
