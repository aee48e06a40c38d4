"""One cockpit session's state: the run on screen, its engine, the runs before it, and whether
the app is quitting, leaving or switching runs.

The app's parts read and change this one record instead of each keeping attributes of its own;
what is drawn about the run on screen is its `view` (a new run, a new one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from textual.timer import Timer
from textual.worker import Worker

from cockpit.app.session_runs import SessionRun
from cockpit.app.stop_wait import BoundaryWork
from cockpit.figures.run_view import RunView
from engine.contract import EngineHandle


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
