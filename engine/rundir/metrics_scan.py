"""metrics.jsonl taken apart in one pass over its bytes, for a run's loss curves and a finished
run's replay: one row per line in file order, step records as numpy columns; `kept_steps` and
`kept_others` keep what read_history keeps. Torch-free and textual-free.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from engine.rundir.records import parse_record
from engine.rundir.summary_facts import ROLLED_BACK


class RunHistoryError(Exception):
    """One line: why a run's history cannot be read, and what to do."""


# -------------------------------------------------------------------- reading metrics.jsonl fast
#
# A run is mostly step records, written by one writer in one key order with no spaces
# (Event.to_record, then json.dumps with compact separators). One regex pass over the file's
# bytes takes every line apart: a step line in that layout gives its numbers as groups (no JSON
# parse), any other line (every other kind, a step line in another layout, a line cut by a
# crash) is captured whole and parsed with json.loads (a cut line fails there and is skipped, as
# read_history skips it). Lines come out in file order, which the resume semantics need.

METRICS_NAME = "metrics.jsonl"
REPLAY_READINGS = 120  # newest telemetry readings (and rank reports): the device panel's past
_NUM = rb"[^,]*"  # a number or null: no commas inside (the class is the regex engine's fast one)


def _step_layout(loss: bytes, step_time: bytes, tokens: bytes) -> bytes:
    """The step line as the writer lays it out; each argument is a %b template for its value:
    b"(%b)" captures it as a group, b"%b" only matches it."""
    return (
        rb'\{"kind":"step","time":' + _NUM + rb',"step":(\d+),"loss":' + loss % _NUM + rb',"lr":'
        + _NUM + rb',"grad_norm":' + _NUM + rb',"tokens_per_s":' + _NUM + rb',"step_time_s":'
        + step_time % _NUM + rb',"tokens":' + tokens % rb"\d+" + rb',"mfu":' + _NUM
        + rb',"data_time_s":' + _NUM + rb',"update_ratio":' + _NUM + rb"\}(?=\n)"
    )


# groups: step, loss, step_time_s, tokens | any other line
_CURVE_LINE = re.compile(rb"\n(?:" + _step_layout(b"(%b)", b"(%b)", b"(%b)") + rb"|(\{[^\n]*))")
# groups: the whole step line, step | any other line (the replay parses the steps it keeps)
_REPLAY_LINE = re.compile(rb"\n(?:(" + _step_layout(b"%b", b"%b", b"%b") + rb")|(\{[^\n]*))")


@dataclass
class Scan:
    """metrics.jsonl taken apart: one row per line, in file order."""

    is_step: np.ndarray  # bool: the row is a step record
    step: np.ndarray  # int64 (0 for other rows)
    columns: dict[str, np.ndarray]  # loss, step_time_s, tokens (curves) or nothing (replay)
    step_lines: list[bytes]  # the replay's: each row's step line (b"" for other rows)
    others: list[tuple[int, dict[str, Any]]]  # (row, record) of every other parsed line
    newest_time: float  # the newest record's time (steps' times are not parsed: the last one's)


def read_metrics(run_dir: Path) -> bytes:
    """The metrics file's bytes. RunHistoryError: one line."""
    metrics = run_dir / METRICS_NAME
    try:
        if not metrics.is_file():
            raise FileNotFoundError
        with metrics.open("rb") as f:
            data = f.read()
    except (FileNotFoundError, NotADirectoryError):
        raise RunHistoryError(f"{run_dir}: no {METRICS_NAME}: not a run directory") from None
    except OSError as e:
        raise RunHistoryError(f"{run_dir}: cannot read {METRICS_NAME} ({e.strerror or e})") from None
    if not data or data.isspace():  # (isspace stops at the first other byte: no copy)
        raise RunHistoryError(f"{run_dir}: {METRICS_NAME} is empty: the run recorded nothing")
    return data


def _lines(data: bytes, pattern: re.Pattern[bytes]) -> list[tuple[bytes, ...]]:
    """Every line taken apart by `pattern` (which finds the lines after a newline): the first
    line as an other line, whatever it is (parsed whole), then the rest."""
    rows = pattern.findall(data)
    end = data.find(b"\n")
    first = data if end < 0 else data[:end]
    if first.startswith(b"{"):
        rows.insert(0, (b"",) * (pattern.groups - 1) + (first,))
    return rows


def _positions(items: list[bytes], value: bytes) -> list[int]:
    """Where `value` is in `items` (the searching done in C: a few hits in a million)."""
    found, at = [], -1
    for _ in range(items.count(value)):
        at = items.index(value, at + 1)
        found.append(at)
    return found


def _numbers(texts: list[bytes], kind: type, bad: list[int]) -> np.ndarray:
    """Numbers written by json.dumps; null (a NaN) is NaN. Where a text is no number (a line
    JSON would refuse too) the index goes to `bad`."""
    dtype = np.float64 if kind is float else np.int64
    if kind is float:  # (\d+) groups are never null
        for at in _positions(texts, b"null"):
            texts[at] = b"nan"
    try:
        return np.fromiter(map(kind, texts), dtype, len(texts))
    except ValueError:
        pass
    values = np.zeros(len(texts), dtype)
    for at, text in enumerate(texts):
        try:
            values[at] = kind(text)
        except ValueError:
            bad.append(at)
    return values


def scan_metrics(run_dir: Path, replay: bool, data: bytes | None = None) -> Scan:
    """The metrics.jsonl of `run_dir` taken apart: with `replay`, each step's line kept whole
    (the replay parses the steps it keeps) and the newest readings parsed; else the curves'
    columns (loss, step_time_s, tokens). `data`: the file's bytes when already read.
    RunHistoryError: one line."""
    rows = _lines(read_metrics(run_dir) if data is None else data, _REPLAY_LINE if replay else _CURVE_LINE)
    n = len(rows)
    texts = {"step": list(map(itemgetter(1 if replay else 0), rows))}
    other_rows = _positions(texts["step"], b"")  # not step lines in the writer's layout
    other_text = {row: rows[row][-1] for row in other_rows}
    if not replay:
        for column, name in enumerate(("loss", "step_time_s", "tokens"), start=1):
            texts[name] = list(map(itemgetter(column), rows))
    step_lines = list(map(itemgetter(0), rows)) if replay else []
    del rows
    for row in other_rows:  # placeholders, set from the parsed record
        for column in texts.values():
            column[row] = b"0"
    is_step = np.ones(n, bool)
    is_step[other_rows] = False
    bad: list[int] = []
    step = _numbers(texts.pop("step"), int, bad)
    kinds = {"loss": float, "step_time_s": float, "tokens": int}
    parsed = {name: _numbers(texts[name], kinds[name], bad) for name in texts}
    is_step[bad] = False  # not numbers: JSON would refuse the line, so it is skipped
    others, readings = _parse_others(other_text, step, is_step, parsed, step_lines)
    if replay:
        others = _with_newest_readings(others, other_text, readings)
    newest = _newest_time(others, step_lines, is_step)
    return Scan(is_step, step, parsed, step_lines, others, newest)


def _parse_others(
    texts: dict[int, bytes], step: np.ndarray, is_step: np.ndarray, parsed: dict[str, np.ndarray],
    step_lines: list[bytes],
) -> tuple[list[tuple[int, dict[str, Any]]], list[int]]:
    """(row, record) of the other lines a run's history uses, and the rows of the readings
    (many and bulky in a long run: only the replay's newest are parsed, later). A step line in
    another layout goes into the step columns."""
    others: list[tuple[int, dict[str, Any]]] = []
    readings: list[int] = []
    for row, text in texts.items():
        kind = _kind_of(text)
        if kind in _READINGS:
            readings.append(row)
            continue
        if kind in _UNUSED:
            continue
        try:
            record = parse_record(text)
        except ValueError:
            continue  # cut short by a crash (maybe glued to the next writer's first), or damaged
        if record.get("kind") != "step":
            others.append((row, record))
        elif _take_step(record, row, step, is_step, parsed) and step_lines:
            step_lines[row] = text
    return others, readings


_READINGS = (b"telemetry", b"ranks")  # the replay keeps the newest REPLAY_READINGS of each
_UNUSED = (b"viewer", b"command", b"data_progress")  # drawn by no panel of a run that is over


def _kind_of(text: bytes) -> bytes:
    """A record line's kind, read off its start (Event.to_record puts it first); b"" if not."""
    if not text.startswith(b'{"kind":"'):
        return b""
    return text[9 : text.find(b'"', 9)]


def _with_newest_readings(
    others: list[tuple[int, dict[str, Any]]], texts: dict[int, bytes], readings: list[int]
) -> list[tuple[int, dict[str, Any]]]:
    """`others` with the newest readings of each kind added, in row order."""
    return sorted(others + _newest_readings(texts, readings), key=itemgetter(0))


def _newest_readings(texts: dict[int, bytes], rows: list[int]) -> list[tuple[int, dict[str, Any]]]:
    by_kind: dict[bytes, list[int]] = {kind: [] for kind in _READINGS}
    for row in rows:
        by_kind[_kind_of(texts[row])].append(row)
    parsed = []
    for kind_rows in by_kind.values():
        for row in kind_rows[-REPLAY_READINGS:]:
            try:
                parsed.append((row, parse_record(texts[row])))
            except ValueError:
                continue  # cut short by a crash, or damaged
    return parsed


def _take_step(
    record: dict[str, Any], row: int, step: np.ndarray, is_step: np.ndarray, parsed: dict[str, np.ndarray]
) -> bool:
    if not isinstance(record.get("step"), int):
        return False
    step[row], is_step[row] = record["step"], True
    for name, column in parsed.items():
        value = record.get(name)
        column[row] = value if isinstance(value, (int, float)) else math.nan
    return True


def _newest_time(others: list[tuple[int, dict[str, Any]]], step_lines: list[bytes], is_step: np.ndarray) -> float:
    steps = np.flatnonzero(is_step)
    last_step: Any = None
    if step_lines and len(steps):
        try:
            last_step = parse_record(step_lines[steps[-1]])
        except ValueError:
            pass
    return _newest_of(others, last_step)


def _newest_of(others: list[tuple[int, dict[str, Any]]], last_step: Any) -> float:
    """The newest time of the other records and of the last step line's record (None: none)."""
    times = [r["time"] for _, r in others if isinstance(r.get("time"), (int, float))]
    try:
        if last_step is not None:
            times.append(float(last_step["time"]))
    except (ValueError, KeyError, TypeError):
        pass
    return max(times, default=0.0)


def newest_run_started(scan: Scan, run_dir: Path) -> tuple[int, dict[str, Any]]:
    """The newest run_started record and its row."""
    for row, record in reversed(scan.others):
        if record.get("kind") == "run_started":
            return row, record
    raise RunHistoryError(
        f"{run_dir}: {METRICS_NAME} has no run_started record: the run never started training"
    )


def _branch_point(record: dict[str, Any], rollbacks: bool) -> int | None:
    """The step a record says the run goes on from, abandoning what it recorded after it: a
    resume's run_started (its start step), a rollback's state record (its checkpoint's step;
    only when `rollbacks`)."""
    kind = record.get("kind")
    if kind == "run_started" and isinstance(record.get("start_step"), int):
        return record["start_step"]
    rolled_back = kind == "state" and record.get("reason") == ROLLED_BACK
    if rollbacks and rolled_back and isinstance(record.get("step"), int):
        return record["step"]
    return None


def _drop_limits(scan: Scan, rows: np.ndarray, rollbacks: bool = True) -> np.ndarray:
    """For each row, the highest step a record there may have and survive: a resume or (when
    `rollbacks`) a rollback later in the file, from step S, drops every earlier record after S
    (an abandoned branch)."""
    starts = [(row, step) for row, r in scan.others if (step := _branch_point(r, rollbacks)) is not None]
    if not starts:
        return np.full(len(rows), np.iinfo(np.int64).max, np.int64)
    start_rows = np.array([row for row, _ in starts], np.int64)
    lowest_after = np.minimum.accumulate(np.array([s for _, s in starts], np.int64)[::-1])[::-1]
    lowest_after = np.append(lowest_after, np.iinfo(np.int64).max)
    return lowest_after[np.searchsorted(start_rows, rows, side="right")]


def kept_steps(scan: Scan) -> np.ndarray:
    """Rows of the step records that count, in step order: the abandoned branches dropped, and
    of a step recorded twice the later record."""
    rows = np.flatnonzero(scan.is_step)
    rows = rows[scan.step[rows] <= _drop_limits(scan, rows)]
    backwards = rows[::-1]
    _, first = np.unique(scan.step[backwards], return_index=True)
    return backwards[first]


def kept_others(scan: Scan, kinds: tuple[str, ...], key: Callable[[dict[str, Any]], Any] | None) -> list[tuple[int, dict[str, Any]]]:
    """The other records of `kinds` that count (same semantics; `key` None: no latest-wins).
    An alert stays through a rollback: the fault that caused it is what happened, and the
    rollback's own alert names it."""
    chosen = [(row, r) for row, r in scan.others if r.get("kind") in kinds and isinstance(r.get("step"), int)]
    if not chosen:
        return []
    rows = np.array([row for row, _ in chosen], np.int64)
    limits = _drop_limits(scan, rows, rollbacks="alert" not in kinds)
    alive = [(row, r) for (row, r), limit in zip(chosen, limits.tolist(), strict=True) if r["step"] <= limit]
    if key is None:
        return alive
    latest = {key(r): (row, r) for row, r in alive}
    return sorted(latest.values(), key=lambda item: (item[1]["step"], item[0]))


def thinned(count: int, max_count: int) -> list[int]:
    """Positions 0..count-1 thinned evenly to about `max_count`, the last one always kept."""
    if count <= 0:
        return []
    keep = list(range(0, count, max(1, math.ceil(count / max(1, max_count)))))
    if keep[-1] != count - 1:
        keep.append(count - 1)
    return keep


# -------------------------------------------------------------------- a finished run's replay, fast
#
# The replay keeps ~8,000 of a long run's step records; the general scan above still takes every
# step line apart to apply the latest-wins and resume rules. In the common case nothing needs
# them: one engine wrote the steps in order, one line each. Then the step lines are told by their
# first bytes alone (numpy, over every line start at once), thinned by their index and only the
# kept ones parsed; the few other lines are parsed as the scan parses them.

_STEP_START = b'{"kind":"step","time":'  # how the engine's writer starts every step line
_CHUNK = 1 << 22  # bytes compared at a time when finding newlines (no file-sized temporary)


@dataclass
class FastReplay:
    """A replay's records read the fast way: `scan` holds the other records (others,
    newest_time) and no step rows; `steps` are the thinned step records with their rows."""

    scan: Scan
    steps: list[tuple[int, dict[str, Any]]]
    last_step: int  # the newest step recorded (0: none)


def scan_replay_fast(data: bytes, max_steps: int) -> FastReplay | None:
    """metrics.jsonl's bytes read for a replay without parsing every step line, with the same
    result as scan_metrics(replay=True) then thinning to `max_steps`; None where that cannot be
    shown cheaply (a resume that retrains steps, a rollback, a step line in another layout, a
    step missing or repeated...): the caller scans the general way."""
    if len(data) < len(_STEP_START) + 8:
        return None
    starts, ends = _line_bounds(data)
    buf = np.frombuffer(data, np.uint8)
    braced = buf[starts] == ord("{")  # the scan's rows: the lines that start with {
    row_of = np.cumsum(braced) - 1
    is_step = braced & _starts_like_a_step(data, starts, ends)
    if not data.endswith(b"\n"):
        is_step[-1] = False  # maybe cut by a crash: parsed whole, as the scan does
    if is_step[0]:
        return None  # the scan parses the first line whole, whatever it is
    step_lines = np.flatnonzero(is_step)
    other_text = {int(row_of[i]): data[starts[i] : ends[i]] for i in np.flatnonzero(braced & ~is_step).tolist()}
    found_step = np.zeros(int(row_of[-1]) + 1, bool)  # set where another line is a step record
    others, readings = _parse_others(other_text, np.zeros(len(found_step), np.int64), found_step, {}, [])
    if found_step.any() or any(r.get("kind") == "alert" and r.get("code") == "rollback" for _, r in others):
        return None
    others = _with_newest_readings(others, other_text, readings)
    step_rows = row_of[step_lines]
    checked = _parse_in_order(data, starts[step_lines], ends[step_lines], step_rows, others, max_steps)
    if checked is None:
        return None
    kept = [(int(step_rows[at]), checked[at]) for at in thinned(len(step_lines), max_steps)]
    last = kept[-1][1] if kept else None
    scan = Scan(np.zeros(0, bool), np.zeros(0, np.int64), {}, [], others, _newest_of(others, last))
    return FastReplay(scan, kept, last["step"] if last else 0)


def _line_bounds(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Each line's start and end (its newline, or the file's end)."""
    buf = np.frombuffer(data, np.uint8)
    newlines = np.concatenate(
        [np.flatnonzero(buf[at : at + _CHUNK] == ord("\n")) + at for at in range(0, len(buf), _CHUNK)]
    )
    starts = np.concatenate(([0], newlines + 1))
    ends = np.append(newlines, len(buf))
    if starts[-1] == len(buf):  # the file ends with a newline: no line after it
        starts, ends = starts[:-1], ends[:-1]
    return starts, ends


def _starts_like_a_step(data: bytes, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each line starts with _STEP_START: three 8-byte words compared per line (the
    bytes seen as overlapping little-endian words, no copy)."""
    words = np.ndarray((len(data) - 7,), "<u8", buffer=data, strides=(1,))
    at = np.minimum(starts, len(data) - len(_STEP_START))  # a shorter line fails the length test
    same = ends - starts >= len(_STEP_START)
    for offset in (0, 8, len(_STEP_START) - 8):
        word = np.frombuffer(_STEP_START[offset : offset + 8], "<u8")[0]
        same &= words[at + offset] == word
    return same


def _parse_in_order(
    data: bytes, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray,
    others: list[tuple[int, dict[str, Any]]], max_steps: int,
) -> dict[int, dict[str, Any]] | None:
    """The records of the step lines the replay keeps (and of those around each resume), by
    position, when each is step first+position: with the last line's step that says as many
    lines as steps, first..last in file order, so no record replaces another and no resume
    drops one (between two kept lines a step repeated and one missing would pass: the engine
    writes neither without a resume or a rollback, both checked). None where they do not."""
    count = len(starts)
    positions = set(thinned(count, max_steps))
    limits = []  # (position of the last step line before a resume, its start step)
    for row, record in others:
        if record.get("kind") == "run_started" and isinstance(record.get("start_step"), int):
            before = int(np.searchsorted(rows, row))
            if before:
                limits.append((before - 1, record["start_step"]))
                positions.update((before - 1, min(before, count - 1)))
    records = {}
    for at in sorted(positions):
        try:
            record = parse_record(data[starts[at] : ends[at]])
        except ValueError:
            return None
        if record.get("kind") != "step":
            return None
        records[at] = record
    if not records:
        return records
    first = records[0]["step"]
    if any(record["step"] != first + at for at, record in records.items()):
        return None
    if any(first + at > start for at, start in limits):
        return None  # a resume from an older step: the branch it abandoned is dropped
    return records
