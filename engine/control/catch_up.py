"""What a live run's viewer is sent when it attaches or falls behind: the run's replay.

`LiveReplay` keeps, as the run emits them: run_started, the history records (steps thinned so
a long run stays small, each encoded once whatever the number of viewers), the newest viewer
and command records, and the run's present (state, memory, ranks, recent device readings, the
faults since it last went running). Torch-free; guarded by the server's lock.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from engine.control import wire
from engine.events import Event
from engine.rundir.metrics_log import HISTORY_KINDS, REPLAY_STEPS

REPLAY_TELEMETRY = 300  # newest device readings in a replay: the device panel's recent past
REPLAY_ALERTS = 5  # newest warnings and errors since the run last went running: why it is paused
REPLAY_JOURNAL = 500  # newest viewer and command records in a replay: who attached and did what


class LiveReplay:
    """A live run's replay, kept as it runs (see module doc). Every method is called under
    `lock` (the server's) but `encoded`, which a viewer's writer calls and which takes it."""

    def __init__(self, lock: threading.Lock, history: Iterable[Event] = ()) -> None:
        self._lock = lock
        self.run_started: Event | None = None
        self._history: list[Event] = []
        self._step_stride = 1  # keep every Nth step event in memory (doubled when too many)
        self._steps_seen = 0
        self.last_step: Event | None = None
        # the run's length in force: run_started's, then each settings_changed's (a live `set
        # train.max_steps`, a rollback putting a checkpoint's back)
        self.max_steps: int | None = None
        # the run's present besides its history: what a viewer needs to draw it as it is now
        self._last_state: Event | None = None
        self._last_memory: Event | None = None
        self._last_ranks: Event | None = None
        self._telemetry: deque[Event] = deque(maxlen=REPLAY_TELEMETRY)
        self._alerts: deque[Event] = deque(maxlen=REPLAY_ALERTS)
        self._journal: deque[Event] = deque(maxlen=REPLAY_JOURNAL)  # viewer and command records
        # wire lines of history records already sent once (id -> (event, line))
        self._lines: dict[int, tuple[Event, bytes]] = {}
        for event in history:
            self._remember(event)

    def note(self, event: Event) -> None:
        """Keep what a replay needs of one of the run's events."""
        if event.kind == "run_started":
            self.run_started = event
            self.max_steps = event.max_steps  # type: ignore[attr-defined]
        elif event.kind in HISTORY_KINDS:
            self._remember(event)
        else:
            self._note_present(event)

    def _remember(self, event: Event) -> None:
        """Keep `event` for replays; steps thinned in memory so a long run stays small."""
        if event.kind == "settings_changed" and event.max_steps > 0:  # type: ignore[attr-defined]
            self.max_steps = event.max_steps  # type: ignore[attr-defined]
        if event.kind == "step":
            step = event.step  # type: ignore[attr-defined]
            if self.last_step is not None and step <= self.last_step.step:  # type: ignore
                # trained again after a rollback: the newer records win, as in read_history
                self._history = [e for e in self._history if getattr(e, "step", 0) < step]
                self._forget_lines()
            self.last_step = event  # the newest step is always in a replay
            self._steps_seen += 1
            if self._steps_seen % self._step_stride:
                return
        self._history.append(event)
        if event.kind == "step" and len(self._history) > 2 * REPLAY_STEPS:
            self._step_stride *= 2
            steps = [e for e in self._history if e.kind == "step"]
            keep = {id(e) for e in steps[::2]}
            self._history = [e for e in self._history if e.kind != "step" or id(e) in keep]
            self._forget_lines()

    def _note_present(self, event: Event) -> None:
        """Keep the newest state, memory breakdown, readings and faults."""
        kind = event.kind
        if kind == "state":
            self._last_state = event
            if event.state == "running":  # type: ignore[attr-defined]
                self._alerts.clear()  # resumed: the faults that paused it are behind it
        elif kind == "memory":
            self._last_memory = event
        elif kind == "ranks":
            self._last_ranks = event  # every rank's row in the device panel at once
        elif kind == "telemetry":
            self._telemetry.append(event)
        elif kind in ("viewer", "command"):
            self._journal.append(event)
        elif kind == "alert" and event.level in ("warning", "error"):  # type: ignore[attr-defined]
            self._alerts.append(event)

    def events(self) -> list[Event]:
        """run_started, the history thinned to REPLAY_STEPS steps, the newest viewer and command
        records (who attached and did what), then the present: the newest memory breakdown,
        recent readings, the faults since the run last went running and the state it is in."""
        steps = [e for e in self._history if e.kind == "step"]
        keep = {id(e) for e in steps[:: max(1, math.ceil(len(steps) / REPLAY_STEPS))]}
        past = [e for e in self._history if e.kind != "step" or id(e) in keep]
        if self.last_step is not None and id(self.last_step) not in keep:
            past.append(self.last_step)
        past.extend(self._journal)
        present = [
            self._last_memory, self._last_ranks, *self._telemetry, *self._alerts, self._last_state
        ]
        past.extend(e for e in present if e is not None)
        return [self.run_started, *past] if self.run_started is not None else past

    def _forget_lines(self) -> None:
        """Drop the wire lines of records no longer in the history."""
        kept = {id(e) for e in self._history}
        self._lines = {k: v for k, v in self._lines.items() if k in kept}

    def encoded(self, event: Event) -> bytes:
        """An event's wire line; history records are encoded once, whatever the viewers."""
        cached = self._lines.get(id(event))
        if cached is not None and cached[0] is event:
            return cached[1]
        line = wire.encode(event.to_record())
        if event.kind in HISTORY_KINDS:
            with self._lock:
                self._lines[id(event)] = (event, line)  # the event held: its id stays its own
        return line

    def summary(self, config_name: str | None) -> dict[str, Any]:
        """The run at a glance (`cockpit ps`), from the newest records (its length the one in
        force, not the one it started with); before run_started (still loading) its preset is
        `config_name`, its config's name, when it has one."""
        started, last = self.run_started, self.last_step
        return {
            "preset": getattr(started, "preset", None) or config_name,
            "started": getattr(started, "time", None),
            "max_steps": self.max_steps,
            "step": getattr(last, "step", getattr(started, "start_step", 0)),
            "loss": _finite(getattr(last, "loss", None)),
            "tokens_per_s": _finite(getattr(last, "tokens_per_s", None)),
            "step_time_s": _finite(getattr(last, "step_time_s", None)),
        }


def _finite(value: Any) -> float | None:
    """A number JSON can carry, else None (a NaN loss is null on the wire)."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None
