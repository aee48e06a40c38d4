"""The run's handle: `Trainer(cfg)`, what the app holds before the run is built.

Cheap to make: it takes commands from any thread (queued, carried out at the next step boundary,
each acknowledged by an event) and hands out the run's events. `run()` builds the run whole
(engine.train.build_run) and trains it in the calling thread (a Textual worker in the cockpit,
the main thread headless), returning the final state. The handle and the built run are two
objects: `built` is the run once set up.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.checkpoint import store as ckpt
from engine.config.run_config import ConfigError, RunConfig
from engine.config.timeline import SettingsTimeline
from engine.control.server import ControlServer, serve_run
from engine.data.errors import DataError, PreparationStopped
from engine.data.resumed_corpus import resume_data_path
from engine.distributed.command_exchange import RankSync
from engine.distributed.rank_report import RankReporter
from engine.distributed.ranks import rank_lost_message
from engine.distributed.world import (
    World,
    from_main,
    init_world,
    is_collective_failure,
    leave_world,
    rank_device,
    roster,
)
from engine.events import Eval, Event, EventQueue, RunState
from engine.rundir.layout import check_new_run_dir, check_run_dir, open_run_dir, write_error_log
from engine.rundir.metrics_log import MetricsWriter, read_history
from engine.rundir.sinks import log_sinks
from engine.rundir.summary import SummarySink
from engine.train.build_run import build_run
from engine.train.cadence import ValPoint
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
from engine.train.commands import StopRequest
from engine.train.config_file import ConfigFile, ReplayPlan
from engine.train.counters import Counters
from engine.train.device import select_device
from engine.train.live_settings import planned_as_followed, tokens_as_followed
from engine.train.reporter import Reporter
from engine.train.run import Run
from engine.train.setup import accept_resume, announce

if TYPE_CHECKING:
    from engine.telemetry.poller import TelemetryPoller  # imported when a run polls (run())

# A sink may say something on closing (a TensorBoard writer that could not flush): that becomes
# a warning, reported before the final state where the final state has yet to come.
def close_sinks(sinks: Iterable[Callable[..., Any]], report: Reporter) -> None:
    """Close each sink that can be closed, in order; what one says on closing is a warning."""
    for sink in sinks:
        close = getattr(sink, "close", None)
        problem = close() if close else None
        if isinstance(problem, str):
            report.alert("warning", problem, "log")


def settle_garbage_collector() -> None:
    """Take everything alive now (modules, model, optimizer, the UI's widgets) out of the cyclic
    garbage collector's reach, after collecting what a previous run left behind: a full
    collection of the ~250k objects holds the GIL ~80 ms, stalling training and the UI (the
    redraw benchmark's p95). Frozen objects are still freed by reference counting."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


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
        # takes its checkpoint's)
        self.replay_plan = ReplayPlan(planned_changes.changes if planned_changes else ())
        self.finished_already: str | None = None  # why a resumed run has nothing left to train
        self.events = EventQueue(event_capacity)
        # opened once the run has a directory (set_up); a write that fails (a full disk) keeps
        # its records and queues the pause
        self._commands = CommandQueue()  # put by the methods below, from any thread
        self.metrics = MetricsWriter(on_failure=partial(self._commands.put, DiskFull()))
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
        self.stopping = StopRequest()  # taken at a step boundary: whether, how and why to stop
        # The first stop asked for, seen at once (any thread): the corpus preparation polls it,
        # as there is no step boundary to take the command at before the first step.
        self._stop_asked: str | None = None
        self._should_stop: Callable[[], bool] = lambda: False  # run()'s, polled between steps
        self.interactive = (
            interactive  # a person is watching: anomalies pause rather than roll back
        )
        # stopped and closed before the final state is recorded (_wind_down)
        self.telemetry_poller: TelemetryPoller | None = None
        self.control: ControlServer | None = None  # rank 0's socket, once the run has a directory
        self.log_sinks: list[Callable[[Event], None]] = []  # TensorBoard...
        self.built: Run | None = None  # the run, once set_up built it whole

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
        if self.built is not None:
            self.built.disk.cancel()  # a retry timer of a run paused for its disk
            self.built.parts.train_batches.close()  # the batch prefetch thread ends with the run
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
            if self.built is not None:
                self.built.train()
            else:  # resumed with nothing to train: no second final eval, sample or save
                report.alert("info", str(self.finished_already), "finished")
                report.set_state(RunState.FINISHED, "already finished")
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
        except Exception as e:  # the training thread's boundary: details on disk, one line on screen
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

    def app_closing(self) -> bool:
        """run()'s `should_stop`: the app is closing (polled between steps)."""
        return self._should_stop()

    def _fail(self, message: str, code: str) -> None:
        self.reporter.alert("error", message, code)
        self.reporter.set_state(RunState.FAILED, message)

    def set_up(self) -> None:
        """Accept the resume, build the run whole (`built`), and only then create its directory
        and announce it, without training a step: run() does this first unless it was done.
        Called before run() (to look at or wrap the parts built), it raises what run() would
        turn into a failure."""
        if self.built is not None or self.finished_already is not None:
            return
        self.reporter.set_state(RunState.STARTING)
        state = None
        if self.resume_from is not None:
            accepted = accept_resume(self.resume_from, self.resume_overrides)
            state = accepted.state
            self.cfg, self.run_dir, self.resume_notes = (
                accepted.config, accepted.run_dir, accepted.notes,
            )  # fmt: skip
            if accepted.finished is not None:
                self.finished_already = accepted.finished  # run() says so; nothing is touched
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
        run = build_run(
            cfg, device=device, world=world, sync=self.sync, resume_state=state,
            run_dir=self.run_dir, data_path=self.data_path, notes=self.resume_notes,
            counters=self.counters, reporter=self.reporter, metrics=self.metrics,
            queue=self._commands, stopping=self.stopping, should_stop=self.app_closing,
            preparation_should_stop=self.preparation_should_stop, rank_report=self.rank_report,
            replay_plan=self.replay_plan, interactive=self.interactive,
            open_run_dir=self._open_run_dir,
        )  # fmt: skip
        self.built = run
        if world.is_main:
            self._announce(run, state)
        settle_garbage_collector()

    def _announce(self, run: Run, state: dict[str, Any] | None) -> None:
        """config.toml (the starting values and the changes so far, a sink rewritten on each
        change), config.json and RunStarted."""
        cfg, timeline = run.cfg, run.live.timeline
        config_file = ConfigFile(run.run_dir / "config.toml", run.start_config, timeline)
        config_file.write()
        self.sinks.append(config_file)
        announce(
            cfg,
            run_dir=run.run_dir,
            parts=run.parts,
            instruments=run.instruments,
            counters=self.counters,
            notes=self.resume_notes,
            resume_state=state,
            report=self.reporter,
            # a resume's past drawn with the schedule it followed then (its timeline's)
            planned_lr=planned_as_followed(cfg, run.start_config, timeline),
            tokens_schedule=tokens_as_followed(
                run.parts.shape_schedule, run.start_config, timeline, cfg.train.max_steps
            ),
        )

    def _open_run_dir(self) -> tuple[Path, list[ValPoint]]:
        """Only now, with the corpus, config and checkpoint all accepted, is anything written:
        a run refused before this point leaves no directory and no record behind. Under
        torchrun rank 0 owns the directory; the others learn its name (it holds the
        checkpoints they load). Returns it, with the run's evaluations so far (rank 0's)."""
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
            return made, []
        # One engine per directory (a ConfigError naming the other one, before anything else
        # is written), and the control socket viewers attach to; a sink, closed with the run.
        step = self.counters.step
        history = read_history(made / "metrics.jsonl", step) if self.resume_from else []
        self.control = serve_run(
            made,
            self,
            lambda message: self.reporter.alert("warning", message, "socket"),
            history,
            emit=self.reporter.emit,
        )
        self.sinks.append(self.control)
        ckpt.remove_partial_saves(made)  # a save killed mid-write left its temp file
        self.metrics.open(made / "metrics.jsonl")
        self.log_sinks = log_sinks(self.cfg, made, start_step=step)  # TensorBoard...
        self.sinks.extend(self.log_sinks)
        self.sinks.append(SummarySink(made, self.world.world_size))  # `cockpit runs`
        # a resumed run near its target evaluates finely from its first step (eval.fine_interval)
        return made, [(e.step, e.val_loss) for e in history if isinstance(e, Eval)]

    # ------------------------------------------------------------------ the built run
    @property
    def last_checkpoint(self) -> Path | None:
        """The newest checkpoint written or resumed from (None before setup)."""
        return self.built.checkpointer.last_checkpoint if self.built is not None else None
