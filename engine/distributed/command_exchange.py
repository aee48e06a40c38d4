"""Every command on every rank at the same step: the exchange the ranks make at each boundary.

Rank 0 takes the commands; at each step boundary every rank calls `RankSync.exchange`, and one
all-reduce of a small fixed-size tensor on the gloo group (never behind NCCL traffic) gives every
rank the same list, plus any rank's stop and `report_due`. A command with a payload (a `set`'s
settings) holds its length in its slot, and rank 0 then broadcasts the payloads as JSON.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import torch

from engine.distributed.world import World

Command = tuple[str, Any]

CODES = {
    "pause": 1, "resume": 2, "checkpoint": 3, "set_lr": 4, "scale_lr": 5,
    "sample": 6, "evaluate": 7, "stop": 8, "rollback": 9,
    "disk_full": 10, "disk_retry": 11,  # the run's own, for a full disk
    "set": 12,  # its argument rides in the payload: its slot holds the payload's length
}  # fmt: skip
# commands whose argument is a pair, not a number: a set's (settings, by), a rollback's (LR
# factor, checkpoint named), an LR change's (value, by: who asked, as config.toml records it)
PAYLOADS = frozenset({"set", "rollback", "set_lr", "scale_lr"})
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
        self.payload_broadcasts = 0  # boundaries that carried a `set`'s payload too
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
        payloads: list[bytes] = []  # rank 0's, for the commands in PAYLOADS, in order
        stop: Command | None = None
        if self.world.is_main:
            pending = [*self._carried, *local]
            mine, self._carried = pending[:MAX_COMMANDS], pending[MAX_COMMANDS:]
            buffer[0] = len(mine)
            buffer[-1] = 1.0 if report_due else 0.0
            for i, (name, arg) in enumerate(mine):
                buffer[1 + 2 * i] = CODES[name]
                if name in PAYLOADS:
                    payloads.append(payload_of(arg))
                    buffer[2 + 2 * i] = len(payloads[-1])
                else:
                    buffer[2 + 2 * i] = _number(name, arg)
        else:
            stop = next((c for c in local if c[0] == "stop"), None)
            if stop is not None:
                checkpoint, reason = stop[1]
                buffer[1 + 2 * MAX_COMMANDS + self.world.rank] = stop_code(reason, checkpoint)
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM, group=self.group)
        self.exchanges += 1
        values = buffer.tolist()
        taken = [(int(values[1 + 2 * i]), values[2 + 2 * i]) for i in range(int(values[0]))]
        sizes = [int(value) for code, value in taken if NAMES[code] in PAYLOADS]
        # only at a boundary with a payload: a broadcast of its bytes (the exchange itself keeps
        # its fixed size, so a step without one costs what it always did)
        received = self._broadcast(payloads, sizes) if sizes else []
        if self.world.is_main:
            # rank 0 keeps its own arguments (a stop's reason) as they were; a payload's as the
            # other ranks read it, so every rank decides on the same values
            commands = [
                (name, arg_of(received.pop(0)) if name in PAYLOADS else arg) for name, arg in mine
            ]
        else:
            commands = [
                (NAMES[code], arg_of(received.pop(0))) if NAMES[code] in PAYLOADS
                else _command(code, value)
                for code, value in taken
            ]  # fmt: skip
        self.report_due = values[-1] > 0
        slots = values[1 + 2 * MAX_COMMANDS : -1]
        for rank, code in enumerate(slots):
            if code:
                commands.append(stop_from_code(int(code), rank))
        return commands

    def _broadcast(self, payloads: list[bytes], sizes: list[int]) -> list[bytes]:
        """Rank 0's payloads (of these sizes, which every rank knows from the exchange) on
        every rank, in one broadcast."""
        import torch.distributed as dist

        data = torch.zeros(sum(sizes), dtype=torch.uint8)
        if self.world.is_main:
            data.copy_(torch.frombuffer(bytearray(b"".join(payloads)), dtype=torch.uint8))
        dist.broadcast(data, src=0, group=self.group)
        self.payload_broadcasts += 1
        joined, out, start = data.numpy().tobytes(), [], 0
        for size in sizes:
            out.append(joined[start : start + size])
            start += size
        return out


def payload_of(arg: Any) -> bytes:
    """A command's argument as the bytes rank 0 broadcasts: JSON (a value JSON cannot hold
    goes as its text, which the engine then refuses as it refuses any wrong value)."""
    return json.dumps(arg, default=str).encode("utf-8")


def arg_of(payload: bytes) -> Any:
    """The argument back from its bytes, the pair the queue holds: a `set`'s (settings, by), a
    rollback's (LR factor, checkpoint named or None), an LR change's (value, by)."""
    first, second = json.loads(payload.decode("utf-8"))
    return (first, second)


def _number(name: str, arg: Any) -> float:
    if name == "stop":
        checkpoint, _reason = arg
        return 1.0 if checkpoint else 0.0
    return float(arg) if isinstance(arg, (int, float)) else 0.0


def _command(code: int, value: float) -> Command:
    name = NAMES[code]
    if name == "stop":
        return ("stop", (bool(value), "stopped by rank 0"))
    return (name, None)  # the others without an argument (PAYLOADS carry theirs)
