"""The metrics log: every event of a run, one JSON line each, in the run's metrics.jsonl.

The writer and the reader live together so the file's format is decided in one place:
`MetricsWriter` appends what the engine emits, `read_history` reads a run's past back into
events (a resumed run's curves).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from engine.events import Event


class MetricsWriter:
    """Appends every event to metrics.jsonl; flushes at least once a second and on key events.

    Without a path it holds the lines in memory until `open(path)`: a run that fails before
    its directory is made (a bad corpus, a refused resume) leaves nothing on disk, and one that
    gets there still records its start. Lines are strict JSON (no NaN: see Event.to_record).
    """

    FLUSH_ON = {"eval", "checkpoint", "state", "alert", "run_started", "lr_changed", "sample"}

    def __init__(self, path: Path | None = None) -> None:
        self.path: Path | None = None
        self._file: Any = None
        self._held: list[str] = []
        self._closed = False
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        if path is not None:
            self.open(path)

    def open(self, path: Path) -> None:
        """Start writing to `path` (appending), held lines first."""
        with self._lock:
            self.path = path
            self._file = path.open("a", encoding="utf-8")
            self._file.writelines(line + "\n" for line in self._held)
            self._held = []
            self._file.flush()

    def __call__(self, event: Event) -> None:
        if event.kind == "data_progress" and not getattr(event, "done", True):
            return  # a few a second while the corpus is prepared: only the final one is kept
        record = event.to_record()
        record.pop("config", None)  # run_started's config lives in config.json
        line = json.dumps(record, separators=(",", ":"), default=str)
        with self._lock:
            if self._closed:
                return
            if self._file is None:
                self._held.append(line)
                return
            self._file.write(line + "\n")
            now = time.monotonic()
            if event.kind in self.FLUSH_ON or now - self._last_flush > 1.0:
                self._file.flush()
                self._last_flush = now

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._held = []  # never opened: the run never got a directory to record in
            if self._file is not None and not self._file.closed:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()


HISTORY_KINDS = ("step", "eval", "lr_changed", "sample", "checkpoint")
# Step records a run's history is thinned to (evenly) wherever it is replayed: a resumed run's
# curves, a viewer's replay on attach, a finished run's view. Enough for any plot's columns.
REPLAY_STEPS = 8000


def read_history(metrics: Path, upto_step: int, max_steps: int = REPLAY_STEPS) -> list[Event]:
    """Past events of a run from its metrics file, for a resumed run's curves.

    Records after `upto_step` belong to steps that will be trained again and are dropped; for a
    step recorded twice (a crash, then a resume) the later record wins, and a resume at step S
    drops every earlier record after S (a resume from an older checkpoint abandons that branch).
    Step records are thinned evenly to at most `max_steps` so a long run does not flood the UI.
    """
    if not metrics.exists():
        return []
    latest: dict[tuple[str, int, str], dict[str, Any]] = {}
    with metrics.open(encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
            kind, step = record.get("kind"), record.get("step")
            if kind == "run_started" and isinstance(record.get("start_step"), int):
                start = record["start_step"]
                latest = {key: r for key, r in latest.items() if key[1] <= start}
            if kind in HISTORY_KINDS and isinstance(step, int) and step <= upto_step:
                latest[(kind, step, record.get("prompt", ""))] = record
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
