"""A run that is over, drawn from its files: `RecordedRun`, an EngineHandle that only replays.

The app opens a finished (stopped, failed, crashed) run with it exactly as it holds a live one:
the first drain hands over the run's replay (read_replay), every later
one only the refusals of commands, since there is nothing to steer. Torch-free and
textual-free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.events import Alert, Event
from engine.rundir.replay_reader import read_replay


class RecordedRun:
    """An EngineHandle for a run that is over (see the module doc). Raises RunHistoryError (one
    line) when the directory holds no run, or when an engine still holds it (attach instead)."""

    recorded = True  # EngineHandle: a finished run's view, not a live run
    resume_from = None  # nothing is resumed: the run is only drawn
    telemetry_enabled = True  # its readings are replayed from its files

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        replay = read_replay(self.run_dir)
        self._state = replay.final_state
        self.reason = replay.reason
        # commands may come from any thread; a viewer waiting for events is woken by a refusal
        self._changed = threading.Condition()
        # as recorded: its training time comes from its records (the RunStarted's, the evals',
        # the final state's), as it did live and as `cockpit runs` reads it
        self._pending: list[Event] = list(replay.events)
        # all of the replay is the run's past, its RunStarted (the newest of it) too; only the
        # refusals of commands are news
        self.replayed_until = max((e.time for e in self._pending), default=0.0)

    @property
    def state(self) -> str:
        return self._state

    @property
    def outlives_viewer(self) -> bool:
        return False  # nothing runs: leaving closes nothing

    @property
    def read_only(self) -> bool:
        return True

    @property
    def dropped_events(self) -> int:
        return 0

    def drain_events(self) -> list[Event]:
        with self._changed:
            events, self._pending = self._pending, []
        return events

    def wait_for_events(self, timeout: float) -> bool:
        """The replay is waiting at once; after it only the refusals of commands come."""
        with self._changed:
            return self._changed.wait_for(lambda: bool(self._pending), timeout)

    def run(self, should_stop: Callable[[], bool] | None = None) -> str:
        return self._state  # over already

    def close(self) -> None:
        pass  # the files were read at construction: nothing is held

    def _refuse(self) -> None:
        message = (
            f"{self.run_dir.name} is {self._state}: nothing to steer "
            "(r resumes it, n starts a new run from its config)"
        )
        with self._changed:
            self._pending.append(Alert(level="warning", message=message, code="read_only"))
            self._changed.notify_all()

    def pause(self) -> None:
        self._refuse()

    def resume(self) -> None:
        self._refuse()

    def checkpoint(self) -> None:
        self._refuse()

    def set_lr(self, lr: float) -> None:
        self._refuse()

    def scale_lr(self, factor: float) -> None:
        self._refuse()

    def set_settings(self, settings: dict[str, Any]) -> None:
        self._refuse()

    def sample(self) -> None:
        self._refuse()

    def evaluate(self) -> None:
        self._refuse()

    def stop(self, checkpoint: bool = True, reason: str = "stopped by user") -> None:
        self._refuse()

    def rollback(self, lr_factor: float = 0.5, checkpoint: str | None = None) -> None:
        self._refuse()

