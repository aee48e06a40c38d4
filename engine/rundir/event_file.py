"""One TensorBoard event file, written in place: what the live TensorBoard sink writes through.

Unlike torch's SummaryWriter (which reopens its file by name and writes from a thread of its
own), this makes its file new (O_EXCL, O_NOFOLLOW), keeps the one descriptor and writes on the
caller's thread, so a full disk is an OSError there. The records are SummaryWriter's protobufs.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any

from engine.files import create_new


class EventFile:
    """A new event file in `log_dir` (which must exist and be the run's own); a run resumed at
    `start_step` S > 0 hides, in TensorBoard, the points after S an earlier session wrote."""

    def __init__(self, log_dir: Path, start_step: int = 0) -> None:
        from tensorboard.summary.writer.record_writer import RecordWriter

        name = (
            f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}."
            f"{os.getpid()}.{secrets.token_hex(4)}"  # random: no name to plant in advance
        )
        self.path = log_dir / name
        self._file = create_new(self.path)
        self._records = RecordWriter(self._file)
        from tensorboard.compat.proto.event_pb2 import Event

        self._add(Event(file_version="brain.Event:2"))
        # TensorBoard takes the first session-start marker it reads for the start and only a
        # later one for a restart, so a fresh run writes one too (at step 1: nothing before
        # it to purge). Step S itself stays: it is not trained again.
        self.purge_after(start_step)
        self.flush()

    def add_scalar(
        self, tag: str, scalar_value: float, global_step: int, walltime: float | None = None
    ) -> None:
        from torch.utils.tensorboard.summary import scalar

        self._add_summary(scalar(tag, scalar_value), global_step, walltime)

    def add_text(
        self, tag: str, text_string: str, global_step: int, walltime: float | None = None
    ) -> None:
        from torch.utils.tensorboard.summary import text

        self._add_summary(text(tag, text_string), global_step, walltime)

    def purge_after(self, step: int) -> None:
        """Hide the points after `step` already written (a resume, an in-session rollback):
        TensorBoard drops every point at or after a session-start marker's step that came
        before the marker."""
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog

        self._add(Event(step=step + 1, session_log=SessionLog(status=SessionLog.START)))

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()  # flushes what is buffered first

    def _add_summary(self, summary: Any, step: int, walltime: float | None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self._add(Event(summary=summary, step=int(step)), walltime)

    def _add(self, event: Any, walltime: float | None = None) -> None:
        event.wall_time = time.time() if walltime is None else walltime
        self._records.write(event.SerializeToString())
