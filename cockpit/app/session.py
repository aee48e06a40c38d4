"""One cockpit session's state: the run on screen, its engine handle, the runs before it, and
whether the app is quitting, leaving or switching runs.

The app's parts read and change this one record; what is drawn about the run on screen is its
`view` (a new run, a new one).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.timer import Timer
from textual.worker import Worker

from cockpit.app.run_view import RunView
from cockpit.app.session_runs import SessionRun
from cockpit.app.stop_wait import BoundaryWork
from engine.contract import EngineHandle
from engine.events import RunState


@dataclass
class Session:
    preset: str  # the run on screen's name (its preset, or what was opened)
    trainer: EngineHandle | None = None  # its engine handle; None before one was built
    engine_worker: Worker[Any] | None = None  # the thread worker its run() blocks in
    engine_thread: threading.Thread | None = None  # ... and that worker's thread
    state: str = "idle"  # the run's state as the app last drew it
    view: RunView = field(default_factory=RunView)
    past_runs: list[SessionRun] = field(default_factory=list)  # switched away from: exit report
    # The run's newest step: (event time, step time), for the quit countdown; and the work
    # due at its boundaries (the same)
    last_step_seen: tuple[float, float] | None = None
    boundary_work: BoundaryWork = field(default_factory=BoundaryWork)

    status_note: str = ""  # a transient note on the alert line ("saving checkpoint...")
    busy_note: str | None = None  # the note of a worker reading or building something
    check_note: str = ""  # the note shown while a picked preset is checked
    checkpoint_toast_until: float = 0.0  # a checkpoint toast is on screen until then (monotonic)
    # a steering key's refusal (title, why) on screen until then: a burst of presses says it once
    refusal_said: tuple[str, str] | None = None
    refusal_until: float = 0.0
    live_overlay_timer: Timer | None = None  # the next reading of overlaid runs still training

    quitting: bool = False
    quit_started: float | None = None  # clock() when a confirmed quit began
    quit_forced: bool = False  # the user quit again while waiting: no checkpoint awaited
    quit_timer: Timer | None = None  # the quit note's countdown
    watchdog_armed: bool = False  # a forced quit watches for an engine thread that never returns
    detaching: bool = False  # leaving a run that goes on without this viewer

    # the run to start once the one on screen has ended (a switch), and how (None: a preset)
    pending_preset: str | None = None
    pending_make: Callable[[], EngineHandle] | None = None
    switch_started: float | None = None  # clock() when the switch began
    switch_timer: Timer | None = None  # the switch note's countdown

    # the run on screen and its handle ------------------------------------------------------------
    @property
    def engine_running(self) -> bool:
        """The run's engine is in its thread worker (not ended, not left)."""
        worker = self.engine_worker
        return worker is not None and not worker.is_finished

    @property
    def attached(self) -> bool:
        """The run outlives this app (it was attached to over its socket): leaving detaches."""
        return self.trainer is not None and self.trainer.outlives_viewer

    @property
    def read_only(self) -> bool:
        """This viewer only watches: the run refuses its commands."""
        return self.trainer is not None and self.trainer.read_only

    @property
    def viewing_record(self) -> bool:
        """The run on screen is over and drawn from its files: nothing runs to steer."""
        return self.trainer is not None and self.trainer.recorded

    @property
    def run_dir(self) -> str | None:
        """The run on screen's directory (None before it has one)."""
        info, trainer = self.view.info, self.trainer
        run_dir = (info.run_dir if info is not None else None) or (
            trainer.run_dir if trainer is not None else None
        )
        return str(run_dir) if run_dir else None

    def is_current(self, run_dir: Path) -> bool:
        """`run_dir` is the run on screen's directory."""
        current = self.run_dir
        return current is not None and os.path.realpath(current) == os.path.realpath(run_dir)

    def busy(self, note: str) -> None:
        """Say what a worker is reading or building until `not_busy` (unless replaced)."""
        self.busy_note = note
        self.status_note = note

    def not_busy(self) -> None:
        """The worker is done: its note goes, but not a note said since (finished, quitting)."""
        if self.status_note == self.busy_note:
            self.status_note = ""
        self.busy_note = None

    def current_run(self) -> SessionRun | None:
        """The run on screen as the exit report describes it, or None if it never started."""
        info, run_dir = self.view.info, self.run_dir
        if run_dir is None or (info is None and not os.path.isdir(run_dir)):
            return None  # refused before anything was written: nothing to report
        ckpt = self.view.last_checkpoint
        return SessionRun(
            preset=self.preset,
            run_dir=str(run_dir),
            state=self.state,
            attached=self.attached,
            detached=self.detaching and self.state not in RunState.ENDED,
            step=self.view.step,
            start_step=info.start_step if info is not None else 0,
            checkpoint=(ckpt[0], ckpt[1]) if ckpt is not None else None,
        )

    def put_aside_current_run(self) -> None:
        """Before another run starts: keep the outgoing one for the exit report."""
        self.last_step_seen = None
        self.boundary_work = BoundaryWork()
        summary = self.current_run()
        if summary is not None:
            self.past_runs.append(summary)
