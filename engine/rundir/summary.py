"""RUN_DIR/summary.json: a run's facts in a few kilobytes, so listing runs never parses a
whole metrics.jsonl (`cockpit runs`).

`SummarySink` keeps the file up to date while the run goes: a step is a dict update, and the file
is written (atomically) only when due: every few seconds, and soon after a key event (the run's
start, an eval, a checkpoint, a state change). `read_summary` is the reader: when the file is
missing, or behind the end of metrics.jsonl (a crash killed the writer, or the run is live), it
reads metrics.jsonl from the offset the summary records (from the start when there is none),
line by line, and stops before a last line cut mid-write. Torch-free: the CLI imports it.

Reading skips what a summary does not need: only the lines of the kinds below are parsed, and of
the step records only the newest before each of those (a run is mostly step records).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.events import Event, RunState
from engine.files import atomic_write
from engine.rundir.branch import FORK_FILE

SUMMARY_NAME = "summary.json"
METRICS_NAME = "metrics.jsonl"
VERSION = 1
KEY_KINDS = ("run_started", "eval", "checkpoint", "state", "settings_changed")  # written soon after these
READ_KINDS = (*KEY_KINDS, "ranks")  # the records a summary is made of, besides steps
CHUNK_BYTES = 8 << 20

# A record line starts with its kind (Event.to_record puts it first; the writer adds no spaces).
_KEY_LINE = re.compile(rb'\n\{"kind":"(?:' + b"|".join(k.encode() for k in READ_KINDS) + rb')"[^\n]*')
_STEP_LINE = b'\n{"kind":"step",'


class RunSummary:
    """What a run's records add up to. `facts` is what summary.json holds; besides the facts
    shown, it keeps what folding in later records needs: the best val losses in step order (a
    resume from an older checkpoint drops those after it) and the last exact training time."""

    def __init__(self, facts: dict[str, Any] | None = None) -> None:
        self.facts: dict[str, Any] = facts if facts is not None else empty_facts()

    # ---------------------------------------------------------------- folding records in

    def observe_step(self, step: int, tokens: int, step_time_s: float | None, when: float) -> None:
        """One step record: the training thread's whole cost per step (a few dict updates)."""
        f = self.facts
        # the newest step, not the highest: a rollback trains again from an earlier one
        f["step"], f["tokens"] = step, tokens
        if step_time_s is not None and math.isfinite(step_time_s):
            f["step_time_s"] = step_time_s
        f["updated"] = max(f["updated"] or when, when)

    def observe(self, record: dict[str, Any]) -> None:
        """Any other record (from metrics.jsonl, or an event's to_record()). A field of the
        wrong type (not what the engine writes) is not taken: the facts keep their types."""
        kind = record.get("kind")
        f = self.facts
        when = _number(record.get("time"))
        if when is not None:
            f["updated"] = max(f["updated"] or when, when)
            if f["started"] is None:
                f["started"] = when
        step = _count(record.get("step"))
        if kind == "step":
            tokens = _count(record.get("tokens"))
            if step is not None and tokens is not None:
                self.observe_step(step, tokens, _number(record.get("step_time_s")), f["updated"])
        elif kind == "run_started":
            self._run_started(record)
        elif kind == "eval" and step is not None:
            self._eval(record, step)
        elif kind == "checkpoint" and record.get("reason") != "best" and step is not None:
            path = record.get("path")
            f["last_checkpoint"] = {"path": path if isinstance(path, str) else None, "step": step}
        elif kind == "state" and isinstance(record.get("state"), str):
            f["last_state"] = record["state"]
            train_s = _number(record.get("train_time_s"))
            if record["state"] != RunState.STARTING and step is not None and train_s is not None:
                # exact where it paused, saved or ended (not while starting: nothing restored yet)
                f["step"] = step
                f["train_time_anchor"] = [train_s, step]
        elif kind == "ranks" and isinstance(record.get("ranks"), list):
            f["world_size"] = max(1, len(record["ranks"]))
        elif kind == "settings_changed" and _count(record.get("max_steps")):
            f["max_steps"] = _count(record.get("max_steps"))  # a `set` lengthened or shortened it

    def _run_started(self, record: dict[str, Any]) -> None:
        f = self.facts
        f["world_size"] = 1  # this session's: its ranks records (torchrun) say more
        start = _count(record.get("start_step")) or 0
        preset = record.get("preset")
        f["preset"] = preset if isinstance(preset, str) else None
        f["max_steps"] = _count(record.get("max_steps"))
        # A resume at step S abandons whatever was recorded after S (an older checkpoint's branch).
        if f["step"] > start:
            f["tokens"] = start * (_count(record.get("tokens_per_step")) or 0)
        f["step"] = start
        f["best_vals"] = [b for b in f["best_vals"] if b[0] <= start]
        f["best_val_bpbs"] = [b for b in f["best_val_bpbs"] or [] if b[0] <= start]
        for last in ("last_val", "last_val_bpb"):
            if f[last] is not None and f[last]["step"] > start:
                f[last] = None
        saved = f["last_checkpoint"]
        if saved is not None and saved["step"] > start:
            resumed = record.get("resumed_from")
            f["last_checkpoint"] = {"path": resumed, "step": start} if isinstance(resumed, str) else None
        f["train_time_anchor"] = [_number(record.get("train_time_s")) or 0.0, start]

    def _eval(self, record: dict[str, Any], step: int) -> None:
        f = self.facts
        val, train_s = _number(record.get("val_loss")), _number(record.get("train_time_s"))
        if train_s is not None:
            f["train_time_anchor"] = [train_s, step]
        bpb = _number(record.get("val_bpb"))  # absent in records written before it
        if bpb is not None:
            f["last_val_bpb"] = {"value": bpb, "step": step}
            best_bpbs = f["best_val_bpbs"] = f["best_val_bpbs"] or []
            if not best_bpbs or bpb < best_bpbs[-1][1]:
                best_bpbs.append([step, bpb])
        if val is None:
            return  # a NaN val loss (null) is no one's best
        f["last_val"] = {"value": val, "step": step}
        if not f["best_vals"] or val < f["best_vals"][-1][1]:
            f["best_vals"].append([step, val])

    # ---------------------------------------------------------------- what it says

    @property
    def best_val(self) -> dict[str, Any] | None:
        best = self.facts["best_vals"]
        return {"value": best[-1][1], "step": best[-1][0]} if best else None

    @property
    def best_val_bpb(self) -> dict[str, Any] | None:
        """The lowest val loss in bits per byte and its step (None: no eval recorded one)."""
        best = self.facts["best_val_bpbs"]
        return {"value": best[-1][1], "step": best[-1][0]} if best else None

    @property
    def train_time_s(self) -> float:
        """Training time (the engine's: its training steps' wall time, pauses, evaluations and
        checkpoints excluded, summed across resumes): exact at the newest state record (a run
        that paused or ended), eval or start, then the newest step time times the steps since
        (only a killed run's last stretch is an estimate)."""
        f = self.facts
        anchor_s, anchor_step = f["train_time_anchor"]
        return anchor_s + max(0, f["step"] - anchor_step) * (f["step_time_s"] or 0.0)

    def to_json(self) -> dict[str, Any]:
        """summary.json's content: the facts, with the derived ones spelled out for readers."""
        return {
            **self.facts,
            "best_val": self.best_val,
            "best_val_bpb": self.best_val_bpb,
            "train_time_s": self.train_time_s,
        }


def _number(value: Any) -> float | None:
    """A finite number of a record (JSON's 1e999 is inf; true is not a number), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _count(value: Any) -> int | None:
    """A whole number >= 0 of a record (a step, tokens), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def facts_problem(facts: dict[str, Any]) -> str | None:
    """What makes summary facts unusable (a field not of the type this module writes: a
    summary.json edited or damaged), in a few words; None when they are sound."""

    def number_or_none(v: Any) -> bool:
        return v is None or _number(v) is not None

    def pair(v: Any) -> bool:  # {"value": loss, "step": step}
        return isinstance(v, dict) and _number(v.get("value")) is not None and _count(v.get("step")) is not None

    checks = {
        "preset": lambda v: v is None or isinstance(v, str),
        "started": number_or_none,
        "updated": number_or_none,
        "last_state": lambda v: v is None or isinstance(v, str),
        "step": lambda v: _count(v) is not None,
        "max_steps": lambda v: v is None or _count(v) is not None,
        "tokens": lambda v: _count(v) is not None,
        "best_vals": lambda v: isinstance(v, list) and all(
            isinstance(b, list) and len(b) == 2 and _count(b[0]) is not None
            and _number(b[1]) is not None for b in v),  # fmt: skip
        "last_val": lambda v: v is None or pair(v),
        # None in a summary.json written before bits per byte were recorded
        "best_val_bpbs": lambda v: v is None or (isinstance(v, list) and all(
            isinstance(b, list) and len(b) == 2 and _count(b[0]) is not None
            and _number(b[1]) is not None for b in v)),
        "last_val_bpb": lambda v: v is None or pair(v),
        "step_time_s": lambda v: v is None or (_number(v) is not None and v >= 0),
        "train_time_anchor": lambda v: isinstance(v, list) and len(v) == 2
        and _number(v[0]) is not None and _count(v[1]) is not None,
        "last_checkpoint": lambda v: v is None or (isinstance(v, dict) and _count(v.get("step")) is not None
                                                   and (v.get("path") is None or isinstance(v["path"], str))),
        "parent": lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("run"), str)
                                          and _count(v.get("step")) is not None),
        "world_size": lambda v: _count(v) is not None and v >= 1,
        "offset": lambda v: _count(v) is not None,
    }  # fmt: skip
    for name, sound in checks.items():
        if name not in facts:
            return f"no {name}"
        if not sound(facts[name]):
            shown = repr(facts[name])
            return f"{name} is {shown if len(shown) <= 24 else shown[:21] + '...'}"
    return None


def empty_facts() -> dict[str, Any]:
    return {
        "version": VERSION,
        "preset": None,
        "started": None,  # the first record's time (Unix seconds)
        "updated": None,  # the newest record's time
        "last_state": None,  # the newest state record's state
        "step": 0,
        "max_steps": None,
        "tokens": 0,
        "best_vals": [],  # [step, val loss] each better than every one before it
        "last_val": None,  # {"value", "step"}
        "best_val_bpbs": [],  # [step, val bits per byte] each lower than every one before it
        "last_val_bpb": None,  # {"value", "step"}
        "step_time_s": None,
        "train_time_anchor": [0.0, 0],  # [train_time_s, at step]
        "last_checkpoint": None,  # {"path", "step"}
        "parent": None,  # the run this one was forked from (none yet)
        "world_size": 1,
        "offset": 0,  # bytes of metrics.jsonl folded in: whole lines only
    }


def from_json(data: Any) -> RunSummary | None:
    """A summary read back from summary.json; None for one this version cannot use (another
    version, or a field of the wrong type: the summary is rebuilt from metrics.jsonl, the
    record it is made from, so nothing is lost)."""
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return None
    facts = {k: data.get(k) for k in empty_facts()}
    if facts_problem(facts) is not None:
        return None
    return RunSummary(facts)


# -------------------------------------------------------------------- reading metrics.jsonl


def fold_metrics(summary: RunSummary, metrics: Path) -> bool:
    """Fold in metrics.jsonl from `summary`'s offset to its last whole line. True when the
    offset moved. A line cut mid-write is left for the next read; a line that does not parse
    (the start of a resumed writer glued to a cut line) is skipped."""
    offset = summary.facts["offset"]
    with metrics.open("rb") as f:
        f.seek(offset)
        for block in _whole_lines(f):
            _fold_block(summary, block)
            offset += len(block)
    moved = offset != summary.facts["offset"]
    summary.facts["offset"] = offset
    return moved


def _whole_lines(f: Any) -> Iterator[bytes]:
    """Blocks of whole lines (each ends with a newline); an unfinished last line is not given."""
    rest = b""
    while chunk := f.read(CHUNK_BYTES):
        data = rest + chunk
        end = data.rfind(b"\n") + 1
        rest = data[end:]
        if end:
            yield data[:end]


def _fold_block(summary: RunSummary, block: bytes) -> None:
    text = b"\n" + block  # every line, the first too, now starts after a newline
    done = 0
    for match in _KEY_LINE.finditer(text):
        _fold_last_step(summary, text, done, match.start())
        _fold_line(summary, match.group()[1:])
        done = match.end()
    _fold_last_step(summary, text, done, len(text))


def _fold_last_step(summary: RunSummary, text: bytes, start: int, end: int) -> None:
    """The newest step record in text[start:end]: the earlier ones change nothing it keeps."""
    at = text.rfind(_STEP_LINE, start, end)
    if at >= 0:
        _fold_line(summary, text[at + 1 : text.find(b"\n", at + 1)])


def _fold_line(summary: RunSummary, line: bytes) -> None:
    try:
        record = json.loads(line)
        summary.observe(record)
    except (ValueError, KeyError, TypeError, IndexError):
        pass  # a line cut by a crash and glued to the next writer's first line, or not a record


def read_summary(run_dir: Path, write_back: bool = True) -> RunSummary:
    """The run's summary: summary.json brought up to the end of metrics.jsonl (rebuilt from the
    start when missing or unusable), and written back when that moved it and `write_back`."""
    metrics = run_dir / METRICS_NAME
    summary = load_summary_file(run_dir)
    try:
        size = metrics.stat().st_size
    except FileNotFoundError:
        return summary or RunSummary()
    if summary is None or summary.facts["offset"] > size:  # none, or a metrics file replaced
        summary = RunSummary()
    parent = fork_parent(run_dir)
    moved = summary.facts["offset"] < size and fold_metrics(summary, metrics)
    if parent != summary.facts["parent"]:
        summary.facts["parent"] = parent
        moved = True
    if parent is not None and parent.get("time") and summary.facts["started"] != parent["time"]:
        # its first records are the parent's (copied so the curves continue): it began here
        summary.facts["started"] = parent["time"]
        moved = True
    if moved and write_back:
        try:
            write_summary(run_dir, summary)
        except OSError:
            pass  # a directory we may read but not write: the next read folds in again
    return summary


def fork_parent(run_dir: Path) -> dict[str, Any] | None:
    """{"run": the parent's directory, "step": where it branched} of a `cockpit fork` branch
    (its fork.json), or None; also for a fork.json not of `cockpit fork`'s shape (damaged or
    edited: it names no parent, and the run lists as itself)."""
    try:
        fork = json.loads((run_dir / FORK_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(fork, dict):
        return None
    parent, step, made = fork.get("parent"), fork.get("step"), fork.get("time")
    if not isinstance(parent, str) or type(step) is not int or step < 0:
        return None
    # JSON numbers may be any size: a time is a finite float or nothing
    when = made if type(made) is float and math.isfinite(made) else None
    if type(made) is int and abs(made) < 2**53:
        when = float(made)
    return {"run": parent, "step": step, "time": when}


def load_summary_file(run_dir: Path) -> RunSummary | None:
    try:
        return from_json(json.loads((run_dir / SUMMARY_NAME).read_bytes()))
    except (OSError, ValueError):
        return None


STALE_TEMP_S = 600.0  # a summary's write takes milliseconds: an older temporary is a kill's


def write_summary(run_dir: Path, summary: RunSummary) -> None:
    text = json.dumps(summary.to_json(), separators=(",", ":")).encode() + b"\n"
    atomic_write(run_dir / SUMMARY_NAME, lambda f: f.write(text))
    clear_stale_temps(run_dir)


def clear_stale_temps(run_dir: Path) -> None:
    """Remove the `.summary.json.XXXX.tmp` files (atomic_write's temporaries) that writers
    killed mid-write left, once they are STALE_TEMP_S old: a writer at work now keeps its own."""
    now = time.time()
    for temp in run_dir.glob(f".{SUMMARY_NAME}.*.tmp"):
        try:
            st = temp.lstat()
            if stat.S_ISREG(st.st_mode) and now - st.st_mtime > STALE_TEMP_S:
                temp.unlink()
        except OSError:
            continue  # gone already, or not ours to remove


# -------------------------------------------------------------------- the sink


class SummarySink:
    """Keeps RUN_DIR/summary.json up to date while the run goes (rank 0's sink).

    Starts from what the directory already holds (a resumed run, and the lines written before
    the sink existed). Writes every INTERVAL_S when something changed, MIN_GAP_S after a key
    event (so a run that evaluates every few steps does not write at that pace), at once for the
    run's start and its final state, and on close."""

    INTERVAL_S = 5.0
    MIN_GAP_S = 1.0

    def __init__(self, run_dir: Path, world_size: int = 1) -> None:
        self.run_dir = run_dir
        self.metrics = run_dir / METRICS_NAME
        self.summary = read_summary(run_dir, write_back=False)
        self.world_size = world_size  # this session's, whatever the earlier ones had
        self.summary.facts["world_size"] = world_size
        self._lock = threading.Lock()  # emit() is called from more than one thread
        self._changed = False
        self._key_change = False
        self._last_write = -math.inf
        self._closed = False
        self.failed: str | None = None  # the first write that failed (the run goes on)

    def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind == "step":
            with self._lock:
                self.summary.observe_step(
                    event.step, event.tokens, event.step_time_s, event.time  # type: ignore[attr-defined]
                )
                self._changed = True
                if time.monotonic() - self._last_write >= self.INTERVAL_S or self._key_change:
                    self._write_if_due()
            return
        if kind not in READ_KINDS:
            return
        record = event.to_record()
        with self._lock:
            self.summary.observe(record)
            if kind == "run_started":  # it resets the world size: this session's is known
                self.summary.facts["world_size"] = max(self.world_size, self.summary.facts["world_size"])
            self._changed = self._key_change = True
            now_please = kind == "run_started" or (
                kind == "state" and record["state"] in RunState.ENDED
            )
            self._write_if_due(force=now_please)

    def _write_if_due(self, force: bool = False) -> None:
        since = time.monotonic() - self._last_write
        due = since >= self.INTERVAL_S or (self._key_change and since >= self.MIN_GAP_S)
        if self._closed or not self._changed or not (force or due):
            return
        try:
            # What is on disk now: no more than what was folded in (the writer may still hold
            # some lines); a reader folds in from here, and folding a record twice is harmless.
            self.summary.facts["offset"] = self.metrics.stat().st_size
            write_summary(self.run_dir, self.summary)
        except OSError as e:
            self.failed = self.failed or f"{type(e).__name__}: {e}"
        self._last_write = time.monotonic()
        self._changed = self._key_change = False

    def close(self) -> None:
        with self._lock:
            self._write_if_due(force=True)
            self._closed = True


def size_on_disk(run_dir: Path) -> int:
    """Bytes the run's files take (a hard link, like best.pt beside its checkpoint, once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    stack = [str(run_dir)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size
    return total
