"""A full disk pauses a run, never ends it: what could not be written waits, and is retried.

A failed checkpoint or metrics.jsonl write is one alert and a pause; the weights and records
wait in memory and every RETRY_S (or at a checkpoint or resume command) the run tries again,
going on by itself once they are written. Each retry is a command, so under torchrun every
rank makes it at the same step.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine.distributed.world import World, from_main
from engine.events import RunState
from engine.rundir.summary import size_on_disk
from engine.train.command_queue import CommandQueue, DiskRetry

if TYPE_CHECKING:
    from engine.rundir.metrics_log import MetricsWriter
    from engine.train.counters import Counters
    from engine.train.reporter import Reporter

RETRY_S = 2.0  # a retry while paused for the disk: a statfs, and the write once there is room
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
FREE_SPACE = (
    "free disk space: the run goes on by itself once there is room (a checkpoint or resume "
    "command retries now)"
)


def os_error_behind(error: BaseException) -> OSError | None:
    """The OSError that `error` is or comes from (its __cause__ / __context__ chain): torch.save
    raises a RuntimeError during the handling of the OSError of a full disk. A sharded save's
    CheckpointException (DCP's) holds each rank's failure: those are looked into too."""
    seen: set[int] = set()
    waiting: list[BaseException] = [error]
    while waiting:
        current = waiting.pop(0)  # breadth first: the nearest OSError
        if id(current) in seen:
            continue
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        waiting.extend(rank_failures(current))
        following = current.__cause__ or current.__context__
        if following is not None:
            waiting.append(following)
    return None


def checkpoint_exception_type() -> type[BaseException] | None:
    """DCP's CheckpointException (a BaseException, not an Exception: `except Exception` misses
    it); None where torch has no torch.distributed."""
    try:
        from torch.distributed.checkpoint.api import CheckpointException
    except ImportError:
        return None
    return CheckpointException


def rank_failures(error: BaseException) -> list[BaseException]:
    """The exception of each rank that failed, when `error` is DCP's CheckpointException (its
    `failures`: rank -> (exception, traceback)); otherwise none."""
    dcp_error = checkpoint_exception_type()
    if dcp_error is None or not isinstance(error, dcp_error):
        return []
    failures = getattr(error, "failures", None) or {}
    return [
        pair[0]
        for _, pair in sorted(failures.items())
        if isinstance(pair, tuple) and pair and isinstance(pair[0], BaseException)
    ]


def is_disk_full(error: BaseException) -> bool:
    """No space left, or over a quota, anywhere in `error`'s chain."""
    found = os_error_behind(error)
    return found is not None and found.errno in DISK_FULL_ERRNOS


def write_failure(error: BaseException) -> str | None:
    """A failed write in the OS's words ("No space left on device"); None when no OSError is
    behind `error` (a bug, not the disk: the caller raises it)."""
    found = os_error_behind(error)
    if found is None:
        return None
    return found.strerror or str(found)


# torch's zip writer reports a short write of its own, with no OSError behind it
# ("[enforce fail at inline_container.cc:...] . unexpected pos 704 vs 598")
_SHORT_WRITE = "unexpected pos"
# a short write onto a disk with less than this left is the disk being full
_NEARLY_FULL_BYTES = 1 << 20


def short_write_failure(error: BaseException, directory: Path) -> str | None:
    """"No space left on device" for torch's own short-write error when the disk it wrote to
    is (nearly) full: a DCP shard writer raises that, not the OSError; None otherwise."""
    if _SHORT_WRITE not in str(error):
        return None
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return None
    return os.strerror(errno.ENOSPC) if free < _NEARLY_FULL_BYTES else None


class CheckpointWriter(Protocol):
    """What a retry writes the waiting checkpoint with (the run's Checkpointer)."""

    run_dir: Path | None
    last_checkpoint: Path | None

    def write(self, *, is_best: bool = False) -> tuple[Path, str | None]: ...

    def saved(self, path: Path, reason: str) -> None: ...


class DiskWait:
    """What of one run waits for room on its disk, and the retries until it is written.

    `metrics`: the run's metrics writer (rank 0's writes; every rank learns its failure);
    `queue`: where the retry timer puts its `disk_retry` command; `max_steps`: a run paused
    at its last step has no training to go on with."""

    def __init__(
        self,
        *,
        metrics: MetricsWriter,
        world: World,
        group: Any,
        reporter: Reporter,
        counters: Counters,
        queue: CommandQueue,
        max_steps: int,
    ) -> None:
        self.metrics_writer = metrics
        self.world = world
        self.group = group
        self.reporter = reporter
        self.counters = counters
        self.queue = queue
        self.max_steps = max_steps
        self.checkpoint: str | None = None  # the reason of the checkpoint not written
        self.metrics = False  # metrics.jsonl's newest records are held in memory
        self.resume = False  # it was running: go on once written (not after a pause by hand)
        self.failure = ""  # the newest failure, in the OS's words
        self._timer: threading.Timer | None = None

    @property
    def waiting(self) -> bool:
        return self.checkpoint is not None or self.metrics

    def checkpoint_failed(self, failure: str, reason: str, was_running: bool) -> None:
        """A checkpoint could not be written (on every rank): the alert, the pause, a retry."""
        self.failure = failure
        self.reporter.alert(
            "error",
            f"checkpoint at step {self.counters.step} failed ({failure}); the previous one is "
            f"intact: {FREE_SPACE}",
            "disk",
        )
        self.checkpoint = reason
        self._pause(was_running)

    def metrics_failed(self) -> None:
        """The `disk_full` command (every rank): rank 0's metrics.jsonl stopped being written."""
        failure = from_main(self.metrics_writer.failure, self.world, self.group)
        if failure is None or self.metrics:
            return  # written again since (a retry), or said already
        self.metrics = True
        if self.checkpoint is not None:
            return  # paused for the same full disk, said once
        self.failure = failure
        self.reporter.alert(
            "error",
            f"metrics.jsonl cannot be written ({failure}): paused, its newest records kept in "
            f"memory; {FREE_SPACE}",
            "disk",
        )
        self._pause(self.reporter.state == RunState.RUNNING)

    def _pause(self, was_running: bool) -> None:
        self.resume = self.resume or was_running
        if self.reporter.state != RunState.PAUSED:
            self.reporter.set_state(RunState.PAUSED, "disk full")
        self.schedule_retry()

    def schedule_retry(self) -> None:
        """In RETRY_S, queue a `disk_retry` (rank 0: the exchange takes it to every rank)."""
        if not self.world.is_main:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = threading.Timer(RETRY_S, self.queue.put, (DiskRetry(),))
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def retry(self, checkpointer: CheckpointWriter, by_user: bool = False) -> bool:
        """Write what waits (every rank at once) with `checkpointer`; True once it is all on
        disk. Failing again waits for the next retry: quietly, unless a person asked."""
        if not self.waiting:
            return True
        world, group, writer = self.world, self.group, self.metrics_writer
        written = True
        if self.metrics:
            ok = writer.retry() if world.is_main else None
            written = bool(from_main(ok, world, group))
            self.metrics = not written
        if written and self.checkpoint is not None and from_main(
            self._room_for_a_checkpoint(checkpointer), world, group
        ):
            path, failure = checkpointer.write()
            if failure is None:
                checkpointer.saved(path, self.checkpoint)
                self.checkpoint = None
            else:
                self.failure = failure
        report = self.reporter
        if self.waiting:
            if by_user:
                report.alert("warning", f"still no room ({self.failure}): {FREE_SPACE}", "disk")
            self.schedule_retry()
            return False
        self.cancel()
        resume, self.resume = self.resume, False
        going_on = "; training goes on" if resume and self.counters.step < self.max_steps else ""
        lost, writer.lost = writer.lost, 0  # said here, not again on closing
        written_text = (
            f"what waited is written but {lost} records (beyond the "
            f"{writer.MAX_UNWRITTEN_BYTES >> 20} MiB kept in memory)"
            if lost
            else "what waited is written"
        )
        report.alert("info", f"disk space is back: {written_text}{going_on}", "disk")
        if resume and report.state == RunState.PAUSED:
            report.set_state(RunState.RUNNING, "disk space freed")
        return True

    def _room_for_a_checkpoint(self, checkpointer: CheckpointWriter) -> bool:
        """Room for one more checkpoint as large as the last (a file, or a sharded run's
        directory), so that a retry does not write most of one only to fail again (without a
        last one, try)."""
        if not self.world.is_main or checkpointer.run_dir is None:
            return True
        last = checkpointer.last_checkpoint
        try:
            if last is None:
                needed = 0
            elif last.is_file():
                needed = last.stat().st_size
            else:
                needed = size_on_disk(last)  # its shards, meta.pt: 0 when it is not there
            return shutil.disk_usage(checkpointer.run_dir).free > needed
        except OSError:
            return True
