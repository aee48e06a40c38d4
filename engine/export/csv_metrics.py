"""`cockpit export --format csv`: a run's metrics.jsonl as one CSV file per record kind, on the
branch the run ended on: `step` first, nested values as dotted columns (`gpus.0.util_percent`),
an empty cell for a missing or non-finite value. Read line by line: memory stays small.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.export import ExportError, ExportResult
from engine.export.metrics_records import BranchScan, metrics_path
from engine.export.place import staged_dir
from engine.files import create_new

DEFAULT_NAME = "csv"
LEFT_OUT = frozenset({"run_started"})
FIRST_COLUMNS = ("step", "time")
FIRST_KINDS = ("step", "eval")  # the tables most people want, named first in the summary


def flatten(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`record` as one level of columns: nested objects and lists get dotted names."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            if not value:
                continue  # no columns: an empty list is an empty cell under any header
            if all(isinstance(item, str) for item in value):
                out[name] = "; ".join(value)
            else:
                out.update(flatten({str(i): item for i, item in enumerate(value)}, f"{name}."))
        else:
            out[name] = value
    return out


def row_of(record: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(kind, columns) of a record that goes in a table; None for one that does not."""
    kind = record.get("kind")
    if not isinstance(kind, str) or kind in LEFT_OUT or not re.fullmatch(r"[a-z0-9_]+", kind):
        return None
    return kind, flatten({k: v for k, v in record.items() if k != "kind"})


def ordered_header(keys: Iterable[str]) -> list[str]:
    """`keys` in first-seen order, with step and time first where the kind has them."""
    seen = list(dict.fromkeys(keys))
    return [k for k in FIRST_COLUMNS if k in seen] + [k for k in seen if k not in FIRST_COLUMNS]


def cell(value: Any) -> Any:
    """None (null in metrics.jsonl) is an empty cell; numbers and text as they are."""
    return "" if value is None else value


def _headers(scan: BranchScan) -> dict[str, list[str]]:
    keys: dict[str, dict[str, None]] = {}
    for record in scan.records():
        row = row_of(record)
        if row is not None:
            keys.setdefault(row[0], {}).update(dict.fromkeys(row[1]))
    kinds = [k for k in FIRST_KINDS if k in keys] + [k for k in keys if k not in FIRST_KINDS]
    return {kind: ordered_header(keys[kind]) for kind in kinds}


def export(target: Path, out: Path) -> ExportResult:
    """Write `target`'s metrics as KIND.csv files in the folder `out` (replacing those)."""
    metrics = metrics_path(target)
    scan = BranchScan(metrics)
    headers = _headers(scan)
    if not headers:
        raise ExportError(f"{metrics} holds no metrics yet; export the run once it has trained")
    rows = dict.fromkeys(headers, 0)
    # every table written in a new private folder, then renamed into `out` whole (see place)
    with staged_dir(out) as stage, contextlib.ExitStack() as files:
        writers = {}
        for kind, header in headers.items():
            text = io.TextIOWrapper(
                files.enter_context(create_new(stage / f"{kind}.csv")),
                encoding="utf-8",
                newline="",
            )
            files.callback(_flush_and_detach, text)  # runs before its file is closed
            writers[kind] = csv.DictWriter(text, fieldnames=header, restval="")
            writers[kind].writeheader()
        for record in scan.records():
            row = row_of(record)
            if row is None or row[0] not in writers:
                continue  # a kind first seen after the header pass (a live run)
            kind, columns = row
            cells = {k: cell(v) for k, v in columns.items() if k in headers[kind]}
            writers[kind].writerow(cells)
            rows[kind] += 1
    notes = [", ".join(f"{kind}.csv {n} row{'' if n == 1 else 's'}" for kind, n in rows.items())]
    if scan.abandoned:
        notes.append(f"{scan.abandoned} records of abandoned branches (resume, rollback) left out")
    if scan.damaged:
        notes.append(scan.damaged)
    return ExportResult(written=[out / f"{kind}.csv" for kind in headers], notes=notes)


def _flush_and_detach(text: io.TextIOWrapper) -> None:
    """Hand the text's last bytes to its binary file, which the exit stack then closes."""
    text.flush()
    text.detach()
