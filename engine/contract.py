"""What the cockpit may ask of a run: the one interface the app is typed against.

The Trainer, the scripted test engine and the client of a run in another process satisfy it,
so every member can cross a transport: commands of plain values acknowledged later by an
event, events drained in batches (each survives to_record -> JSON -> from_record), and the
live state. Torch-free and textual-free, like `engine.events`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from engine.events import Event


@runtime_checkable
class EngineHandle(Protocol):
    """One run, seen from the app. Commands may come from any thread; the engine applies them
    at its next step boundary and acknowledges each with an event (a refused one with an
    Alert), never with a return value."""

    @property
    def state(self) -> str:
        """The live state, one of the `engine.events.RunState` values; read at any time (it
        can be ahead of the last drained `StateChanged`)."""
        ...

    @property
    def outlives_viewer(self) -> bool:
        """Whether the run goes on when this viewer leaves: True for a run attached to over its
        control socket (leaving detaches), False for a run inside the app (leaving stops it,
        with a checkpoint)."""
        ...

    @property
    def read_only(self) -> bool:
        """Whether this viewer may only watch: its commands are refused by the run."""
        ...

    @property
    def recorded(self) -> bool:
        """Whether the run is over and only replayed from its files: nothing runs to steer
        (a finished run's view), as opposed to a live run, in the app or attached to."""
        ...

    @property
    def run_dir(self) -> Path | None:
        """The run's directory; None until an in-process run has made it."""
        ...

    @property
    def resume_from(self) -> str | os.PathLike[str] | None:
        """What this run resumed from (a run directory or a checkpoint in one); None for a
        run that started at step 0 or was not started by this handle."""
        ...

    @property
    def telemetry_enabled(self) -> bool:
        """Whether device readings are to come (an in-process run may be told not to poll)."""
        ...

    @property
    def replayed_until(self) -> float:
        """The newest time (the run's clock) of the run's past as replayed to this viewer: an
        event at or before it happened before the viewer saw the run (a finished run's files,
        an attach's replay), so it is drawn, never announced. 0.0 where nothing is replayed but
        a resume's history, which is older than its RunStarted."""
        ...

    @property
    def dropped_events(self) -> int:
        """Events the bounded queue dropped, oldest first, because nobody drained it in time
        (they are still in `metrics.jsonl`)."""
        ...

    def drain_events(self) -> list[Event]:
        """Remove and return the events emitted since the last drain, oldest first."""
        ...

    def wait_for_events(self, timeout: float) -> bool:
        """Block until `drain_events()` has something to return, or `timeout` seconds passed;
        True if it has. Called on a viewer's own waiting thread, never its UI thread, so that
        the viewer draws what arrives at once instead of polling the queue on a fast timer."""
        ...

    def run(self, should_stop: Callable[[], bool] | None = None) -> str:
        """Train until finished, stopped or failed (blocking: call it on a worker thread) and
        return the final state. `should_stop()` is polled between steps: True means the viewer
        is leaving: a run inside the app stops there as `stop()` does, with a checkpoint; a run
        that outlives its viewer is left running and `run` returns "detached"."""
        ...

    def close(self) -> None:
        """Let go of what the handle holds without running it (a connection to the run, for one
        attached to); the run itself is not stopped. Called when the app drops a handle it
        built but never ran."""
        ...

    def pause(self) -> None:
        """Pause at the next step boundary (acknowledged by StateChanged "paused")."""
        ...

    def resume(self) -> None:
        """Resume a paused run (StateChanged "running")."""
        ...

    def checkpoint(self) -> None:
        """Save a checkpoint now (CheckpointSaved, reason "manual")."""
        ...

    def set_lr(self, lr: float) -> None:
        """Make the LR `lr` from the next step on, keeping the schedule's shape (LrChanged)."""
        ...

    def scale_lr(self, factor: float) -> None:
        """Multiply the LR by `factor` from the next step on (LrChanged)."""
        ...

    def set_settings(self, settings: dict[str, Any]) -> None:
        """Change live settings at the next step boundary, on every rank: acknowledged by
        SettingsChanged, or refused by an Alert with code "set" that says why (nothing changed)."""
        ...

    def sample(self) -> None:
        """Generate a sample from the current weights (Sample)."""
        ...

    def evaluate(self) -> None:
        """Measure train and validation loss now (Eval)."""
        ...

    def stop(self, checkpoint: bool = True, reason: str = "stopped by user") -> None:
        """Stop at the next step boundary, saving a checkpoint first unless told not to;
        `reason` ends up in the final StateChanged. The first stop asked for wins."""
        ...

    def rollback(self, lr_factor: float = 0.5, checkpoint: str | None = None) -> None:
        """Reload the last checkpoint and go on with the LR times `lr_factor` (LrChanged and
        an Alert with code "rollback"; only a warning Alert, the run untouched, when there is no
        checkpoint yet, the newest cannot be read or `lr_factor` gives no LR in range).
        `checkpoint`: the file the user was asked about; refused alike when the newest is
        another by the time the command is taken (saved meanwhile, by another viewer say)."""
        ...
