"""The metrics log: every event of a run, one JSON line each, in the run's metrics.jsonl.

The writer and the reader live together so the file's format is decided in one place:
`MetricsWriter` appends what the engine emits, `read_records` reads its lines back (past a
damaged one), `read_history` reads a run's past back into events (a resumed run's curves).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.config import open_regular_file
from engine.events import DataProgress, Event
from engine.files import open_for_append
from engine.rundir.records import DamagedLines, DamagedRecord, parse_record


class MetricsWriter:
    """Appends every event to metrics.jsonl as strict JSON; writes at least once a second and on key
    events. Without a path it holds the lines until `open(path)`. A failed write (a full disk) keeps
    the unwritten bytes (up to MAX_UNWRITTEN_BYTES, then counts `lost`), calls `on_failure()` once,
    and `retry()` writes them once there is room."""

    FLUSH_ON = {
        "eval", "checkpoint", "state", "alert", "run_started", "lr_changed", "settings_changed",
        "sample",
    }  # fmt: skip
    MAX_UNWRITTEN_BYTES = 64 << 20  # days of a paused run's telemetry; a running one pauses

    def __init__(
        self, path: Path | None = None, on_failure: Callable[[], None] | None = None
    ) -> None:
        self.path: Path | None = None
        self._file: Any = None
        # Encoded lines not yet on disk, written with os.write so that a write cut short by a
        # full disk leaves exactly the bytes not written here, never a line twice or lost.
        self._unwritten = bytearray()
        self._closed = False
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self.on_failure = on_failure
        self.failure: str | None = None  # why the last write failed; None while all is written
        self.lost = 0  # lines beyond MAX_UNWRITTEN_BYTES while the disk was full
        if path is not None:
            self.open(path)

    def open(self, path: Path) -> None:
        """Start writing to `path` (appending), held lines first."""
        with self._lock:
            self.path = path
            # never through a planted link (a ConfigError naming it)
            self._file = open_for_append(path)
            failed = not self._write()
        if failed and self.on_failure is not None:
            self.on_failure()

    def __call__(self, event: Event) -> None:
        if isinstance(event, DataProgress) and not event.done:
            return  # a few a second while the corpus is prepared: only the final one is kept
        record = event.to_record()
        record.pop("config", None)  # run_started's config lives in config.json
        line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode("utf-8")
        with self._lock:
            if self._closed:
                return
            if self.failure is not None and len(self._unwritten) >= self.MAX_UNWRITTEN_BYTES:
                self.lost += 1
                return
            self._unwritten += line
            if self._file is None or self.failure is not None:
                return  # held until open(), or until a retry finds room
            now = time.monotonic()
            if not (event.kind in self.FLUSH_ON or now - self._last_flush > 1.0):
                return
            self._last_flush = now
            failed = not self._write()
        if failed and self.on_failure is not None:
            self.on_failure()  # outside the lock: it may emit, and this is called again

    def _write(self) -> bool:
        """Write what is unwritten (the lock held); False, with `failure` set, when it cannot."""
        try:
            while self._unwritten:
                written = os.write(self._file.fileno(), self._unwritten)
                del self._unwritten[:written]
        except OSError as e:
            self.failure = e.strerror or str(e)
            return False
        self.failure = None
        return True

    def retry(self) -> bool:
        """Write what a failure left unwritten; True once all of it is on disk."""
        with self._lock:
            if self._file is None or self._closed:
                return self.failure is None
            return self._write()

    def close(self) -> str | None:
        """Write what is left and close. Returns what could not be written, one line (the run
        records it as an alert), or None when the file has every record."""
        with self._lock:
            self._closed = True
            if self._file is None:
                self._unwritten.clear()  # never opened: the run never got a directory to record in
                return None
            if not self._file.closed:
                self._write()
                try:
                    os.fsync(self._file.fileno())
                except OSError:
                    pass  # what the disk took is there; what it did not is counted below
                self._file.close()
            if self.failure is None and not self.lost:
                return None
            unwritten = self._unwritten.count(b"\n") + self.lost
            why = (
                self.failure
                or f"the disk was full past the {self.MAX_UNWRITTEN_BYTES >> 20} MiB kept"
            )
            return f"{self.path}: {unwritten} records could not be written ({why})"


HISTORY_KINDS = ("step", "eval", "lr_changed", "settings_changed", "sample", "checkpoint")
# Step records a run's history is thinned to (evenly) wherever it is replayed: a resumed run's
# curves, a viewer's replay on attach, a finished run's view. Enough for any plot's columns.
REPLAY_STEPS = 8000


def read_records(
    metrics: Path, on_damaged: Callable[[str], None] | None = None
) -> Iterator[dict[str, Any]]:
    """Every record of a metrics file, in file order, through the one tolerant parser (`parse_record`).
    A line cut short by a crash is read past quietly; damaged lines too, and `on_damaged` then gets
    one line saying how many there were."""
    damaged = DamagedLines(metrics)
    with open_regular_file(metrics, "a metrics log") as f:  # a FIFO would wait for ever
        for number, line in enumerate(f, 1):
            try:
                record = parse_record(line)
            except DamagedRecord as e:
                damaged.add(number, e)
                continue
            except ValueError:
                continue  # a line cut short by a crash
            yield record
    message = damaged.message()
    if message is not None and on_damaged is not None:
        on_damaged(message)


def read_history(
    metrics: Path,
    upto_step: int,
    max_steps: int = REPLAY_STEPS,
    on_damaged: Callable[[str], None] | None = None,
) -> list[Event]:
    """Past events of a run from its metrics file, for a resumed run's curves.

    Records after `upto_step` belong to steps that will be trained again and are dropped; for a
    step recorded twice (a crash, then a resume) the later record wins, and a resume at step S
    drops every earlier record after S (a resume from an older checkpoint abandons that branch).
    Step records are thinned evenly to at most `max_steps` so a long run does not flood the UI.
    """
    if not metrics.exists():
        return []
    latest: dict[tuple[str, int, str], dict[str, Any]] = {}
    for record in read_records(metrics, on_damaged):
        kind, step = record.get("kind"), record.get("step")
        if kind == "run_started" and isinstance(record.get("start_step"), int):
            start = record["start_step"]
            latest = {key: r for key, r in latest.items() if key[1] <= start}
        if kind in HISTORY_KINDS and isinstance(step, int) and step <= upto_step:
            latest[(kind, step, str(record.get("prompt", "")))] = record
    records = sorted(latest.values(), key=lambda r: (r["step"], r["time"]))
    steps = [r for r in records if r["kind"] == "step"]
    keep = {id(r) for r in steps[:: max(1, math.ceil(len(steps) / max_steps))]}
    if steps:
        keep.add(id(steps[-1]))
    events = []
    for r in records:
        if r["kind"] == "step" and id(r) not in keep:
            continue
        try:
            events.append(Event.from_record(r))
        except ValueError:
            continue  # a record from an older format
    return events
