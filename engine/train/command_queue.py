"""Commands to a run, one frozen dataclass each, and the queue that takes them to the loop.

Put from any thread, taken by the training loop at a step boundary. While the run is paused
the loop blocks in `take`, waking every `PAUSED_POLL_S` to see whether the app is closing. The
ranks' exchange carries commands as (name, argument) pairs: `wire_pair` and `from_wire`.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

PAUSED_POLL_S = 0.25


@dataclass(frozen=True)
class Pause:
    pass


@dataclass(frozen=True)
class Resume:
    pass


@dataclass(frozen=True)
class Checkpoint:
    pass


@dataclass(frozen=True)
class SetLr:
    lr: float  # the LR once warmup is over
    by: str = "app"  # who asked: config.toml's timeline records it


@dataclass(frozen=True)
class ScaleLr:
    factor: float
    by: str = "app"


@dataclass(frozen=True)
class SetSettings:
    settings: Mapping[str, Any]  # keys as `--set` spells them
    by: str = "app"


@dataclass(frozen=True)
class Sample:
    pass


@dataclass(frozen=True)
class Evaluate:
    pass


@dataclass(frozen=True)
class Stop:
    checkpoint: bool = True
    reason: str = "stopped by user"


@dataclass(frozen=True)
class Rollback:
    lr_factor: float = 0.5
    checkpoint: str | None = None  # the checkpoint the user was asked about


@dataclass(frozen=True)
class DiskFull:
    """Queued by the metrics writer when a write fails."""


@dataclass(frozen=True)
class DiskRetry:
    """Queued by the disk wait's retry timer."""


Command = (
    Pause | Resume | Checkpoint | SetLr | ScaleLr | SetSettings | Sample | Evaluate | Stop
    | Rollback | DiskFull | DiskRetry
)  # fmt: skip

WIRE_NAMES: dict[type, str] = {
    Pause: "pause", Resume: "resume", Checkpoint: "checkpoint", SetLr: "set_lr",
    ScaleLr: "scale_lr", SetSettings: "set", Sample: "sample", Evaluate: "evaluate",
    Stop: "stop", Rollback: "rollback", DiskFull: "disk_full", DiskRetry: "disk_retry",
}  # fmt: skip
BY_WIRE_NAME = {name: kind for kind, name in WIRE_NAMES.items()}


def wire_pair(command: Command) -> tuple[str, Any]:
    """`command` as the ranks' exchange carries it: its name and its fields (None: none)."""
    values = tuple(command.__dict__.values())
    return WIRE_NAMES[type(command)], (values or None)


def from_wire(name: str, arg: Any) -> Command:
    """The command of a (name, argument) pair from the ranks' exchange."""
    kind = BY_WIRE_NAME[name]
    return kind(*arg) if arg is not None else kind()


class CommandQueue:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Command] = queue.SimpleQueue()

    def put(self, command: Command) -> None:
        self._queue.put(command)

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

    def take_all(self, wait_s: float = 0.0) -> list[tuple[str, Any]]:
        """Every queued command as the ranks' exchange carries it (`wire_pair`), oldest first;
        waits up to `wait_s` for the first one."""
        taken: list[Command] = []
        try:
            taken.append(self._queue.get(timeout=wait_s) if wait_s > 0 else self._queue.get_nowait())
        except queue.Empty:
            return []
        while True:
            try:
                taken.append(self._queue.get_nowait())
            except queue.Empty:
                return [wire_pair(command) for command in taken]
