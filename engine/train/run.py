"""A run built whole (`Run`, made by engine.train.build_run.build_run) and its training loop.

`Run.train` reads top to bottom: the commands at each step boundary, one update, the losses
read back every `log_every` steps (not on every step: the device is not synchronised), the
work due (evaluate, sample, checkpoint), and at the end the save and why the run ended.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.checkpoint.checkpointer import Checkpointer
from engine.config.run_config import RunConfig
from engine.distributed.rank_report import RankReporter
from engine.distributed.world import World
from engine.events import Eval, RunState
from engine.optim.schedule import lr_multiplied
from engine.train.cadence import Readings, time_budget_note, val_target_note, work_due
from engine.train.commands import CommandHandler, StopRequest
from engine.train.config_file import ReplayPlan
from engine.train.counters import Counters
from engine.train.disk_full import DiskWait
from engine.train.fault_handler import FaultHandler
from engine.train.live_settings import LiveSettings
from engine.train.readback import PendingSteps
from engine.train.reporter import Reporter
from engine.train.setup import Instruments, RunParts
from engine.train.step import train_step
from engine.train.thread_tuner import FixedThreads, ThreadTuner

MEMORY_REPORT_INTERVAL_S = 20.0  # the breakdown walks every tensor: a few times a minute is enough


def weights_finite(model: torch.nn.Module) -> bool:
    """No NaN or infinity in any weight: weights fit to be saved as the newest checkpoint."""
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


@dataclass(eq=False)
class Run:
    """Everything the training loop uses, built whole by `build_run`."""

    cfg: RunConfig  # shared by the parts and changed in place by a `set`
    run_dir: Path
    resumed: bool
    world: World
    counters: Counters
    reporter: Reporter
    stopping: StopRequest
    should_stop: Callable[[], bool]  # the app is closing
    rank_report: RankReporter
    replay_plan: ReplayPlan  # the changes of a replayed config.toml, each made at its step
    start_config: RunConfig  # config.toml's starting values
    parts: RunParts
    instruments: Instruments
    disk: DiskWait
    checkpointer: Checkpointer
    live: LiveSettings
    pending: PendingSteps
    faults: FaultHandler
    readings: Readings
    commands: CommandHandler
    threads: ThreadTuner | FixedThreads  # CPU threads chosen by measurement, or a fixed count

    def train(self) -> None:
        """Train until the last step, a stop or a failure, then finish."""
        cfg, counters, report, stopping = self.cfg, self.counters, self.reporter, self.stopping
        pending, instruments = self.pending, self.instruments
        report.set_state(RunState.RUNNING, "resumed from checkpoint" if self.resumed else "")
        self.parts.model.train()
        last_memory_report = -math.inf
        last_eval: Eval | None = None  # a checkpoint at its step may become best.pt
        # train.time_budget: a resumed run whose budget was spent before it stopped trains no step more
        while (
            counters.step < cfg.train.max_steps
            and time_budget_note(cfg, counters.train_time_s) is None
        ):
            t_commands = time.perf_counter()
            for change in self.replay_plan.due(counters.step):  # a replay's, at the same boundary
                self.commands.replay(change)
            self.commands.apply_queued()
            # Time paused or blocked on a command is not training, any more than an evaluation
            # is: keep it out of the next Step's throughput and step time.
            pending.exclude(t_commands)
            if self.should_stop() and not self.world.distributed:
                stopping.ask(True)  # the app is closing: keep the run
            if stopping.requested:
                break
            if report.state != RunState.RUNNING:
                continue
            t0 = time.perf_counter()
            report_memory = time.monotonic() - last_memory_report > MEMORY_REPORT_INTERVAL_S
            if report_memory:
                last_memory_report = time.monotonic()
            rollbacks_before = counters.rollbacks
            tokens_before = counters.tokens
            try:
                self.train_one_step(report_memory)
            except torch.OutOfMemoryError:
                # retries with a smaller micro-batch, or pauses; the update keeps its size
                if self.faults.shrink_micro_batch():
                    instruments.step.micro_steps = cfg.train.grad_accum
                continue
            step_time = time.perf_counter() - t0
            counters.train_time_s += step_time
            over_budget = time_budget_note(cfg, counters.train_time_s) is not None
            # the update alone: evaluations and samples come after
            self.threads.step_done(step_time, max(0, counters.tokens - tokens_before))
            due = work_due(counters.step, cfg, self.readings.val_points)
            # Read the losses back before any work due at this step, and at the last step, so
            # an anomaly among them is handled (rolled back, paused) before that work is done.
            if (
                len(pending) >= instruments.log_every
                or any(due)
                or counters.step >= cfg.train.max_steps
                or over_budget
            ):
                self.readings.flush()
            if (
                counters.rollbacks != rollbacks_before
                or stopping.requested
                or report.state != RunState.RUNNING
            ):
                # Rolled back (the restored step had its eval, sample and checkpoint already),
                # giving up, or paused on an anomaly (these weights are suspect: no checkpoint).
                pending.exclude(time.perf_counter())
                continue
            if over_budget:  # train.time_budget: the final evaluation and checkpoint are the end's
                pending.exclude(time.perf_counter())
                break
            # The due work in this order: a checkpoint after an eval at its step may become
            # best.pt.
            t_extra = time.perf_counter()
            if due.evaluate:
                last_eval = self.readings.evaluate()
                if val_target_note(last_eval, cfg, counters.step):  # train.stop_at_val
                    pending.exclude(t_extra)
                    break  # finished: its sample and checkpoint are the end's
            if due.sample:
                self.readings.sample()
            if due.checkpoint:
                self.checkpointer.save_and_mark("interval", last_eval)
            pending.exclude(t_extra)
        self.finish(last_eval)

    def train_one_step(self, report_memory: bool) -> None:
        """One update, with the optimizer of now (a restore replaces it) and the LR factor of
        the schedule and the counters: the one place the optimizer's LRs are written."""
        t_start = time.perf_counter()
        counters, pending = self.counters, self.pending
        factor = lr_multiplied(counters.step, self.cfg, counters.lr_scale)  # never past MAX_LR
        # an update refused since the last read-back holds this one back too
        outcome = train_step(
            self.instruments.step, self.parts.optimizer, counters.step, factor, report_memory,
            pending.held_back,
        )  # fmt: skip
        if outcome.memory is not None:
            self.reporter.emit(outcome.memory)
        step = outcome.pending
        self.rank_report.add_step(time.perf_counter() - t_start, step.data_time_s)
        counters.step += 1
        counters.tokens += pending.tokens_of(step)  # a schedule varies it
        counters.current_lr = step.lr
        pending.add(step)

    def finish(self, last_eval: Eval | None) -> None:
        """The loop is over: save and say why it ended (stopped, failed) or that it finished."""
        report, stopping, counters, cfg = self.reporter, self.stopping, self.counters, self.cfg
        self.readings.flush()
        if stopping.requested:
            # Step 0: nothing trained, nothing to save (the same seed makes the same weights).
            # Failed: keep the weights only if they are intact, never a NaN as the newest.
            if (
                stopping.save
                and counters.step > 0
                and (stopping.failure is None or weights_finite(self.parts.model))
            ):
                # saving -> stopped: the state it was in is not gone back to in between
                self.checkpointer.save("stop", ending=True, wait=False)
            if stopping.failure is not None:
                report.set_state(RunState.FAILED, stopping.failure)
            else:
                report.set_state(RunState.STOPPED, stopping.reason)
            return
        reached = val_target_note(last_eval, cfg, counters.step)
        if reached is None:  # the evaluation that reached the target is the final one
            last_eval = self.readings.evaluate()
        if cfg.sample.interval:
            self.readings.sample()
        saved = self.checkpointer.save_and_mark("final", last_eval, ending=True)
        # A full disk: paused until the final checkpoint is written, unless the run is stopped
        # meanwhile.
        while saved is None and self.disk.checkpoint is not None and not stopping.requested:
            if self.should_stop():
                break
            self.commands.apply_queued()
        if self.disk.checkpoint is not None:
            report.set_state(
                RunState.FINISHED, f"the final checkpoint was not written ({self.disk.failure})"
            )
            return
        budget = time_budget_note(cfg, counters.train_time_s)
        report.set_state(RunState.FINISHED, reached or budget or "")
