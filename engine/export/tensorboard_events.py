"""`cockpit export --format tensorboard`: a run's metrics.jsonl as TensorBoard event files, with
the live sink's mapping, at the records' own steps and wall times, on the branch the run ended
on. A live run is exported as far as its metrics file went; memory stays small.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.config.run_config import ConfigError
from engine.export import ExportError, ExportResult
from engine.export.metrics_records import BranchScan, metrics_path
from engine.export.place import staged_dir
from engine.rundir.tensorboard_scalars import write_record

DEFAULT_NAME = "tensorboard"
EVENT_FILE_PREFIX = "events.out.tfevents."


def _previous_event_files(out: Path) -> list[str]:
    """The event files an earlier export left in `out` (TensorBoard would show both: they are
    replaced); a folder holding anything else is refused."""
    if not out.is_dir() or out.is_symlink():
        return []  # nothing there yet, or what staged_dir refuses in one line
    entries = os.listdir(out)
    others = [name for name in entries if not name.startswith(EVENT_FILE_PREFIX)]
    if others:
        raise ExportError(
            f"{out} holds other files ({', '.join(sorted(others)[:3])}); "
            "give --out a new folder or an earlier TensorBoard export"
        )
    return entries


def export(target: Path, out: Path) -> ExportResult:
    """Write `target`'s metrics as one TensorBoard event file in the folder `out`."""
    metrics = metrics_path(target)
    from engine.rundir.sinks import summary_writer_class  # torch and tensorboard: only here

    try:
        summary_writer_class()
    except ConfigError:
        raise ExportError(
            "the tensorboard package is not installed; pip install 'cockpit[tensorboard]'"
        ) from None
    from engine.rundir.event_file import EventFile

    scan = BranchScan(metrics)
    previous = _previous_event_files(out)
    written = 0
    last_step = None
    # written on this thread in a new private folder (a full disk is an OSError here, never a
    # traceback from a writer's thread), then renamed into `out` with the earlier files removed
    with staged_dir(out, stale=previous) as stage:
        events = EventFile(stage)
        try:
            for record in scan.records():
                n = write_record(events, record)
                if n:
                    written += n
                    last_step = record["step"]
        finally:
            events.close()
    view = f"view: tensorboard --logdir {out}"
    if written:
        notes = [f"{written} scalars and texts up to step {last_step}; {view}"]
    else:
        notes = [f"no scalars yet: the run has not logged a step; {view}"]
    if scan.abandoned:
        notes.append(f"{scan.abandoned} records of abandoned branches (resume, rollback) left out")
    if scan.damaged:
        notes.append(scan.damaged)
    if previous:
        notes.append(f"replaced the earlier export in {out}")
    return ExportResult(written=[out], notes=notes)
