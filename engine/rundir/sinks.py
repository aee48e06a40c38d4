"""The run's optional log sinks beside metrics.jsonl (TensorBoard), chosen by `[log]`.

A sink is called on the training thread for every event, so the TensorBoard sink only puts
the event on a bounded queue (never blocking: when the queue is full the event is dropped and
counted) and a daemon thread turns it into scalars and writes them.
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
from engine.files import refusal
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


def open_summary_writer(log_dir: Path, start_step: int = 0) -> Any:
    """A SummaryWriter on `log_dir`. A resumed run (start_step S > 0) purges the points after S
    that an earlier session wrote: a rolled-back or abandoned branch is hidden in TensorBoard."""
    writer_class = summary_writer_class()
    # purge_step writes a session-start marker. TensorBoard's UI takes the first marker it
    # reads for the start and only a later one for a restart, so a fresh run writes one too
    # (at step 1: nothing before it to purge). Step S itself stays: it is not trained again.
    return writer_class(log_dir=str(log_dir), purge_step=start_step + 1, flush_secs=10)


def purge_after(writer: Any, step: int) -> None:
    """Hide the points after `step` already written to `writer` (an in-session rollback)."""
    # The marker SummaryWriter writes for purge_step: TensorBoard drops every point at or
    # after its step that came before it.
    from tensorboard.compat.proto.event_pb2 import Event as TfEvent
    from tensorboard.compat.proto.event_pb2 import SessionLog

    file_writer = writer._get_file_writer()
    file_writer.add_event(TfEvent(step=step + 1, session_log=SessionLog(status=SessionLog.START)))


class TensorBoardSink:
    """Writes a run's events to TensorBoard off the training thread.

    `dropped` counts events the full queue refused, `failed` those the writer raised on
    (the first error is kept in `error`); `close()` returns both as one line (the run records it as an alert).
    """

    CAPACITY = 10_000
    CLOSE_WAIT_S = 10.0

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
            event = self._queue.get()
            if event is None:
                break
            try:
                self._write(event)
            except Exception as e:  # a full disk, a closed file: never the training's problem
                self.failed += 1
                self.error = self.error or f"{type(e).__name__}: {e}"
        try:
            self._writer.flush()  # type: ignore[attr-defined]
            self._writer.close()  # type: ignore[attr-defined]
        except Exception as e:
            self.error = self.error or f"{type(e).__name__}: {e}"

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
        if self.failed:
            problems.append(f"{self.failed} events not written ({self.error})")
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
        log_dir = run_dir / "tensorboard"
        if log_dir.is_symlink():  # its event files would be made wherever the link points
            raise ConfigError(refusal(log_dir, "is a symbolic link"))
        writer = open_summary_writer(log_dir, start_step)
        sinks.append(TensorBoardSink(writer, start_step))
    return sinks
