"""The training run: a loop that takes commands and emits events.

`Trainer(cfg)` is cheap to build; `run()` does the work in the calling thread (a Textual worker
in the cockpit, the main thread headless) and returns the final state. Commands may come from
any thread; they are queued and applied at the next step boundary, each acknowledged by an
event. The loop reads losses back from the device only every `log_every` steps, so the GPU is
not synchronised on every step.

The Trainer holds the run's state and the loop; its parts do the rest, each in its own module:
engine/train/setup.py (setting the run up), step.py (one update), command_handler.py (commands at a
step boundary), periodic_work.py (evals, samples and checkpoints at their intervals),
checkpointer.py, fault_handler.py (NaN, spike, out of memory), ranks.py (under torchrun) and
run_end.py (the final state, then letting go).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engine.checkpoint import store as ckpt
from engine.checkpoint.checkpointer import Checkpointer
from engine.config.run_config import ConfigError, RunConfig
from engine.data.errors import DataError, PreparationStopped
from engine.distributed.command_exchange import RankSync
from engine.distributed.rank_report import RankReporter
from engine.distributed.ranks import rank_lost_message, rank_states
from engine.distributed.world import World, is_collective_failure, mean_over_ranks
from engine.events import Eval, Event, EventQueue, RunState
from engine.model.schedule import lr_multiplied
from engine.rundir.layout import write_error_log
from engine.rundir.metrics_log import MetricsWriter
from engine.train.cadence import do_work, work_due
from engine.train.command_queue import CommandQueue
from engine.train.commands import CommandHandler
from engine.train.counters import Counters
from engine.train.disk_full import DiskWait
from engine.train.fault_handler import FaultHandler
from engine.train.closing import finish, finish_already_finished, release, wind_down
from engine.train.garbage import settle_garbage_collector
from engine.train.readback import PendingStep, read_losses, step_events
from engine.train.reporter import Reporter
from engine.train.setup import accept_resume, announce, build, instrument, open_run_dir
from engine.train.step import train_step
from engine.train.throughput import ThroughputWindow

if TYPE_CHECKING:
    from engine.telemetry.poller import TelemetryPoller  # imported when a run polls (run())

MEMORY_REPORT_INTERVAL_S = 20.0  # the breakdown walks every tensor: a few times a minute is enough


class Trainer:
    outlives_viewer = False  # inside the app: leaving the app stops the run (EngineHandle)
    read_only = False  # the app may command it
    replayed_until = 0.0  # a resume's history is older than its RunStarted (EngineHandle)
    recorded = False  # a live run (EngineHandle)

    def __init__(
        self,
        cfg: RunConfig,
        *,
        run_dir: str | Path | None = None,
        data_path: str | None = None,
        resume: str | Path | None = None,
        resume_overrides: Iterable[str] = (),
        sinks: Iterable[Callable[[Event], None]] = (),
        telemetry: bool = True,
        event_capacity: int = 20_000,
        interactive: bool = True,
        allow_data_change: bool = False,
        world: World | None = None,
    ) -> None:
        self.cfg = cfg
        # under torchrun: this process's rank (engine/distributed/world.py); rank 0 alone writes the
        # metrics file, serves the socket and owns the run directory
        self.world = world or World.from_env()
        self.sync = RankSync(self.world)  # the per-step command exchange (no-op for one rank)
        self.ranks: list[tuple[str, int]] = []  # (host, pid) of every rank, once joined
        self.run_dir = (
            Path(run_dir)
            if run_dir
            else (Path(resume) if resume and Path(resume).is_dir() else None)
        )
        self.data_path = data_path
        self.allow_data_change = allow_data_change  # resume on a corpus whose sha256 changed
        self.resume_from = Path(resume) if resume else None
        self.resume_overrides = list(resume_overrides)
        self.resume_notes: list[str] = []  # what the resume changed or kept (RunStarted.notes)
        self._already_finished: str | None = None  # resuming a run that has nothing left to do
        self.events = EventQueue(event_capacity)
        # opened once the run has a directory (_setup); a write that fails (a full disk) keeps
        # its records and queues the pause (engine/train/disk_full.py)
        self.metrics = MetricsWriter(on_failure=lambda: self._commands.put("disk_full"))
        self.sinks = [self.metrics, *sinks] if self.world.is_main else list(sinks)
        # every rank's readings and step times, gathered by rank 0 (engine/distributed/rank_report.py)
        self.rank_report = RankReporter(self.world)
        if self.world.distributed:
            self.sinks.append(self.rank_report)
        self.telemetry_enabled = telemetry
        self.counters = Counters()
        self.reporter = Reporter(
            events=self.events,
            sinks=self.sinks,
            counters=self.counters,
            before_final_state=self._before_final_state,
        )
        self._last_eval: Eval | None = None  # a checkpoint at its step may become best.pt
        self._checkpoint_is_best = False  # recorded in the checkpoint being written
        self.last_checkpoint: Path | None = None
        self.checkpointer = Checkpointer(self)  # saves and restores (engine/checkpoint/checkpointer.py)
        self._commands = CommandQueue()  # put by the methods below, from any thread
        self.command_handler = CommandHandler(self)  # carried out between steps
        self._stop_requested: bool | None = None  # None: not requested; else: checkpoint first?
        self._stop_reason = "stopped by user"  # the final state's reason: who or what stopped it
        # The first stop asked for, seen at once (any thread): the corpus preparation polls it,
        # as there is no step boundary to take the command at before the first step.
        self._stop_asked: str | None = None
        self._failure: str | None = None  # the run gave up (a NaN it could not recover from)
        self.interactive = (
            interactive  # a person is watching: anomalies pause rather than roll back
        )
        self.faults = FaultHandler(self)  # anomalies, rollbacks, OOM (engine/train/fault_handler.py)
        self.disk = DiskWait(self)  # paused for a full disk, retrying (engine/train/disk_full.py)
        # stopped and closed before the final state is recorded (run_end.wind_down)
        self.telemetry_poller: TelemetryPoller | None = None
        self.log_sinks: list[Callable[[Event], None]] = []  # TensorBoard... (engine/rundir/sinks.py)

    # ------------------------------------------------------------------ commands (any thread)
    def pause(self) -> None:
        self._commands.put("pause")

    def resume(self) -> None:
        self._commands.put("resume")

    def checkpoint(self) -> None:
        self._commands.put("checkpoint")

    def set_lr(self, lr: float) -> None:
        """Apply `lr` from the next step; kept as a multiplier so the schedule's shape goes on."""
        self._commands.put("set_lr", float(lr))

    def scale_lr(self, factor: float) -> None:
        self._commands.put("scale_lr", float(factor))

    def sample(self) -> None:
        self._commands.put("sample")

    def evaluate(self) -> None:
        self._commands.put("evaluate")

    def stop(self, checkpoint: bool = True, reason: str = "stopped by user") -> None:
        """Stop at the next step boundary, saving a checkpoint first unless told not to (or
        nothing was trained yet: step 0). `reason` ("SIGTERM", "quit", ...) is recorded in the
        final state; the first stop asked for wins. While the corpus is prepared it stops the
        preparation at once, and the run ends with nothing on disk."""
        if self._stop_asked is None:
            self._stop_asked = reason
        self._commands.put("stop", (bool(checkpoint), reason))

    def rollback(self, lr_factor: float = 0.5) -> None:
        """Reload the last checkpoint and continue with the LR multiplied by `lr_factor`."""
        self._commands.put("rollback", float(lr_factor))

    # ------------------------------------------------------------------ events
    def drain_events(self) -> list[Event]:
        """Remove and return the queued events, oldest first (engine.contract.EngineHandle)."""
        return self.events.drain()

    @property
    def dropped_events(self) -> int:
        """Events the bounded queue dropped because nobody drained it in time."""
        return self.events.dropped

    def emit(self, event: Event) -> None:
        """Queue an event for the UI and hand it to the sinks (thread-safe)."""
        self.reporter.emit(event)

    @property
    def state(self) -> str:
        return self.reporter.state

    def _set_state(self, state: str, reason: str = "") -> None:
        self.reporter.set_state(state, reason)

    def _alert(self, level: str, message: str, code: str = "") -> None:
        self.reporter.alert(level, message, code)

    def _before_final_state(self, state: str) -> None:
        wind_down(self)  # no telemetry reading or closing alert after the final state
        control = getattr(self, "control", None)  # rank 0's socket, once the run has a directory
        if control is not None:
            control.end_journal(state)  # nor a viewer's record

    # ------------------------------------------------------------------ counters
    # The run's counters, read by the app, the control socket and the tests.
    @property
    def step(self) -> int:
        return self.counters.step

    @step.setter
    def step(self, value: int) -> None:
        self.counters.step = value

    @property
    def tokens(self) -> int:
        return self.counters.tokens

    @tokens.setter
    def tokens(self, value: int) -> None:
        self.counters.tokens = value

    @property
    def lr_scale(self) -> float:
        return self.counters.lr_scale

    @lr_scale.setter
    def lr_scale(self, value: float) -> None:
        self.counters.lr_scale = value

    @property
    def current_lr(self) -> float:
        return self.counters.current_lr

    @current_lr.setter
    def current_lr(self, value: float) -> None:
        self.counters.current_lr = value

    @property
    def train_time_s(self) -> float:
        return self.counters.train_time_s

    @train_time_s.setter
    def train_time_s(self, value: float) -> None:
        self.counters.train_time_s = value

    @property
    def best_val(self) -> float:
        return self.counters.best_val

    @best_val.setter
    def best_val(self, value: float) -> None:
        self.counters.best_val = value

    @property
    def rollbacks(self) -> int:
        return self.counters.rollbacks

    @rollbacks.setter
    def rollbacks(self, value: int) -> None:
        self.counters.rollbacks = value

    # ------------------------------------------------------------------ the run
    def close(self) -> None:
        """EngineHandle: a Trainer that never ran holds nothing to let go."""

    def run(self, should_stop: Callable[[], bool] | None = None) -> str:
        """Train until finished, stopped or failed; returns the final state. Never raises for
        a problem with the run: that becomes an Alert and the FAILED state."""
        self._should_stop = should_stop or (lambda: False)
        self._set_state(RunState.STARTING)
        try:
            self._setup()
            if self.telemetry_enabled:
                from engine.telemetry.poller import (
                    start_telemetry,  # only a run with telemetry needs it
                )

                self.telemetry_poller = start_telemetry(
                    self.emit, lambda message: self._alert("warning", message, "telemetry")
                )
            self._loop()
        except PreparationStopped:
            # Before the run directory exists: nothing was written, there is nothing to save.
            reason = f"{self._stop_asked or 'quit'} while preparing the corpus"
            self._set_state(RunState.STOPPED, reason)
        except ConfigError as e:
            self._fail(str(e), "config")
        except DataError as e:
            self._fail(str(e), "data")
        except ckpt.CheckpointError as e:
            self._fail(str(e), "checkpoint")
        except Exception as e:  # anything else: keep the details on disk, one line on screen
            log = write_error_log(self.run_dir)
            where = f" (details in {log})" if log else ""
            if self.world.distributed and self.ranks and is_collective_failure(e):
                self._fail(rank_lost_message(self), "rank")
            else:
                self._fail(f"{type(e).__name__}: {e}{where}", "crash")
        finally:
            release(self)  # engine/train/finish.py
        return self.state

    def preparation_should_stop(self) -> bool:
        """The corpus preparation should give up: a stop was asked for or the app is closing."""
        return self._stop_asked is not None or self._should_stop()

    def _fail(self, message: str, code: str) -> None:
        self._alert("error", message, code)
        self._set_state(RunState.FAILED, message)

    def _setup(self) -> None:
        """Accept the resume, build the run, and only then create its directory and announce it."""
        state = accept_resume(self)  # engine/train/setup.py
        if self._already_finished is not None:
            return  # _loop says so; nothing is touched
        build(self, state)
        open_run_dir(self)
        instrument(self)
        announce(self, state)
        settle_garbage_collector()

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_state(self, weights: bool = True) -> dict[str, Any]:
        # Tensors and plain data only: the file loads with torch.load(weights_only=True).
        # weights=False: a sharded run's, whose weights and optimizer go into its shards.
        heavy = (
            {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
            if weights
            else {}
        )
        return {
            "version": ckpt.FORMAT_VERSION,
            **heavy,
            "scaler": self.scaler.state_dict(),
            **self.counters.state_dict(),  # step, lr_scale, train_time_s, tokens, best_val
            "is_best": self._checkpoint_is_best,
            "rng": ckpt.global_rng_state(self.device.type),
            "batch_rng": self.train_batches.generator.get_state(),
            # every rank's own batch order and RNG (rank 0's are the two above): an exact
            # resume at the same world size
            "world_size": self.world.world_size,
            **rank_states(self),
            "sample_rng": self.sample_generator.get_state(),
            "config": ckpt.plain_data(self.cfg.to_dict()),
            "tokenizer": ckpt.plain_data(self.data.tokenizer.to_meta()),
            "data_meta": ckpt.plain_data(self.data.meta),
            "data_source": ckpt.plain_data(self.data.record),
        }

    # ------------------------------------------------------------------ the loop
    def _flush(self) -> None:
        """Read pending losses back from the device (one sync) and emit their Step events."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        # the sync, timed inside the window; across ranks, the mean loss of the whole batch
        losses, norms = read_losses(pending, lambda t: mean_over_ranks(t, self.world))
        tokens_per_s, step_time = self.window.rates(len(pending), self.cfg.tokens_per_step)
        for event in step_events(
            pending,
            losses,
            norms,
            tokens_per_s=tokens_per_s,
            step_time_s=step_time,
            tokens_after=self.tokens,
            tokens_per_step=self.cfg.tokens_per_step,
            # each device's share of the world's throughput against one device's peak
            mfu=self.peak_meter.mfu(tokens_per_s / self.world.world_size, self.flops_per_token),
        ):
            self.emit(event)
        for p, loss in zip(pending, losses, strict=True):
            if not math.isfinite(loss):
                self.faults.anomaly(f"loss is not finite at step {p.step}", "nan")
                break
            if self.spikes.observe(loss):
                self.faults.anomaly(
                    f"loss spike at step {p.step}: {loss:.4f} against a moving average of {self.spikes.mean:.4f}",
                    "spike",
                )
                break
        self.window.restart()

    def _train_step(self, report_memory: bool = False) -> None:
        """One update (engine/train/step.py), with the optimizer of now: a restore replaces it."""
        t_start = time.perf_counter()
        factor = lr_multiplied(self.step, self.cfg, self.lr_scale)  # never past MAX_LR
        outcome = train_step(self, self.optimizer, self.step, factor, report_memory)
        if outcome.memory is not None:
            self.emit(outcome.memory)
        if outcome.refused is not None:
            self._flush()
            self.faults.anomaly(outcome.refused, "nan")
            return
        pending = outcome.pending
        self.rank_report.add_step(time.perf_counter() - t_start, pending.data_time_s)
        self.step += 1
        self.tokens += self.cfg.tokens_per_step
        self.current_lr = pending.lr
        self._pending.append(pending)

    def _loop(self) -> None:
        if self._already_finished is not None:
            finish_already_finished(self)  # engine/train/finish.py
            return
        cfg = self.cfg
        self._pending: list[PendingStep] = []
        self.window = ThroughputWindow()
        self._set_state(RunState.RUNNING, "resumed from checkpoint" if self.resume_from else "")
        self.model.train()
        last_memory_report = -math.inf
        while self.step < cfg.train.max_steps:
            t_commands = time.perf_counter()
            self.command_handler.apply_queued()
            # Time paused or blocked on a command is not training, any more than an evaluation
            # is: keep it out of the next Step's throughput and step time.
            self.window.exclude(t_commands, bool(self._pending))
            if self._should_stop() and self._stop_requested is None and not self.world.distributed:
                self._stop_requested = True  # the app is closing: keep the run
            if self._stop_requested is not None:
                break
            if self.state != RunState.RUNNING:
                continue
            t0 = time.perf_counter()
            report_memory = time.monotonic() - last_memory_report > MEMORY_REPORT_INTERVAL_S
            if report_memory:
                last_memory_report = time.monotonic()
            step_before, rollbacks_before = self.step, self.rollbacks
            try:
                self._train_step(report_memory)
            except torch.OutOfMemoryError:
                self.faults.shrink_micro_batch()  # retries with a smaller micro-batch, or pauses
                continue
            self.train_time_s += time.perf_counter() - t0
            if self.step == step_before:
                continue  # the step was refused (non-finite): nothing new to evaluate or save
            due = work_due(self)  # engine/train/cadence.py
            # Read the losses back before any work due at this step, and at the last step, so
            # an anomaly among them is handled (rolled back, paused) before that work is done.
            if len(self._pending) >= self.log_every or any(due) or self.step >= cfg.train.max_steps:
                self._flush()
            if (
                self.rollbacks != rollbacks_before
                or self._stop_requested is not None
                or self.state != RunState.RUNNING
            ):
                # Rolled back (the restored step had its eval, sample and checkpoint already),
                # giving up, or paused on an anomaly (these weights are suspect: no checkpoint).
                self.window.exclude(time.perf_counter(), bool(self._pending))
                continue
            t_extra = time.perf_counter()
            do_work(self, due)
            self.window.exclude(t_extra, bool(self._pending))

        finish(self)  # engine/train/finish.py
