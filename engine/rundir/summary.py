"""RUN_DIR/summary.json: a run's facts (`RunSummary`) in a few kilobytes, so listing runs never
parses a whole metrics.jsonl. `SummarySink` writes it atomically every few seconds and after key
events; `read_summary` reads it and, when it is missing or behind, the rest of metrics.jsonl from
the offset it records. Torch-free: the CLI imports it.
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

from engine.config import open_regular_file, read_small_text
from engine.events import Event, RunState
from engine.files import atomic_write
from engine.rundir.branch import FORK_FILE
from engine.rundir.records import parse_record
from engine.rundir.summary_facts import RunSummary, from_json

SUMMARY_NAME = "summary.json"
METRICS_NAME = "metrics.jsonl"
KEY_KINDS = ("run_started", "eval", "checkpoint", "state", "settings_changed")  # written soon after these
READ_KINDS = (*KEY_KINDS, "ranks")  # the records a summary is made of, besides steps
CHUNK_BYTES = 8 << 20

# A record line starts with its kind (Event.to_record puts it first; the writer adds no spaces).
_KEY_LINE = re.compile(rb'\n\{"kind":"(?:' + b"|".join(k.encode() for k in READ_KINDS) + rb')"[^\n]*')
_STEP_LINE = b'\n{"kind":"step",'


# -------------------------------------------------------------------- reading metrics.jsonl


def fold_metrics(summary: RunSummary, metrics: Path) -> bool:
    """Fold in metrics.jsonl from `summary`'s offset to its last whole line. True when the
    offset moved. A line cut mid-write is left for the next read; a line that does not parse
    (the start of a resumed writer glued to a cut line) is skipped."""
    offset = summary.facts["offset"]
    with open_regular_file(metrics, "a metrics log") as f:
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
        record = parse_record(line)  # a damaged line (ValueError) changes nothing
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
        fork = json.loads(read_small_text(run_dir / FORK_FILE, "a fork record"))
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
        return from_json(json.loads(read_small_text(run_dir / SUMMARY_NAME, "a run summary")))
    except (OSError, ValueError, RecursionError):  # damaged (nested past json's depth): rebuilt
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
