"""One line of metrics.jsonl read as a record: the one tolerant parser every reader goes through.

A line is a record (a JSON object with `kind`, `time` and, for kinds at a step, `step`), a line
cut short by a crash (a ValueError, read past quietly), or a damaged line (a `DamagedRecord`, a
ValueError too, which `DamagedLines` counts for one line at the end). Torch-free and textual-free.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from engine.events import EVENT_TYPES


class DamagedRecord(ValueError):
    """A line that is whole but not a record: the message says what is wrong with it."""


def _kinds_at_a_step() -> frozenset[str]:
    """The kinds whose event has a `step` with no default: their records need one."""
    return frozenset(
        kind
        for kind, event_type in EVENT_TYPES.items()
        for f in dataclasses.fields(event_type)
        if f.name == "step"
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    )


KINDS_AT_A_STEP = _kinds_at_a_step()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def record_problem(record: Any) -> str | None:
    """What keeps a parsed JSON value from being a record (see the module's note), or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    kind = record.get("kind")
    if not isinstance(kind, str):
        return "a record without a kind"
    if not _is_number(record.get("time")):
        return f"a {kind} record without its time"
    if kind in KINDS_AT_A_STEP:
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            return f"a {kind} record without its step"
    return None


def parse_record(line: bytes | str) -> dict[str, Any]:
    """The record on one line of metrics.jsonl. DamagedRecord: a damaged line (what is wrong
    with it); another ValueError: a line cut short by a crash."""
    try:
        record = json.loads(line)
    except UnicodeDecodeError:
        raise DamagedRecord("not UTF-8 text") from None
    except RecursionError:  # [[[[... thousands deep: json's parser recurses once per level
        raise DamagedRecord("nested too deeply to read") from None
    problem = record_problem(record)
    if problem is not None:
        raise DamagedRecord(problem)
    return record


class DamagedLines:
    """The damaged lines a reader read past, reported in one line once the file is read."""

    def __init__(self, metrics: Path) -> None:
        self.metrics = metrics
        self.found: list[tuple[int, str]] = []  # (line number, what is wrong with it)

    def add(self, number: int, problem: DamagedRecord | str) -> None:
        self.found.append((number, str(problem)))

    def message(self) -> str | None:
        """The one warning about them (None when there were none)."""
        if not self.found:
            return None
        number, problem = self.found[0]
        where = (
            f"line {number} damaged"
            if len(self.found) == 1
            else f"{len(self.found)} lines damaged, the first line {number}"
        )
        return f"{self.metrics}: {where} ({problem}): read past; the other records are used"
