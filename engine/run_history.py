"""A finished (or any) run's history read back from its files, fast enough for a million steps.

`read_curves(run_dir)` gives every step's loss with its tokens and training time, and every
eval, as numpy arrays: what an overlay of that run on another's loss curve draws.
`read_replay(run_dir)` gives the events that draw every panel of a run that is over (what
engine/recorded.py's RecordedRun hands the app). Both read a run as engine/metrics_log.py's
read_history does, from one pass over metrics.jsonl's bytes (a million steps in about 1.5 s on
two cores: bench/open_run.py). Torch-free and textual-free.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import ConfigError
from engine.events import Event, RunState, StateChanged, Step
from engine.run_lock import check_not_in_use


class RunHistoryError(Exception):
    """One line: why a run's history cannot be read, and what to do."""


@dataclass(frozen=True)
class RunCurves:
    """One run's loss curves, every step recorded (for a step recorded twice, after a crash and
    a resume, the later record; a resume from an older checkpoint drops the abandoned branch)."""

    run_dir: Path
    name: str  # how the run is called on screen: its directory's name
    step: np.ndarray  # int64, increasing
    tokens: np.ndarray  # float64: tokens trained on at that step
    train_s: np.ndarray  # float64: training time at that step (evaluation excluded)
    loss: np.ndarray  # float64: the train loss of that step (NaN for a NaN loss)
    val_step: np.ndarray  # int64: the steps with an eval
    val_tokens: np.ndarray  # float64
    val_train_s: np.ndarray  # float64
    val_loss: np.ndarray  # float64 (NaN for a NaN val loss)
    tokens_per_step: int
    max_steps: int
    preset: str


# -------------------------------------------------------------------- reading metrics.jsonl fast
#
# A run is mostly step records, written by one writer in one key order with no spaces
# (Event.to_record, then json.dumps with compact separators). One regex pass over the file's
# bytes takes every line apart: a step line in that layout gives its numbers as groups (no JSON
# parse), any other line (every other kind, a step line in another layout, a line cut by a
# crash) is captured whole and parsed with json.loads (a cut line fails there and is skipped, as
# read_history skips it). Lines come out in file order, which the resume semantics need.

METRICS_NAME = "metrics.jsonl"
REPLAY_STEPS = 8000  # step records in a replay, thinned evenly (the control socket's number)
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
class _Scan:
    """metrics.jsonl taken apart: one row per line, in file order."""

    is_step: np.ndarray  # bool: the row is a step record
    step: np.ndarray  # int64 (0 for other rows)
    columns: dict[str, np.ndarray]  # loss, step_time_s, tokens (curves) or nothing (replay)
    step_lines: list[bytes]  # the replay's: each row's step line (b"" for other rows)
    others: list[tuple[int, dict[str, Any]]]  # (row, record) of every other parsed line
    newest_time: float  # the newest record's time (steps' times are not parsed: the last one's)


def _read_metrics(run_dir: Path) -> bytes:
    """The file's bytes."""
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


def _scan(run_dir: Path, replay: bool) -> _Scan:
    rows = _lines(_read_metrics(run_dir), _REPLAY_LINE if replay else _CURVE_LINE)
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
        others += _newest_readings(other_text, readings)
        others.sort(key=itemgetter(0))
    newest = _newest_time(others, step_lines, is_step)
    return _Scan(is_step, step, parsed, step_lines, others, newest)


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
            record = json.loads(text)
        except ValueError:
            continue  # a line cut short by a crash (maybe glued to the next writer's first)
        if not isinstance(record, dict):
            continue
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


def _newest_readings(texts: dict[int, bytes], rows: list[int]) -> list[tuple[int, dict[str, Any]]]:
    by_kind: dict[bytes, list[int]] = {kind: [] for kind in _READINGS}
    for row in rows:
        by_kind[_kind_of(texts[row])].append(row)
    parsed = []
    for kind_rows in by_kind.values():
        for row in kind_rows[-REPLAY_READINGS:]:
            try:
                record = json.loads(texts[row])
            except ValueError:
                continue
            if isinstance(record, dict):
                parsed.append((row, record))
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
    times = [r["time"] for _, r in others if isinstance(r.get("time"), (int, float))]
    steps = np.flatnonzero(is_step)
    if step_lines and len(steps):
        try:
            times.append(float(json.loads(step_lines[steps[-1]])["time"]))
        except (ValueError, KeyError, TypeError):
            pass
    return max(times, default=0.0)


def _started(scan: _Scan, run_dir: Path) -> tuple[int, dict[str, Any]]:
    """The newest run_started record and its row."""
    for row, record in reversed(scan.others):
        if record.get("kind") == "run_started":
            return row, record
    raise RunHistoryError(
        f"{run_dir}: {METRICS_NAME} has no run_started record: the run never started training"
    )


def _drop_limits(scan: _Scan, rows: np.ndarray) -> np.ndarray:
    """For each row, the highest step a record there may have and survive: a run_started later
    in the file, at start step S, drops every earlier record after S (an abandoned branch)."""
    starts = [(row, r["start_step"]) for row, r in scan.others
              if r.get("kind") == "run_started" and isinstance(r.get("start_step"), int)]
    if not starts:
        return np.full(len(rows), np.iinfo(np.int64).max, np.int64)
    start_rows = np.array([row for row, _ in starts], np.int64)
    lowest_after = np.minimum.accumulate(np.array([s for _, s in starts], np.int64)[::-1])[::-1]
    lowest_after = np.append(lowest_after, np.iinfo(np.int64).max)
    return lowest_after[np.searchsorted(start_rows, rows, side="right")]


def _kept_steps(scan: _Scan) -> np.ndarray:
    """Rows of the step records that count, in step order: the abandoned branches dropped, and
    of a step recorded twice the later record."""
    rows = np.flatnonzero(scan.is_step)
    rows = rows[scan.step[rows] <= _drop_limits(scan, rows)]
    backwards = rows[::-1]
    _, first = np.unique(scan.step[backwards], return_index=True)
    return backwards[first]


def _kept_others(scan: _Scan, kinds: tuple[str, ...], key: Callable[[dict[str, Any]], Any] | None) -> list[tuple[int, dict[str, Any]]]:
    """The other records of `kinds` that count (same semantics; `key` None: no latest-wins)."""
    chosen = [(row, r) for row, r in scan.others if r.get("kind") in kinds and isinstance(r.get("step"), int)]
    if not chosen:
        return []
    limits = _drop_limits(scan, np.array([row for row, _ in chosen], np.int64))
    alive = [(row, r) for (row, r), limit in zip(chosen, limits.tolist(), strict=True) if r["step"] <= limit]
    if key is None:
        return alive
    latest = {key(r): (row, r) for row, r in alive}
    return sorted(latest.values(), key=lambda item: (item[1]["step"], item[0]))


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


def _train_clock(scan: _Scan) -> np.ndarray:
    """Training time at every row: anchored at each run_started (its train_time_s, at its start)
    and each eval (its train_time_s), plus the step_time_s of every step record since."""
    step_time = np.nan_to_num(scan.columns["step_time_s"], nan=0.0)
    step_time[~scan.is_step] = 0.0
    total = np.cumsum(step_time)
    anchors = [(row, r.get("train_time_s") if r["kind"] == "eval" else r.get("train_time_s") or 0.0)
               for row, r in scan.others if r.get("kind") in ("run_started", "eval")]
    anchors = [(row, float(s)) for row, s in anchors if isinstance(s, (int, float)) and math.isfinite(s)]
    if not anchors:
        return total
    anchor_rows = np.array([row for row, _ in anchors], np.int64)
    anchor_at = np.array([s for _, s in anchors], np.float64) - total[anchor_rows]
    which = np.searchsorted(anchor_rows, np.arange(len(total)), side="right") - 1
    return total + np.where(which >= 0, anchor_at[np.maximum(which, 0)], 0.0)


def read_curves(run_dir: Path) -> RunCurves:
    """Every step's loss (with its tokens and training time) and every eval of the run in
    `run_dir`, read as read_history reads a run (the later record of a step wins, a resume drops
    the branch it abandoned, a line cut by a crash is skipped). RunHistoryError: one line."""
    scan = _scan(run_dir, replay=False)
    _, started = _started(scan, run_dir)
    tokens_per_step = int(started.get("tokens_per_step") or 0)
    clock = _train_clock(scan)
    rows = _kept_steps(scan)
    evals = _kept_others(scan, ("eval",), key=lambda r: r["step"])
    val_rows = np.array([row for row, _ in evals], np.int64)
    val_step = np.array([r["step"] for _, r in evals], np.int64)
    val_train_s = np.array([_float(r.get("train_time_s")) for _, r in evals], np.float64)
    missing = ~np.isfinite(val_train_s)
    val_train_s[missing] = clock[val_rows[missing]]
    return RunCurves(
        run_dir=run_dir,
        name=run_dir.resolve().name or str(run_dir),
        step=scan.step[rows],
        tokens=scan.columns["tokens"][rows].astype(np.float64),
        train_s=clock[rows],
        loss=scan.columns["loss"][rows],
        val_step=val_step,
        val_tokens=(val_step * tokens_per_step).astype(np.float64),
        val_train_s=val_train_s,
        val_loss=np.array([_float(r.get("val_loss")) for _, r in evals], np.float64),
        tokens_per_step=tokens_per_step,
        max_steps=int(started.get("max_steps") or 0),
        preset=str(started.get("preset") or ""),
    )


# -------------------------------------------------------------------- a finished run's replay

_HISTORY = ("eval", "lr_changed", "sample", "checkpoint", "alert")
_HISTORY_KEYS: dict[str, Callable[[dict[str, Any]], Any] | None] = {
    "eval": lambda r: r["step"],
    "lr_changed": lambda r: r["step"],
    "sample": lambda r: (r["step"], r.get("prompt", "")),
    "checkpoint": lambda r: (r["step"], r.get("path", "")),
    "alert": None,  # several a step, each its own: none replaces another
}


@dataclass(frozen=True)
class Replay:
    """What the app needs to draw every panel of a run that is over, oldest first: the newest
    RunStarted, then its history (steps thinned, evals, LR changes, samples, checkpoints,
    alerts), the newest memory breakdown, recent readings and the final StateChanged."""

    events: list[Event]
    final_state: str  # finished, stopped or failed (a run whose process vanished: failed)
    reason: str
    newest_time: float  # the newest record's time


def read_replay(run_dir: Path, max_steps: int = REPLAY_STEPS) -> Replay:
    """The events to draw the run in `run_dir` with, read as read_history reads a run. A run
    with no final state (its process vanished) ends failed, with the reason why; a run that an
    engine still holds is refused (attach to it instead). RunHistoryError: one line."""
    scan = _scan(run_dir, replay=True)
    _, started = _started(scan, run_dir)
    history = _replay_steps(scan, max_steps) + [
        item for kind in _HISTORY for item in _kept_others(scan, (kind,), _HISTORY_KEYS[kind])
    ]
    history.sort(key=lambda item: (item[1]["step"], item[1].get("time", 0.0), item[0]))
    present = _newest(scan, ("memory",), 1) + _newest(scan, ("telemetry",), REPLAY_READINGS)
    present += _newest(scan, ("ranks",), REPLAY_READINGS)
    final = _final_state(scan, run_dir)
    events = [_event(record) for _, record in [*history, *present]]
    events = [e for e in events if e is not None] + [final]
    newest = max([scan.newest_time, *(e.time for e in events)])
    first = Event.from_record({"config": _config(run_dir), **started})
    # The app draws what is older than the RunStarted as history (never announced): all of it.
    events.insert(0, dataclasses.replace(first, time=newest + 0.001))
    return Replay(events, final.state, final.reason, newest)


def _replay_steps(scan: _Scan, max_steps: int) -> list[tuple[int, dict[str, Any]]]:
    """The step records kept, thinned evenly to `max_steps` (the last one always kept), parsed."""
    rows = _kept_steps(scan)
    if not len(rows):
        return []
    keep = rows[:: max(1, math.ceil(len(rows) / max(1, max_steps)))].tolist()
    if keep[-1] != rows[-1]:
        keep.append(int(rows[-1]))
    parsed = []
    for row in keep:
        try:
            parsed.append((row, json.loads(scan.step_lines[row])))
        except ValueError:
            continue
    return parsed


def _newest(scan: _Scan, kinds: tuple[str, ...], count: int) -> list[tuple[int, dict[str, Any]]]:
    found = [(row, r) for row, r in scan.others if r.get("kind") in kinds]
    return found[-count:]


def _final_state(scan: _Scan, run_dir: Path) -> StateChanged:
    """The run's last state record when it is one a run ends in; else the run crashed (or is
    live: then RunHistoryError)."""
    states = [r for _, r in scan.others if r.get("kind") == "state"]
    if states and states[-1].get("state") in RunState.ENDED:
        event = _event(states[-1])
        if isinstance(event, StateChanged):
            return event
    try:
        check_not_in_use(run_dir)
    except ConfigError:
        raise RunHistoryError(f"{run_dir} is live: attach to it (cockpit attach {run_dir})") from None
    rows = _kept_steps(scan)
    step = int(scan.step[rows[-1]]) if len(rows) else 0  # the newest step recorded
    return StateChanged(
        state=RunState.FAILED,
        step=step,
        reason=(
            f"crashed: the run's process vanished without a final state at step {step} "
            "(killed, or out of memory?)"
        ),
        time=scan.newest_time,
    )


def _event(record: dict[str, Any]) -> Event | None:
    if record.get("kind") == "step":  # thousands of them: the direct way (null: NaN)
        try:
            return Step(**{k: math.nan if v is None else v for k, v in record.items() if k != "kind"})
        except TypeError:
            pass  # another layout: the general way says what it can
    try:
        return Event.from_record(record)
    except ValueError:
        return None  # a record from an older format


def _config(run_dir: Path) -> dict[str, Any]:
    """The run's resolved config (the metrics file leaves it to config.json); {} without one."""
    try:
        config = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}
