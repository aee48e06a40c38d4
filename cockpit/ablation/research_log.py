"""The research log of a series (no Textual, no torch): one row per experiment, appended as each
ends, in RUNS/research/NAME/log.tsv beside the runs.

A row says what was tried (the change in `--set` spelling, on which parent), what it measured
(val bits per byte, tokens, training time, peak memory), what became of it (kept, discarded,
crashed, refused) and why, and who proposed it. The file is only ever appended to, one whole
line per write, so a series stopped or killed midway keeps every row written; a rerun appends
the experiments not logged yet. A line cut short by a crash is skipped on reading, and counted.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config import ConfigError, read_small_text
from engine.files import open_for_append
from engine.rundir import check_private_place, make_private_place

RESEARCH_DIR = "research"  # under the runs root
LOG_NAME = "log.tsv"
LOG_LIMIT = 64 * 1024 * 1024  # some hundred thousand rows
LOG_DIR_FIX = "pass --runs DIR of your own"
COLUMNS = (
    "id", "change", "parent", "val_bpb", "tokens", "train_time_s", "peak_memory_bytes", "status",
    "reason", "proposed_by", "note", "run_dir",
)  # fmt: skip
STATUSES = ("kept", "discarded", "crashed", "refused", "rejected")
NUMBERS = {"val_bpb": float, "tokens": int, "train_time_s": float, "peak_memory_bytes": int}


@dataclass(frozen=True)
class LogRow:
    """One experiment. `change` is "" for the baseline itself; figures None when not measured."""

    id: str
    change: str
    parent: str
    val_bpb: float | None
    tokens: int | None
    train_time_s: float | None
    peak_memory_bytes: int | None
    status: str
    reason: str = ""  # why it was tried (a series file's name for it, an agent's reason)
    proposed_by: str = ""
    note: str = ""  # why it was kept or discarded, or how it failed
    run_dir: str = ""

    def fields(self) -> list[str]:
        return [_cell(getattr(self, name)) for name in COLUMNS]

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in COLUMNS}


def _cell(value: Any) -> str:
    """A value as one TSV field: no tab or line break inside it (they would split the row)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.10g}"  # the notes' rounding of it is the table's
    return " ".join(str(value).replace("\t", " ").splitlines())


def log_dir(runs_root: Path, name: str) -> Path:
    return runs_root / RESEARCH_DIR / name


class ResearchLog:
    """The log of one series: rows read back, new ones appended."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOG_NAME

    def logged_ids(self) -> set[str]:
        """The ids already in the log (none when there is no log yet)."""
        if not self.path.is_file():
            return set()
        return {row.id for row in read_log(self.path)[0]}

    def append(self, rows: Sequence[LogRow]) -> None:
        """Append `rows`, each in one write and synced: a crash leaves whole rows and at most one
        cut line, which a later append moves onto a line of its own. ConfigError when the log's
        place is not private or the log is no plain file of its own; OSError when unwritable."""
        if not rows:
            return
        make_private_place(self.directory, "research log directory", LOG_DIR_FIX)
        with open_for_append(self.path) as out:
            size = out.seek(0, os.SEEK_END)
            if size == 0:
                out.write(("\t".join(COLUMNS) + "\n").encode())
            elif not _ends_with_newline(self.path, size):
                out.write(b"\n")  # the line a crash cut short stays alone, skipped on reading
            for row in rows:
                out.write(("\t".join(row.fields()) + "\n").encode())
                out.flush()
                os.fsync(out.fileno())


def _ends_with_newline(path: Path, size: int) -> bool:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        return os.pread(fd, 1, size - 1) == b"\n"
    finally:
        os.close(fd)


def read_log(path: Path) -> tuple[list[LogRow], int]:
    """The rows of a log and how many lines were skipped as damaged (cut short, or not rows of
    this log). ConfigError (one line) when there is no log there or it is not one."""
    check_private_place(path.parent, "research log directory", LOG_DIR_FIX)
    try:
        text = read_small_text(path, "a research log", LOG_LIMIT)  # no FIFO, no /dev/zero
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such log") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: a directory, not a research log") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text, not a research log; move it away") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror})") from None
    lines = text.split("\n")
    if not lines or lines[0].split("\t")[: len(COLUMNS)] != list(COLUMNS):
        raise ConfigError(
            f"{path}: not a research log (its first line is not the log's header); move it away"
        )
    names = lines[0].split("\t")
    rows, damaged = [], 0
    body, tail = lines[1:-1], lines[-1]  # the last piece has no newline: cut short, or empty
    damaged += bool(tail)
    for line in body:
        row = parse_row(line, names)
        if row is None:
            damaged += bool(line)
        else:
            rows.append(row)
    return rows, damaged


def parse_row(line: str, names: Sequence[str]) -> LogRow | None:
    fields = line.split("\t")
    if len(fields) != len(names):
        return None
    raw = dict(zip(names, fields, strict=True))
    if raw["status"] not in STATUSES or not raw["id"]:
        return None
    values: dict[str, Any] = {}
    for name in COLUMNS:
        text = raw[name]
        if name in NUMBERS:
            try:
                number = NUMBERS[name](text) if text else None
            except ValueError:
                return None
            values[name] = number if number is None or math.isfinite(number) else None
        else:
            values[name] = text
    return LogRow(**values)


def find_log(runs_root: Path, name: str | None) -> Path:
    """The log of series `name` under `runs_root`, or the newest one when `name` is None; a
    ConfigError (one line) saying which there are when it is not there."""
    research = runs_root / RESEARCH_DIR
    known = sorted(
        (p for p in research.glob(f"*/{LOG_NAME}") if p.is_file()), key=lambda p: p.stat().st_mtime
    ) if research.is_dir() else []  # fmt: skip
    if name is None:
        if not known:
            raise ConfigError(
                f"no research log under {research} (cockpit ablate writes one per series); "
                "pass --runs DIR for another runs root"
            )
        return known[-1]
    if not name or "/" in name or name in (".", ".."):
        raise ConfigError(f"{name!r}: a series' name, as `cockpit research log` lists them")
    path = research / name / LOG_NAME
    if not path.exists():
        there = ", ".join(p.parent.name for p in reversed(known)) or "none"
        raise ConfigError(
            f"no research log {name!r} in {research} (there: {there}); pass one of those names"
        )
    return path


def to_json(name: str, path: Path, rows: Iterable[LogRow], damaged: int) -> str:
    return json.dumps(
        {
            "name": name,
            "path": str(path),
            "rows": [r.to_json() for r in rows],
            "damaged_lines": damaged,
        },
        indent=2,
    )
