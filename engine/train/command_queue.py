"""Commands to a run: put from any thread, taken by the training loop at a step boundary.

While the run is paused the loop blocks here, waking every `PAUSED_POLL_S` to see whether the
app is closing, so that a paused run still stops promptly.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

PAUSED_POLL_S = 0.25

Command = tuple[str, Any]  # name ("pause", "set_lr", ...), argument


class CommandQueue:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Command] = queue.SimpleQueue()

    def put(self, name: str, arg: Any = None) -> None:
        self._queue.put((name, arg))

    def take(self, paused: bool, should_stop: Callable[[], bool]) -> Command | None:
        """The next command, or None when there is none; while `paused`, wait for one until
        `should_stop()` says the run is closing."""
        while True:
            try:
                return self._queue.get(timeout=PAUSED_POLL_S) if paused else self._queue.get_nowait()
            except queue.Empty:
                if paused and not should_stop():
                    continue
                return None

    def take_all(self, wait_s: float = 0.0) -> list[Command]:
        """Every queued command, oldest first; waits up to `wait_s` for the first one."""
        taken: list[Command] = []
        try:
            taken.append(self._queue.get(timeout=wait_s) if wait_s > 0 else self._queue.get_nowait())
        except queue.Empty:
            return taken
        while True:
            try:
                taken.append(self._queue.get_nowait())
            except queue.Empty:
                return taken
