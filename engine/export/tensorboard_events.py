"""`cockpit export --format tensorboard`: a run's metrics.jsonl as TensorBoard event files.

The same scalars and texts as the live sink (`[log] tensorboard`), through the same mapping, at
the records' own steps and wall times. Only the branch the run ended on is written: points of a
branch abandoned by a
resume from an older checkpoint or by a rollback are left out, which is what TensorBoard shows
of the live log too. A live run is exported as far as its metrics file went when the export
started. The file is read line by line; memory stays small however long the run.
"""

from __future__ import annotations

from pathlib import Path

from engine.config.run_config import ConfigError
from engine.export import ExportError, ExportResult
from engine.export.metrics_records import BranchScan, metrics_path
from engine.rundir.tensorboard_scalars import write_record

DEFAULT_NAME = "tensorboard"
EVENT_FILE_PREFIX = "events.out.tfevents."


def _clear_previous(out: Path) -> int:
    """Remove event files an earlier export left in `out` (TensorBoard would show both);
    refuse a file in the way or a folder holding anything else."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} is a file; give --out a folder (new or an earlier export)")
    if not out.exists():
        return 0
    entries = list(out.iterdir())
    others = [p.name for p in entries if not p.name.startswith(EVENT_FILE_PREFIX)]
    if others:
        raise ExportError(
            f"{out} holds other files ({', '.join(sorted(others)[:3])}); "
            "give --out a new folder or an earlier TensorBoard export"
        )
    for path in entries:
        path.unlink()
    return len(entries)


def export(target: Path, out: Path) -> ExportResult:
    """Write `target`'s metrics as one TensorBoard event file in the folder `out`."""
    metrics = metrics_path(target)
    from engine.rundir.sinks import summary_writer_class  # torch and tensorboard: only here

    try:
        writer_class = summary_writer_class()
    except ConfigError:
        raise ExportError(
            "the tensorboard package is not installed; pip install 'cockpit[tensorboard]'"
        ) from None
    scan = BranchScan(metrics)
    replaced = _clear_previous(out)
    out.mkdir(parents=True, exist_ok=True)
    writer = writer_class(log_dir=str(out))
    written = 0
    last_step = None
    try:
        for record in scan.records():
            n = write_record(writer, record)
            if n:
                written += n
                last_step = record["step"]
    except OSError as e:
        raise ExportError(f"cannot write {out}: {e.strerror or e}; check the disk") from None
    finally:
        writer.close()
    view = f"view: tensorboard --logdir {out}"
    if written:
        notes = [f"{written} scalars and texts up to step {last_step}; {view}"]
    else:
        notes = [f"no scalars yet: the run has not logged a step; {view}"]
    if scan.abandoned:
        notes.append(f"{scan.abandoned} records of abandoned branches (resume, rollback) left out")
    if scan.damaged:
        notes.append(scan.damaged)
    if replaced:
        notes.append(f"replaced the earlier export in {out}")
    return ExportResult(written=[out], notes=notes)
