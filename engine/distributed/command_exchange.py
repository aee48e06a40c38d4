"""Every command on every rank at the same step: the exchange the ranks make at each boundary.

Rank 0 takes the commands (keys, the control socket); at each step boundary every rank calls
`RankSync.exchange` with what it has: rank 0 its commands, every rank a stop it was asked for
(a signal: a scheduler may signal one rank or all). One all-reduce of a small fixed-size tensor
on the gloo group carries them (so it never waits behind NCCL traffic), and every rank gets the
same list to apply before the next step. While paused the ranks exchange every PAUSED_POLL_S,
so a pause of any length never trips the collective timeout. The last slot says that rank 0
wants every rank's report after this exchange: `report_due`.
"""

from __future__ import annotations

import signal
from typing import Any

import torch

from engine.distributed.world import World

Command = tuple[str, Any]

CODES = {
    "pause": 1, "resume": 2, "checkpoint": 3, "set_lr": 4, "scale_lr": 5,
    "sample": 6, "evaluate": 7, "stop": 8, "rollback": 9,
    "disk_full": 10, "disk_retry": 11,  # the run's own, for a full disk
}  # fmt: skip
NAMES = {code: name for name, code in CODES.items()}
MAX_COMMANDS = 8  # per boundary; more are carried to the next one
USER_STOP = 100  # a stop slot's value for a stop that is not a signal (checkpoint first)
USER_STOP_NO_SAVE = 101


def stop_code(reason: str, checkpoint: bool) -> int:
    """A stop as a number: the signal's, or USER_STOP(_NO_SAVE)."""
    try:
        return int(signal.Signals[reason]) if checkpoint else USER_STOP_NO_SAVE
    except KeyError:
        return USER_STOP if checkpoint else USER_STOP_NO_SAVE


def stop_from_code(code: int, rank: int) -> Command:
    if code == USER_STOP_NO_SAVE:
        return ("stop", (False, f"stopped on rank {rank}"))
    if code == USER_STOP:
        return ("stop", (True, f"stopped on rank {rank}"))
    try:
        name = signal.Signals(code).name
    except ValueError:
        name = f"signal {code}"
    return ("stop", (True, f"{name} on rank {rank}"))


class RankSync:
    """The per-boundary exchange of one rank (see module doc); a single process's is a no-op."""

    def __init__(self, world: World, group: Any = None) -> None:
        self.world = world
        self.group = group
        self._carried: list[Command] = []  # rank 0's commands beyond MAX_COMMANDS
        self.exchanges = 0
        self.report_due = False  # the last exchange asked every rank for its report

    @property
    def size(self) -> int:
        return 1 + 2 * MAX_COMMANDS + self.world.world_size + 1  # the last: a report is due

    def exchange(self, local: list[Command], report_due: bool = False) -> list[Command]:
        """The commands every rank applies now, in order (the same list on every rank);
        rank 0's `report_due` comes back as `self.report_due` on every rank."""
        if not self.world.distributed:
            return local
        import torch.distributed as dist

        buffer = torch.zeros(self.size, dtype=torch.float64)
        mine: list[Command] = []
        stop: Command | None = None
        if self.world.is_main:
            pending = [*self._carried, *local]
            mine, self._carried = pending[:MAX_COMMANDS], pending[MAX_COMMANDS:]
            buffer[0] = len(mine)
            buffer[-1] = 1.0 if report_due else 0.0
            for i, (name, arg) in enumerate(mine):
                buffer[1 + 2 * i] = CODES[name]
                buffer[2 + 2 * i] = _number(name, arg)
        else:
            stop = next((c for c in local if c[0] == "stop"), None)
            if stop is not None:
                checkpoint, reason = stop[1]
                buffer[1 + 2 * MAX_COMMANDS + self.world.rank] = stop_code(reason, checkpoint)
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM, group=self.group)
        self.exchanges += 1
        values = buffer.tolist()
        if self.world.is_main:
            commands = mine  # rank 0 keeps its own arguments (a stop's reason) as they were
        else:
            commands = [
                _command(int(values[1 + 2 * i]), values[2 + 2 * i]) for i in range(int(values[0]))
            ]
        self.report_due = values[-1] > 0
        slots = values[1 + 2 * MAX_COMMANDS : -1]
        for rank, code in enumerate(slots):
            if code:
                commands.append(stop_from_code(int(code), rank))
        return commands


def _number(name: str, arg: Any) -> float:
    if name == "stop":
        checkpoint, _reason = arg
        return 1.0 if checkpoint else 0.0
    return float(arg) if isinstance(arg, (int, float)) else 0.0


def _command(code: int, value: float) -> Command:
    name = NAMES[code]
    if name == "stop":
        return ("stop", (bool(value), "stopped by rank 0"))
    if name in ("set_lr", "scale_lr", "rollback"):
        return (name, value)
    return (name, None)
