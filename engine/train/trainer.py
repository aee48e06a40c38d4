"""The training run: a loop that takes commands and emits events.

`Trainer(cfg)` is cheap to build; `run()` does the work in the calling thread (a Textual worker
in the cockpit, the main thread headless) and returns the final state. Commands may come from
any thread; they are queued and applied at the next step boundary, each acknowledged by an
event. The loop reads losses back from the device only every `log_every` steps, so the GPU is
not synchronised on every step.

The Trainer holds the run's state and the loop, which reads top to bottom in `_loop`; each part
it is built from takes only what it uses.
"""

from __future__ import annotations

import copy
import gc
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from engine.checkpoint import store as ckpt
from engine.checkpoint.checkpointer import Checkpointer, Nested, RunDescription
from engine.config.live import SettingsTimeline
from engine.config.run_config import ConfigError, RunConfig
from engine.control.server import ControlServer, serve_run
from engine.data.batches import BatchSampler
from engine.data.errors import DataError, PreparationStopped
from engine.data.resumed_corpus import resume_data_path
from engine.distributed.command_exchange import RankSync
from engine.distributed.rank_report import RankReporter
from engine.distributed.ranks import RankCommands, RngStates, rank_lost_message
from engine.distributed.world import (
    World,
    from_main,
    init_world,
    is_collective_failure,
    leave_world,
    mean_over_ranks,
    rank_device,
    roster,
)
from engine.events import Eval, Event, EventQueue, RunState
from engine.model.gpt import GPT
from engine.optim.optimizers import applied_lr
from engine.optim.schedule import lr_multiplied
from engine.plan.flops import PeakMeter
from engine.rundir.layout import check_new_run_dir, check_run_dir, open_run_dir, write_error_log
from engine.rundir.metrics_log import MetricsWriter, read_history
from engine.rundir.sinks import log_sinks
from engine.rundir.summary import SummarySink
from engine.train.cadence import ValPoint, evaluate, sample, val_target_note, work_due
from engine.train.command_queue import (
    Checkpoint,
    CommandQueue,
    DiskFull,
    Evaluate,
    Pause,
    Resume,
    Rollback,
    Sample,
    ScaleLr,
    SetLr,
    SetSettings,
    Stop,
)
from engine.train.commands import CommandHandler, StopRequest
from engine.train.config_file import ConfigFile, ReplayPlan, start_config
from engine.train.counters import Counters
from engine.train.device import select_device
from engine.train.disk_full import DiskWait
from engine.train.fault_handler import FaultHandler
from engine.train.live_settings import (
    DerivedValues,
    LiveSettings,
    planned_as_followed,
    tokens_as_followed,
)
from engine.train.readback import PendingSteps
from engine.train.reporter import Reporter
from engine.train.setup import (
    Instruments,
    RunParts,
    accept_resume,
    announce,
    build,
    instrument,
)
from engine.train.step import StepParts, train_step

if TYPE_CHECKING:
    from engine.telemetry.poller import TelemetryPoller  # imported when a run polls (run())

MEMORY_REPORT_INTERVAL_S = 20.0  # the breakdown walks every tensor: a few times a minute is enough


# A sink may say something on closing (a TensorBoard writer that could not flush): that becomes
# a warning, reported before the final state where the final state has yet to come.
def close_sinks(sinks: Iterable[Callable[..., Any]], report: Reporter) -> None:
    """Close each sink that can be closed, in order; what one says on closing is a warning."""
    for sink in sinks:
        close = getattr(sink, "close", None)
        problem = close() if close else None
        if isinstance(problem, str):
            report.alert("warning", problem, "log")


def weights_finite(model: torch.nn.Module) -> bool:
    """No NaN or infinity in any weight: weights fit to be saved as the newest checkpoint."""
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def settle_garbage_collector() -> None:
    """Take everything alive now (modules, model, optimizer, the UI's widgets) out of the cyclic
    garbage collector's reach, after collecting what a previous run left behind.

    A full collection walks every tracked object with the GIL held: with torch and Textual
    loaded that is ~250k objects and ~80 ms, during which neither training nor the UI moves
    (measured: the redraw benchmark's p95 outliers and late pause acknowledgements). Frozen
    objects are still freed by reference counting; only cycles among them would outlive the
    run, and the next run's call collects those (it unfreezes first).
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class _LoopParts(NamedTuple):
    checkpointer: Checkpointer
    disk: DiskWait
    faults: FaultHandler
    commands: CommandHandler


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
        runs_root: str | Path = "runs",
        data_path: str | None = None,
        resume: str | Path | None = None,
        resume_overrides: Iterable[str] = (),
        sinks: Iterable[Callable[[Event], None]] = (),
        telemetry: bool = True,
        event_capacity: int = 20_000,
        interactive: bool = True,
        allow_data_change: bool = False,
        world: World | None = None,
        planned_changes: SettingsTimeline | None = None,
    ) -> None:
        self.cfg = cfg
        # under torchrun: this process's rank; rank 0 alone writes the
        # metrics file, serves the socket and owns the run directory
        self.world = world or World.from_env()
        self.sync = RankSync(self.world)  # the per-step command exchange (no-op for one rank)
        self.ranks: list[tuple[str, int]] = []  # (host, pid) of every rank, once joined
        self.run_dir = (
            Path(run_dir)
            if run_dir
            else (Path(resume) if resume and Path(resume).is_dir() else None)
        )
        self.runs_root = Path(runs_root)  # where a new run without run_dir gets its directory
        self.data_path = data_path
        self.allow_data_change = allow_data_change  # resume on a corpus whose sha256 changed
        self.resume_from = Path(resume) if resume else None
        self.resume_overrides = list(resume_overrides)
        self.resume_notes: list[str] = []  # what the resume changed or kept (RunStarted.notes)
        # the [[changes]] of the config.toml this run replays, each made at its step (a resume
        # takes its checkpoint's); the config it started with, config.toml's starting values
        self.replay_plan = ReplayPlan(planned_changes.changes if planned_changes else ())
        self.start_config: RunConfig | None = None
        self.config_file: ConfigFile | None = None  # rank 0's config.toml, rewritten on a change
        self._already_finished: str | None = None  # resuming a run that has nothing left to do
        self.events = EventQueue(event_capacity)
        # opened once the run has a directory (set_up); a write that fails (a full disk) keeps
        # its records and queues the pause
        self.metrics = MetricsWriter(on_failure=lambda: self._commands.put(DiskFull()))
        self.sinks = [self.metrics, *sinks] if self.world.is_main else list(sinks)
        # every rank's readings and step times, gathered by rank 0
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
        self._val_points: list[ValPoint] = []  # this process's evaluations: eval.fine_interval's
        self._commands = CommandQueue()  # put by the methods below, from any thread
        self.stopping = StopRequest()  # taken at a step boundary: whether, how and why to stop
        # built by set_up with what they use: None before
        self.disk: DiskWait | None = None  # paused for a full disk, retrying
        self.checkpointer: Checkpointer | None = None
        self.faults: FaultHandler | None = None  # anomalies, rollbacks, out of memory
        self.command_handler: CommandHandler | None = None  # commands between steps
        self.live: LiveSettings | None = None  # the settings in force, changed by `set`
        # The first stop asked for, seen at once (any thread): the corpus preparation polls it,
        # as there is no step boundary to take the command at before the first step.
        self._stop_asked: str | None = None
        self._should_stop: Callable[[], bool] = lambda: False  # run()'s, polled between steps
        self._is_set_up = False
        self.interactive = (
            interactive  # a person is watching: anomalies pause rather than roll back
        )
        # stopped and closed before the final state is recorded (_wind_down)
        self.telemetry_poller: TelemetryPoller | None = None
        self.control: ControlServer | None = None  # rank 0's socket, once the run has a directory
        self.parts: RunParts | None = None  # what trains: built by set_up
        self.instruments: Instruments | None = None  # what the loop measures with: set_up's
        self.log_sinks: list[Callable[[Event], None]] = []  # TensorBoard...

    # ------------------------------------------------------------------ commands (any thread)
    def pause(self) -> None:
        self._commands.put(Pause())

    def resume(self) -> None:
        self._commands.put(Resume())

    def checkpoint(self) -> None:
        self._commands.put(Checkpoint())

    def set_lr(self, lr: float, by: str = "app") -> None:
        """Apply `lr` from the next step; kept as a multiplier so the schedule's shape goes on.
        `by` names who asked (config.toml's timeline says it), as for set_settings."""
        self._commands.put(SetLr(float(lr), str(by)))

    def scale_lr(self, factor: float, by: str = "app") -> None:
        self._commands.put(ScaleLr(float(factor), str(by)))

    def set_settings(self, settings: dict[str, Any], by: str = "app") -> None:
        """Change live settings at the next step boundary (engine.contract.EngineHandle);
        `by` names who asked, as the journal names viewers."""
        self._commands.put(SetSettings(dict(settings), str(by)))

    def sample(self) -> None:
        self._commands.put(Sample())

    def evaluate(self) -> None:
        self._commands.put(Evaluate())

    def stop(self, checkpoint: bool = True, reason: str = "stopped by user") -> None:
        """Stop at the next step boundary, saving a checkpoint first unless told not to (or
        nothing was trained yet: step 0). `reason` ("SIGTERM", "quit", ...) is recorded in the
        final state; the first stop asked for wins. While the corpus is prepared it stops the
        preparation at once, and the run ends with nothing on disk."""
        if self._stop_asked is None:
            self._stop_asked = reason
        self._commands.put(Stop(bool(checkpoint), reason))

    def rollback(self, lr_factor: float = 0.5, checkpoint: str | None = None) -> None:
        """Reload the last checkpoint (only if it is `checkpoint`, when named) and continue with
        the LR multiplied by `lr_factor`."""
        self._commands.put(Rollback(float(lr_factor), checkpoint))

    # ------------------------------------------------------------------ events
    def drain_events(self) -> list[Event]:
        """Remove and return the queued events, oldest first (engine.contract.EngineHandle)."""
        return self.events.drain()

    def wait_for_events(self, timeout: float) -> bool:
        """Block until an event is queued or `timeout` seconds passed (EngineHandle)."""
        return self.reporter.wait_for_events(timeout)

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

    def _before_final_state(self, state: str) -> None:
        self._wind_down()  # no telemetry reading or closing alert after the final state
        if self.control is not None:
            self.control.end_journal(state)  # nor a viewer's record

    def _wind_down(self) -> None:
        """Just before the final state is recorded: stop the telemetry poller and close the log
        sinks (TensorBoard...), which need no final state, so that what they say on closing is
        recorded before it and the final state is the last record of metrics.jsonl. Once only."""
        poller, self.telemetry_poller = self.telemetry_poller, None
        if poller is not None:
            poller.stop()
        log_sinks, self.log_sinks = self.log_sinks, []
        close_sinks(log_sinks, self.reporter)

    def _release(self) -> None:
        """Stop the telemetry poller, the batch prefetch and the sinks, and leave the process
        group: whatever state the run ended in (without a final state, if it never got one)."""
        self._wind_down()  # done already where the run has its final state
        if self.disk is not None:
            self.disk.cancel()  # a retry timer of a run paused for its disk
        if self.parts is not None:
            self.parts.train_batches.close()  # the batch prefetch thread ends with the run
        # the metrics file last: it records what the others report on closing (the final
        # state's sinks: the control socket, summary.json, the app's, which say nothing then)
        close_sinks(reversed(self.sinks), self.reporter)
        if self.world.distributed:
            leave_world()

    # ------------------------------------------------------------------ counters
    # Read by the app, headless runs and tests; the loop's parts share `counters` itself.
    @property
    def step(self) -> int:
        return self.counters.step

    @property
    def lr_scale(self) -> float:
        return self.counters.lr_scale

    @property
    def rollbacks(self) -> int:
        return self.counters.rollbacks

    # ------------------------------------------------------------------ the run
    def close(self) -> None:
        """EngineHandle: a Trainer that never ran holds nothing to let go."""

    def run(self, should_stop: Callable[[], bool] | None = None) -> str:
        """Train until finished, stopped or failed; returns the final state. Never raises for
        a problem with the run: that becomes an Alert and the FAILED state."""
        self._should_stop = should_stop or (lambda: False)
        report = self.reporter
        try:
            self.set_up()
            if self.telemetry_enabled:
                from engine.telemetry.poller import (
                    start_telemetry,  # only a run with telemetry needs it
                )

                self.telemetry_poller = start_telemetry(
                    report.emit, lambda message: report.alert("warning", message, "telemetry")
                )
            self._loop()
        except PreparationStopped:
            # Before the run directory exists: nothing was written, there is nothing to save.
            reason = f"{self._stop_asked or 'quit'} while preparing the corpus"
            report.set_state(RunState.STOPPED, reason)
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
                lost = rank_lost_message(
                    ranks=self.ranks,
                    world=self.world,
                    step=self.counters.step,
                    last_checkpoint=self.last_checkpoint,
                    run_dir=self.run_dir,
                    stop_asked=self._stop_asked,
                )
                self._fail(lost, "rank")
            else:  # its first line (a compile error's is dozens): the rest is in the log
                said = str(e).strip().splitlines()[:1]
                self._fail(f"{type(e).__name__}: {''.join(said)}{where}", "crash")
        finally:
            self._release()
        return self.state

    def preparation_should_stop(self) -> bool:
        """The corpus preparation should give up: a stop was asked for or the app is closing."""
        return self._stop_asked is not None or self._should_stop()

    def _fail(self, message: str, code: str) -> None:
        self.reporter.alert("error", message, code)
        self.reporter.set_state(RunState.FAILED, message)

    def set_up(self) -> None:
        """Accept the resume, build the run, and only then create its directory and announce it,
        without training a step: run() does this first unless it was done. Called before run()
        (to look at or wrap the parts built), it raises what run() would turn into a failure."""
        if self._is_set_up:
            return
        self.reporter.set_state(RunState.STARTING)
        self._set_up()
        self._is_set_up = True

    def _set_up(self) -> None:
        state = None
        if self.resume_from is not None:
            accepted = accept_resume(self.resume_from, self.resume_overrides)
            state = accepted.state
            self.cfg, self.run_dir, self.resume_notes = (
                accepted.config, accepted.run_dir, accepted.notes,
            )  # fmt: skip
            if accepted.finished is not None:
                self._already_finished = accepted.finished  # _loop says so; nothing is touched
                self.counters.step = int(state["step"])
                return
            check_run_dir(self.run_dir)  # ours and private: before a checkpoint is moved aside
            # The corpus belongs to the weights: the recorded one, a verified copy, or a
            # refusal (before anything on disk is touched).
            self.data_path, data_notes = resume_data_path(
                state, self.cfg.data, self.data_path, self.allow_data_change
            )
            self.resume_notes.extend(data_notes)
        elif self.run_dir is not None:
            check_new_run_dir(self.run_dir)  # one run per directory: refused before the build
        cfg, world = self.cfg, self.world
        device = rank_device(select_device(cfg.train.device), world)
        self.sync.group = init_world(world, device)  # under torchrun: join the others
        if world.distributed:
            self.ranks = roster(world, self.sync.group)
        self.parts = parts = build(
            cfg,
            device=device,
            world=world,
            data_path=self.data_path,
            emit=self.reporter.emit,
            should_stop=self.preparation_should_stop,
            resume_state=state,
        )
        if parts.parallel.note:
            self.resume_notes.append(parts.parallel.note)  # RunStarted's notes: said at the start
        self.start_config = start_config(state) if state is not None else copy.deepcopy(cfg)
        self._build_loop_parts(parts)
        if state is not None:
            self.resume_notes.extend(self._loop_parts.checkpointer.restore(state))
            assert self.live is not None
            self.resume_notes.extend(self.live.record_resume(state))
            # An older checkpoint starts a new branch: the newer ones must not be pruned into
            # it, nor picked by the next --resume RUN_DIR.
            aside, moved = ckpt.set_aside_newer(self.run_dir, self.counters.step)
            if aside is not None:
                self.resume_notes.append(
                    f"resumed at step {self.counters.step} from an older checkpoint: "
                    f"{', '.join(moved)} moved to {aside} (kept); this run continues the new branch"
                )
        # the LR the optimizer holds until the first step writes its own (a replay's old LR)
        self.counters.current_lr = applied_lr(parts.optimizer)
        self._open_run_dir()
        self._loop_parts.checkpointer.run_dir = self.run_dir  # a fresh run's, created just now
        self.instruments = instrument(cfg, parts, world=world, report=self.reporter)
        if world.is_main:
            assert self.live is not None and self.start_config is not None
            self.config_file = ConfigFile(
                self.run_dir / "config.toml", self.start_config, self.live.timeline
            )
            self.config_file.write()  # the starting values and the changes so far
            self.sinks.append(self.config_file)
            announce(
                cfg,
                run_dir=self.run_dir,
                parts=parts,
                instruments=self.instruments,
                counters=self.counters,
                notes=self.resume_notes,
                resume_state=state,
                report=self.reporter,
                # a resume's past drawn with the schedule it followed then (its timeline's)
                planned_lr=planned_as_followed(cfg, self.start_config, self.live.timeline),
                tokens_schedule=tokens_as_followed(
                    parts.shape_schedule, self.start_config, self.live.timeline, cfg.train.max_steps
                ),
            )
        settle_garbage_collector()

    def _open_run_dir(self) -> None:
        """Only now, with the corpus, config and checkpoint all accepted, is anything written:
        a run refused before this point leaves no directory and no record behind. Under
        torchrun rank 0 owns the directory; the others learn its name (it holds the
        checkpoints they load)."""
        made, problem = None, None
        if self.world.is_main:  # a new one is made now (its name may give way to a free one)
            try:
                made = open_run_dir(
                    self.run_dir, self.cfg, self.resume_from is not None, self.runs_root
                )
            except ConfigError as e:
                problem = str(e)
        # every rank learns the name, or the refusal (and stops with it, not in a collective)
        made, problem = from_main((made, problem), self.world, self.sync.group)
        if problem is not None:
            raise ConfigError(problem)
        self.run_dir = made
        if not self.world.is_main:
            return
        # One engine per directory (a ConfigError naming the other one, before anything else
        # is written), and the control socket viewers attach to; a sink, closed with the run.
        step = self.counters.step
        history = read_history(self.run_dir / "metrics.jsonl", step) if self.resume_from else []
        # a resumed run near its target evaluates finely from its first step (eval.fine_interval)
        self._val_points = [(e.step, e.val_loss) for e in history if isinstance(e, Eval)]
        self.control = serve_run(
            self.run_dir,
            self,
            lambda message: self.reporter.alert("warning", message, "socket"),
            history,
            emit=self.reporter.emit,
        )
        self.sinks.append(self.control)
        ckpt.remove_partial_saves(self.run_dir)  # a save killed mid-write left its temp file
        self.metrics.open(self.run_dir / "metrics.jsonl")
        self.log_sinks = log_sinks(self.cfg, self.run_dir, start_step=step)  # TensorBoard...
        self.sinks.extend(self.log_sinks)
        self.sinks.append(SummarySink(self.run_dir, self.world.world_size))  # `cockpit runs`

    # ------------------------------------------------------------------ what setup built
    # For tests and benches that look into a run (its weights, its optimizer of the moment).
    @property
    def model(self) -> GPT:
        return self._built.model

    @property
    def optimizer(self) -> Any:
        return self._built.optimizer

    @property
    def train_batches(self) -> BatchSampler:
        return self._built.train_batches

    @property
    def forward(self) -> Callable[..., Any]:
        """The forward pass each step trains with; tests wrap it after `set_up()`."""
        return self._instrumented.step.forward

    @forward.setter
    def forward(self, forward: Callable[..., Any]) -> None:
        self._instrumented.step.forward = forward

    @property
    def micro_steps(self) -> int:
        return self._instrumented.step.micro_steps

    @property
    def peak_meter(self) -> PeakMeter:
        return self._instrumented.peak_meter

    @property
    def _built(self) -> RunParts:
        if self.parts is None:
            raise AttributeError("the run is not built yet (Trainer.set_up)")
        return self.parts

    @property
    def _instrumented(self) -> Instruments:
        if self.instruments is None:
            raise AttributeError("the run is not instrumented yet (Trainer.set_up)")
        return self.instruments

    # ------------------------------------------------------------------ the loop's parts
    def _build_loop_parts(self, parts: RunParts) -> None:
        """The disk wait, checkpointer, live settings, fault and command handlers, each given
        what it uses."""
        cfg, world, group = self.cfg, self.world, self.sync.group
        counters, report, device = self.counters, self.reporter, parts.device
        self.disk = disk = DiskWait(
            metrics=self.metrics, world=world, group=group, reporter=report,
            counters=counters, queue=self._commands, max_steps=cfg.train.max_steps,
        )  # fmt: skip
        states = {
            "scaler": Nested("scaler", parts.scaler),
            "counters": counters,  # step, lr_scale, train_time_s, tokens, best_val
            "rngs": RngStates(
                world=world, group=group, device_type=device.type, batches=parts.train_batches,
                sample_generator=parts.sample_generator, seed=cfg.train.seed,
            ),  # fmt: skip
            "run": RunDescription(cfg, parts.data, self.start_config),  # config, tokenizer, corpus
            "replay": self.replay_plan,  # a replayed run's changes still to make
        }
        self.checkpointer = checkpointer = Checkpointer(
            run_dir=self.run_dir, world=world, group=group, settings=cfg.checkpoint,
            sharded=parts.parallel.mode == "fsdp", model=parts.model, optimizer=parts,
            optim=cfg.optim, device_type=device.type, states=states, counters=counters,
            reporter=report, disk=disk,
        )  # fmt: skip
        # what the run derived from the config, derived again after a change of settings
        derived = DerivedValues(
            spikes=parts.spikes, disk=disk, device=device,
            micro_steps=lambda: live.micro_steps(),  # the live settings', built just below
            instruments=lambda: self.instruments,  # built once the run has its directory
        )  # fmt: skip
        self.live = live = LiveSettings(
            cfg=cfg, counters=counters, optimizer=parts, model=parts.model,
            device_type=device.type, ranks=world.world_size,
            micro_batch=lambda: parts.train_batches.batch_size, follow=derived, emit=report.emit,
        )  # fmt: skip
        # the changes made so far, in each checkpoint (one from before them has none)
        states["settings"] = Nested("settings_changes", live, missing=[])
        self.faults = faults = FaultHandler(
            cfg=cfg, interactive=self.interactive, world=world, checkpointer=checkpointer,
            counters=counters, reporter=report, stopping=self.stopping, spikes=parts.spikes,
            model=parts.model, optimizer=parts, batches=parts.train_batches,
            device_type=device.type, forget_pending=lambda: self._pending.forget(),
            settings_back=live.roll_back_to,
        )  # fmt: skip
        rank_commands = None
        if world.distributed:
            rank_commands = RankCommands(
                queue=self._commands, sync=self.sync, world=world, rank_report=self.rank_report,
                device=device, step=lambda: counters.step, emit=report.emit,
                should_stop=lambda: self._should_stop(),
            )  # fmt: skip
        self.command_handler = CommandHandler(
            queue=self._commands, reporter=report, counters=counters, stopping=self.stopping,
            should_stop=lambda: self._should_stop(), cfg=cfg, optimizer=parts,
            checkpointer=checkpointer, disk=disk, rollback=faults.rollback, flush=self._flush,
            sample=self._sample, evaluate=self._evaluate, rank_commands=rank_commands, live=live,
        )  # fmt: skip

    @property
    def _loop_parts(self) -> _LoopParts:
        """The loop's parts, once set_up has built them."""
        if self.checkpointer is None or self.disk is None:
            raise AttributeError("the run is not built yet (Trainer.set_up)")
        assert self.faults is not None and self.command_handler is not None
        return _LoopParts(self.checkpointer, self.disk, self.faults, self.command_handler)

    @property
    def last_checkpoint(self) -> Path | None:
        """The newest checkpoint written or resumed from (None before setup)."""
        return self.checkpointer.last_checkpoint if self.checkpointer is not None else None

    # ------------------------------------------------------------------ the loop
    def _flush(self) -> None:
        """Read the pending steps back from the device and emit their Step events (the loop's,
        before an evaluation, a command's)."""
        self._pending.flush()

    def _evaluate(self) -> Eval:
        """Measure the losses now (pending steps read back first, so the curves stay in order)."""
        self._flush()
        event = evaluate(self._instrumented.evaluator, self._built.data, self.counters, self.reporter)
        # a rollback trains steps again: their new evaluations replace the old ones
        self._val_points = [p for p in self._val_points if p[0] < event.step]
        self._val_points.append((event.step, event.val_loss))
        return event

    def _sample(self) -> None:
        parts = self._built
        sample(
            self._instrumented.evaluator,
            parts.data.tokenizer,
            parts.sample_generator,
            self.counters.step,
            self.reporter,
        )

    def _train_step(self, step_parts: StepParts, parts: RunParts, report_memory: bool) -> None:
        """One update, with the optimizer of now: a restore replaces it."""
        t_start = time.perf_counter()
        counters = self.counters
        factor = lr_multiplied(counters.step, self.cfg, counters.lr_scale)  # never past MAX_LR
        # an update refused since the last read-back holds this one back too
        held_back = self._pending.held_back
        outcome = train_step(
            step_parts, parts.optimizer, counters.step, factor, report_memory, held_back
        )
        if outcome.memory is not None:
            self.reporter.emit(outcome.memory)
        pending = outcome.pending
        self.rank_report.add_step(time.perf_counter() - t_start, pending.data_time_s)
        counters.step += 1
        counters.tokens += self._pending.tokens_of(pending)  # a schedule varies it
        counters.current_lr = pending.lr
        self._pending.add(pending)

    def _loop(self) -> None:
        report = self.reporter
        if self._already_finished is not None:
            # resumed with nothing to train: no second final eval, sample or save, no record
            report.alert("info", self._already_finished, "finished")
            report.set_state(RunState.FINISHED, "already finished")
            return
        cfg, counters = self.cfg, self.counters
        parts, instruments = self._built, self._instrumented
        loop_parts = self._loop_parts
        self._pending = PendingSteps(
            cfg=cfg, counters=counters, reduce=lambda t: mean_over_ranks(t, self.world),
            spikes=parts.spikes, peak_meter=instruments.peak_meter,
            flops_per_token=instruments.flops_per_token, ranks=self.world.world_size,
            emit=report.emit, anomaly=loop_parts.faults.anomaly,
        )  # fmt: skip
        report.set_state(RunState.RUNNING, "resumed from checkpoint" if self.resume_from else "")
        parts.model.train()
        last_memory_report = -math.inf
        while counters.step < cfg.train.max_steps:
            t_commands = time.perf_counter()
            for change in self.replay_plan.due(counters.step):  # a replay's, at the same boundary
                loop_parts.commands.replay(change)
            loop_parts.commands.apply_queued()
            # Time paused or blocked on a command is not training, any more than an evaluation
            # is: keep it out of the next Step's throughput and step time.
            self._pending.exclude(t_commands)
            if self._should_stop() and not self.world.distributed:
                self.stopping.ask(True)  # the app is closing: keep the run
            if self.stopping.requested:
                break
            if report.state != RunState.RUNNING:
                continue
            t0 = time.perf_counter()
            report_memory = time.monotonic() - last_memory_report > MEMORY_REPORT_INTERVAL_S
            if report_memory:
                last_memory_report = time.monotonic()
            rollbacks_before = counters.rollbacks
            try:
                self._train_step(instruments.step, parts, report_memory)
            except torch.OutOfMemoryError:
                # retries with a smaller micro-batch, or pauses; the update keeps its size
                if loop_parts.faults.shrink_micro_batch():
                    instruments.step.micro_steps = cfg.train.grad_accum
                continue
            counters.train_time_s += time.perf_counter() - t0
            due = work_due(counters.step, cfg, self._val_points)
            # Read the losses back before any work due at this step, and at the last step, so
            # an anomaly among them is handled (rolled back, paused) before that work is done.
            if (
                len(self._pending) >= instruments.log_every
                or any(due)
                or counters.step >= cfg.train.max_steps
            ):
                self._flush()
            if (
                counters.rollbacks != rollbacks_before
                or self.stopping.requested
                or report.state != RunState.RUNNING
            ):
                # Rolled back (the restored step had its eval, sample and checkpoint already),
                # giving up, or paused on an anomaly (these weights are suspect: no checkpoint).
                self._pending.exclude(time.perf_counter())
                continue
            # The due work in this order: a checkpoint after an eval at its step may become
            # best.pt.
            t_extra = time.perf_counter()
            if due.evaluate:
                self._last_eval = self._evaluate()
                if val_target_note(self._last_eval, cfg, counters.step):  # train.stop_at_val
                    self._pending.exclude(t_extra)
                    break  # finished: its sample and checkpoint are the end's
            if due.sample:
                self._sample()
            if due.checkpoint:
                loop_parts.checkpointer.save_and_mark("interval", self._last_eval)
            self._pending.exclude(t_extra)
        self._finish()

    def _finish(self) -> None:
        """The loop is over: save and say why it ended (stopped, failed) or that it finished."""
        report, stopping = self.reporter, self.stopping
        checkpointer, disk = self._loop_parts.checkpointer, self._loop_parts.disk
        self._flush()
        if stopping.requested:
            # Step 0: nothing trained, nothing to save (the same seed makes the same weights).
            # Failed: keep the weights only if they are intact, never a NaN as the newest.
            if (
                stopping.save
                and self.counters.step > 0
                and (stopping.failure is None or weights_finite(self._built.model))
            ):
                # saving -> stopped: the state it was in is not gone back to in between
                checkpointer.save("stop", ending=True, wait=False)
            if stopping.failure is not None:
                report.set_state(RunState.FAILED, stopping.failure)
            else:
                report.set_state(RunState.STOPPED, stopping.reason)
            return
        reached = val_target_note(self._last_eval, self.cfg, self.counters.step)
        if reached is None:  # the evaluation that reached the target is the final one
            self._last_eval = self._evaluate()
        if self.cfg.sample.interval:
            self._sample()
        saved = checkpointer.save_and_mark("final", self._last_eval, ending=True)
        # A full disk: paused until the final checkpoint is written, unless the run is stopped
        # meanwhile.
        while saved is None and disk.checkpoint is not None and not stopping.requested:
            if self._should_stop():
                break
            self._loop_parts.commands.apply_queued()
        if disk.checkpoint is not None:
            report.set_state(
                RunState.FINISHED, f"the final checkpoint was not written ({disk.failure})"
            )
            return
        report.set_state(RunState.FINISHED, reached or "")
