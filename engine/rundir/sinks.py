"""The run's optional log sinks beside metrics.jsonl (TensorBoard, the Prometheus endpoint),
chosen by `[log]`. The TensorBoard sink only queues each event (full: dropped and counted); a
daemon thread writes it through an EventFile, and what it could not write is one line when the
run closes it, never a traceback.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.config.run_config import ConfigError, RunConfig
from engine.events import Event
from engine.export.metrics_records import BranchTracker
from engine.files import DIR_MODE, make_private_dir, own_dir_problem, refusal
from engine.rundir.event_file import EventFile
from engine.rundir.metrics_endpoint import MetricsEndpoint
from engine.rundir.tensorboard_scalars import KINDS, ScalarWriter, write_record

MISSING_TENSORBOARD = (
    "log.tensorboard: the tensorboard package is not installed; "
    "pip install 'cockpit[tensorboard]' or turn it off"
)
_KINDS = KINDS | {"run_started"}  # what the sink queues (run_started: a resume's branch point)


def summary_writer_class() -> Any:
    """torch's SummaryWriter; ConfigError (one line) when the tensorboard package is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # torch raises it when `tensorboard` cannot be imported
        raise ConfigError(MISSING_TENSORBOARD) from None
    return SummaryWriter


def open_event_file(log_dir: Path, start_step: int = 0) -> EventFile:
    """A new event file in `log_dir`, made now as the run's own directory (0755, in the run's
    private one) when absent; an existing one (a resume's) must be a directory of ours that only
    we can write in: a link, or another user's directory, is refused in one line. A resumed run
    (start_step S > 0) hides the points after S that an earlier session wrote."""
    summary_writer_class()  # the tensorboard package, or one line saying how to install it
    try:
        make_private_dir(log_dir, DIR_MODE)
    except FileExistsError:
        if log_dir.is_symlink():  # its event files would be made wherever the link points
            raise ConfigError(refusal(log_dir, "is a symbolic link")) from None
        problem = own_dir_problem(log_dir)
        if problem is not None:
            fix = f"{problem.chmod}, or remove it" if problem.chmod else "remove it"
            raise ConfigError(f"{log_dir} {problem.reason}; {fix} and start again") from None
    return EventFile(log_dir, start_step)


def purge_after(writer: Any, step: int) -> None:
    """Hide the points after `step` already written to `writer` (an in-session rollback)."""
    writer.purge_after(step)


class TensorBoardSink:
    """Writes a run's events to TensorBoard off the training thread.

    `dropped` counts events the full queue refused, `failed` those the writer raised on
    (the first error is kept in `error`); `close()` returns both as one line (the run records it as an alert).
    """

    CAPACITY = 10_000
    CLOSE_WAIT_S = 10.0
    FLUSH_S = 2.0  # a quiet queue this long: the writer's buffer goes to its file

    def __init__(
        self,
        writer: ScalarWriter,
        start_step: int = 0,
        capacity: int = CAPACITY,
        purge: Callable[[Any, int], None] | None = purge_after,
    ) -> None:
        self._writer = writer
        self._purge = purge
        self._branch = BranchTracker(start_step)
        self._queue: queue.Queue[Event | None] = queue.Queue(maxsize=capacity)
        self._closed = False
        self.dropped = 0
        self.failed = 0
        self.unflushed = False  # a flush failed: what was buffered then is lost
        self.error: str | None = None
        self._thread = threading.Thread(target=self._drain, name="tensorboard-sink", daemon=True)
        self._thread.start()

    def __call__(self, event: Event) -> None:
        if self._closed or event.kind not in _KINDS:
            return
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1  # only the training thread calls this: no lock needed

    def _drain(self) -> None:
        while True:
            try:
                event = self._queue.get(timeout=self.FLUSH_S)
            except queue.Empty:  # a quiet moment: what is written so far reaches the file
                self._flush()
                continue
            if event is None:
                break
            try:
                self._write(event)
            except Exception as e:  # the thread's boundary: a write's failure is counted, not raised
                self.failed += 1
                self._keep(e)
        self._flush()
        try:
            self._writer.close()  # type: ignore[attr-defined]
        except (OSError, ValueError) as e:  # a full disk; a file closed already
            self._keep(e)

    def _flush(self) -> None:
        try:
            self._writer.flush()  # type: ignore[attr-defined]
        except (OSError, ValueError) as e:  # what was buffered is lost: said at the end
            self.unflushed = True
            self._keep(e)

    def _keep(self, error: Exception) -> None:
        """The first error, in a few words (a full disk's OSError in the OS's own)."""
        if self.error is None:
            said = error.strerror if isinstance(error, OSError) and error.strerror else error
            self.error = f"{type(error).__name__}: {said}"

    def _write(self, event: Event) -> None:
        record = event.to_record()
        rewind = self._branch.observe(record)
        if rewind is not None and self._purge is not None:
            self._purge(self._writer, rewind)
        write_record(self._writer, record)

    def close(self, wait_s: float | None = None) -> str | None:
        """Write what is queued, flush and close, waiting at most `wait_s` (a stuck writer is
        left behind: its thread is a daemon). Returns what went wrong, one line, for the run
        to record as an alert; None when the log is complete."""
        if self._closed:
            return None
        self._closed = True
        wait_s = self.CLOSE_WAIT_S if wait_s is None else wait_s
        deadline = time.monotonic() + wait_s
        try:
            self._queue.put(None, timeout=wait_s)  # after what is queued: all of it is written
        except queue.Full:
            pass
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        problems = []
        if self._thread.is_alive():
            problems.append(f"its writer did not finish within {wait_s:g} s")
        if self.dropped:
            problems.append(f"{self.dropped} events dropped (the writer fell behind)")
        if self.failed or self.unflushed:
            lost = f"{self.failed} events not written" if self.failed else "events not written"
            problems.append(f"{lost} ({self.error})")
        if not problems:
            return None
        return (
            f"TensorBoard log incomplete: {'; '.join(problems)}; metrics.jsonl has every record: "
            "`cockpit export RUN_DIR --format tensorboard` writes it whole"
        )


def log_sinks(cfg: RunConfig, run_dir: Path, start_step: int = 0) -> list[Callable[[Event], None]]:
    """The sinks `[log]` asks for, opened on `run_dir`; a resumed run starts at `start_step`."""
    sinks: list[Callable[[Event], None]] = []
    if cfg.log.tensorboard:
        writer = open_event_file(run_dir / "tensorboard", start_step)
        sinks.append(TensorBoardSink(writer, start_step))
    if cfg.log.metrics_port:
        sinks.append(MetricsEndpoint(cfg.log.metrics_port, run_dir, run_dir.name, cfg.name))
    return sinks
