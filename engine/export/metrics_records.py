"""A run's metrics.jsonl as a stream of records, on the branch the run ended on.

Shared by the metric exports and the live TensorBoard sink, so all drop the same abandoned
points: those after step S before a resume from S, and those a rollback went back over (a
`step` record that repeats a recorded step). A step recorded twice without going back in time
(an extra evaluation) keeps both records.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from engine.export import ExportError, run_dir_of
from engine.rundir.metrics_log import read_records


class BranchTracker:
    """Watches records in the order they were written and says when the run went back."""

    def __init__(self, start_step: int = 0) -> None:
        self.last_step = start_step  # the furthest step the current branch has reached
        self._last_step_record = start_step  # the last `step` record's step

    def observe(self, record: Mapping[str, Any]) -> int | None:
        """The step the run goes back to with `record` (later points are abandoned), or None."""
        kind, step = record.get("kind"), record.get("step")
        rewind = None
        if kind == "run_started":
            start = record.get("start_step")
            if isinstance(start, int):
                if start < self.last_step:
                    rewind = start
                self.last_step = self._last_step_record = start
            return rewind
        if not isinstance(step, int) or isinstance(step, bool):
            return None
        if kind == "step":
            if step <= self._last_step_record:
                rewind = step - 1
                self.last_step = rewind
            self._last_step_record = step
        self.last_step = max(self.last_step, step)
        return rewind


def metrics_path(target: Path) -> Path:
    """RUN_DIR/metrics.jsonl for a RUN_DIR or CKPT argument; ExportError when there is none."""
    if not target.exists():
        raise ExportError(f"{target}: no such run directory or checkpoint; check the path")
    path = run_dir_of(target) / "metrics.jsonl"
    if not path.is_file():
        raise ExportError(f"{path} does not exist; export a run directory that has trained")
    return path


class BranchScan:
    """A metrics file's records on the branch the run ended on, read in two passes: the first
    finds where the run went back, the second yields what survives (little memory either way).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        tracker = BranchTracker()
        self._where: list[int] = []  # index of each record that goes back in time
        self._keep_upto: list[int] = []  # the furthest step kept before it
        self.total = 0
        self.damaged: str | None = None  # the one line about lines that are not text, if any
        for index, record in enumerate(read_records(path, self._damaged)):
            self.total += 1
            rewind = tracker.observe(record)
            if rewind is not None:
                self._where.append(index)
                self._keep_upto.append(rewind)
        # a record before several rewinds is kept only under all of them: the suffix minimum
        for i in range(len(self._keep_upto) - 2, -1, -1):
            self._keep_upto[i] = min(self._keep_upto[i], self._keep_upto[i + 1])
        self.abandoned = 0

    def _damaged(self, message: str) -> None:
        self.damaged = message

    def records(self) -> Iterator[dict[str, Any]]:
        """The surviving records in file order; a record without a step (telemetry) is kept."""
        self.abandoned = 0
        where, keep_upto = self._where, self._keep_upto
        for index, record in enumerate(read_records(self.path)):
            if index >= self.total:
                break  # a live run appended since the first pass: its branch is not known yet
            step = record.get("step")
            later = bisect.bisect_right(where, index)  # the first rewind after this record
            if later < len(where) and isinstance(step, int) and step > keep_upto[later]:
                self.abandoned += 1
                continue
            yield record
