"""The intervention journal: every pause, LR change, settings change, checkpoint, rollback, alert,
attach and detach of a run, one entry each, rebuilt from its records. A viewer's `command` record
and the engine's acknowledgement make one entry, credited to `viewer N WHO`, `app` or `engine`.
Pure and torch-free: records in, entries out.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.live import describe
from engine.rundir.records import parse_record

APP = "app"  # a user's command given in the run's own process (its cockpit, a signal)
ENGINE = "engine"  # what the run did by itself
# The kinds that can make or complete an entry; a metrics file's other lines are skipped unparsed.
JOURNAL_KINDS = frozenset(
    {
        "run_started", "state", "lr_changed", "settings_changed", "checkpoint", "alert",
        "viewer", "command",
    }  # fmt: skip
)
# A command and the record kinds that acknowledge it (the oldest waiting command of these names
# takes an acknowledgement).
ACKNOWLEDGED_BY = {
    "pause": "state",
    "resume": "state",
    "stop": "state",
    "checkpoint": "checkpoint",
    "set_lr": "lr_changed",
    "scale_lr": "lr_changed",
    "rollback": "lr_changed",
    "set": "settings_changed",
}
# An alert's code and the commands it refuses (a warning instead of the acknowledgement).
REFUSED_BY = {"lr": ("set_lr", "scale_lr"), "rollback": ("rollback",), "set": ("set",)}
ANOMALY_CODES = frozenset({"nan", "spike"})
MAX_WAITING = 64  # commands waiting for their acknowledgement (a run that ignores them: bounded)


@dataclass
class Entry:
    """One intervention or event of note. Mutable: an acknowledgement completes its command's."""

    step: int
    time: float  # Unix seconds, the run's clock
    who: str  # "viewer 2 alice@gpu1 (pts/3)", "app" or "engine"
    what: str  # "pause", "LR x0.5", "rollback", "attached", "alert nan", ...
    detail: str = ""  # "3.0e-3 -> 1.5e-3", the alert's message, ...
    command: str = ""  # the wire command it came from, while it awaits its acknowledgement

    @property
    def line(self) -> str:
        """who: what (detail), as one line."""
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.who}: {self.what}{detail}"


def fmt_lr(lr: Any) -> str:
    """3.0e-3: two significant digits, the exponent without its padding zero."""
    if not isinstance(lr, (int, float)):
        return "?"
    mantissa, exponent = f"{lr:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def viewer_name(number: Any, who: Any) -> str:
    name = f"viewer {number}"
    return f"{name} {who}" if isinstance(who, str) and who else name


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else "?"


def command_what(name: str, args: Mapping[str, Any]) -> str:
    """A command as the journal names it: "LR x0.5", "LR 3.0e-4", "stop", ..."""
    if name == "scale_lr":
        return f"LR x{_number(args.get('factor'))}"
    if name == "set_lr":
        return f"LR {fmt_lr(args.get('lr'))}"
    if name == "rollback":
        return f"rollback, LR x{_number(args.get('lr_factor', 0.5))}"
    if name == "checkpoint":
        return "checkpoint"
    if name == "stop":
        return "stop" if args.get("checkpoint", True) else "stop without a checkpoint"
    if name == "set":  # as asked, until the acknowledgement says what changed
        settings = args.get("settings")
        asked = settings.items() if isinstance(settings, Mapping) else ()
        return " ".join(["set", ", ".join(f"{key}={value}" for key, value in asked)]).strip()
    return name  # pause, resume, sample, evaluate


class Journal:
    """The entries of one run so far, oldest first; feed it records with `add`."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self._waiting: deque[Entry] = deque(maxlen=MAX_WAITING)  # commands not yet acknowledged
        self._step = 0  # the newest step a journal record named
        self._preset: str | None = None
        self._anomaly = False  # a NaN or spike the run has not paused for (yet)

    def extend(self, records: Iterable[Mapping[str, Any]]) -> Journal:
        for record in records:
            self.add(record)
        return self

    def add(self, record: Mapping[str, Any]) -> Entry | None:
        """Take one record; returns the entry it made or completed, else None."""
        kind = record.get("kind")
        if kind not in JOURNAL_KINDS:
            return None
        step = record.get("step", record.get("start_step"))
        if isinstance(step, int) and not isinstance(step, bool):
            self._step = step
        handler = getattr(self, f"_on_{kind}")
        return handler(record)

    # ------------------------------------------------------------------ helpers
    def _new(self, record: Mapping[str, Any], who: str, what: str, detail: str = "") -> Entry:
        time = record.get("time")
        entry = Entry(self._step, float(time) if isinstance(time, (int, float)) else 0.0, who,
                      what, detail)  # fmt: skip
        self.entries.append(entry)
        return entry

    def _take(self, matches: Callable[[Entry], bool]) -> Entry | None:
        """The oldest waiting command that `matches`, taken off the list: it waits no more
        (None when none waits)."""
        for entry in self._waiting:
            if matches(entry):
                self._waiting.remove(entry)
                entry.command = ""
                return entry
        return None

    def _acknowledge(self, kind: str, names: Iterable[str]) -> Entry | None:
        """The oldest waiting command of `names` (acknowledged by `kind`), taken off the list."""
        wanted = set(names)
        return self._take(lambda e: e.command in wanted and ACKNOWLEDGED_BY.get(e.command) == kind)

    # ------------------------------------------------------------------ records
    def _on_command(self, record: Mapping[str, Any]) -> Entry:
        name = str(record.get("name", "?"))
        args = record.get("args")
        args = args if isinstance(args, Mapping) else {}
        who = viewer_name(record.get("viewer"), record.get("who"))
        entry = self._new(record, who, command_what(name, args))
        if name in ACKNOWLEDGED_BY:
            entry.command = name
            self._waiting.append(entry)
        return entry

    def _on_viewer(self, record: Mapping[str, Any]) -> Entry:
        who = viewer_name(record.get("viewer"), record.get("who"))
        what = "attached" if record.get("attached") else "detached"
        detail = "read-only" if record.get("read_only") and record.get("attached") else ""
        return self._new(record, who, what, detail)

    def _on_lr_changed(self, record: Mapping[str, Any]) -> Entry:
        change = f"{fmt_lr(record.get('old_lr'))} -> {fmt_lr(record.get('new_lr'))}"
        if record.get("warmup_ends") is not None:  # the ramp's LR now, and where it goes
            change += f", {fmt_lr(record.get('after_warmup_lr'))} from step {record['warmup_ends']}"
        entry = self._acknowledge("lr_changed", ("set_lr", "scale_lr", "rollback"))
        if entry is not None:
            entry.detail = change
            if entry.what.startswith("rollback"):
                entry.command = "rollback"  # its alert still names the checkpoint
                self._waiting.appendleft(entry)
            return entry
        return self._new(record, APP, "LR", change)

    def _on_settings_changed(self, record: Mapping[str, Any]) -> Entry | None:
        changes = record.get("changes")
        pairs = {
            str(key): tuple(pair) if isinstance(pair, list) and len(pair) == 2 else ("?", pair)
            for key, pair in (changes.items() if isinstance(changes, Mapping) else ())
        }
        by = record.get("by")
        by = by if isinstance(by, str) and by else APP
        if record.get("replayed"):  # made at its step by the config.toml the run replays
            return self._new(record, ENGINE, f"replayed set {describe(pairs)}".strip())
        entry = self._acknowledge_set(by)
        if not pairs:  # every value was already in force: nothing to journal
            if entry is not None:
                self._remove(entry)
            return None
        what = f"set {describe(pairs)}"
        if entry is not None:
            entry.what = what
            # the step it was made at, as metrics.jsonl and config.toml say: a viewer's command
            # record is from the step before the boundary that carried it out
            step = record.get("step")
            entry.step = step if isinstance(step, int) else entry.step
            return entry
        return self._new(record, by, what)

    def _acknowledge_set(self, by: str) -> Entry | None:
        """The waiting `set` this acknowledgement answers: the oldest of the viewer that the
        record names (an app's own set answers no viewer's)."""
        return self._take(lambda e: e.command == "set" and e.who == by)

    def _on_alert(self, record: Mapping[str, Any]) -> Entry | None:
        level, code = record.get("level"), str(record.get("code") or "")
        message = str(record.get("message", ""))
        if code == "rollback" and level == "info":
            return self._rolled_back(record, message)
        if code in ("lr", "set") and level == "info":  # a change that changed nothing: no entry
            self._drop_waiting(REFUSED_BY[code])
            return None
        if level not in ("warning", "error"):
            return None
        if code in ANOMALY_CODES:
            self._anomaly = True
        refused = REFUSED_BY.get(code, ())
        waiting = self._take(lambda e: e.command in refused)
        if waiting is not None:  # refused: the command's entry says why
            waiting.detail = f"refused: {_why_refused(message)}"
            return waiting
        if code == "set":  # no viewer's set waits: the app's own (it asks in-process)
            return self._new(record, APP, "set", f"refused: {_why_refused(message)}")
        return self._new(record, ENGINE, f"{level} {code}".strip(), message)

    def _drop_waiting(self, names: Iterable[str]) -> None:
        """The oldest waiting command of `names` taken off the journal: it did nothing."""
        wanted = set(names)
        entry = self._take(lambda e: e.command in wanted)
        if entry is not None:
            self._remove(entry)

    def _remove(self, entry: Entry) -> None:
        for i in range(len(self.entries) - 1, -1, -1):  # by identity: entries compare by value
            if self.entries[i] is entry:
                del self.entries[i]
                return

    def _rolled_back(self, record: Mapping[str, Any], message: str) -> Entry:
        entry = self._take(lambda e: e.command == "rollback")
        if entry is not None:
            entry.detail = f"{message}; {entry.detail}" if entry.detail else message
            return entry
        # no viewer asked: the engine's own (an anomaly it did not pause for) or the app's
        last = self.entries[-1] if self.entries else None
        who = ENGINE if self._anomaly else APP
        self._anomaly = False
        if last is not None and last.who == APP and last.what == "LR" and last.step == self._step:
            last.who, last.what = who, "rollback"  # its LR change came just before: one entry
            last.detail = f"{message}; {last.detail}"
            return last
        return self._new(record, who, "rollback", message)

    def _on_state(self, record: Mapping[str, Any]) -> Entry | None:
        state, reason = record.get("state"), str(record.get("reason") or "")
        if state == "paused":
            self._anomaly = False  # it paused for it: a later rollback is someone's command
            if reason == "paused by user":
                return self._acknowledge("state", ("pause",)) or self._new(record, APP, "pause")
            return self._new(record, ENGINE, "paused", reason) if reason else None
        if state == "running" and reason == "resumed by user":
            return self._acknowledge("state", ("resume",)) or self._new(record, APP, "resume")
        if state == "stopped":
            entry = self._acknowledge("state", ("stop",))
            what = "preset switch" if reason == "switching preset" else "stop"
            if entry is not None:
                entry.detail = reason
                return entry
            return self._new(record, APP, what, reason)
        if state == "finished":
            return self._new(record, ENGINE, "finished", reason)
        if state == "failed":
            return self._new(record, ENGINE, "failed", reason)
        return None

    def _on_checkpoint(self, record: Mapping[str, Any]) -> Entry | None:
        if record.get("reason") != "manual":
            return None  # interval, best, stop, final: the run's own, not an intervention
        name = os.path.basename(str(record.get("path", "")))
        entry = self._acknowledge("checkpoint", ("checkpoint",))
        if entry is not None:
            entry.detail = name
            return entry
        return self._new(record, APP, "checkpoint", name)

    def _on_run_started(self, record: Mapping[str, Any]) -> Entry | None:
        preset, previous = record.get("preset"), self._preset
        self._preset = preset if isinstance(preset, str) else previous
        self._waiting.clear()  # a new process: what the old one never acknowledged never will be
        resumed = record.get("resumed_from")
        if resumed:
            what = "resume" if previous in (None, preset) else "preset switch"
            detail = f"from {os.path.basename(str(resumed))}"
            if previous not in (None, preset):
                detail = f"{previous} -> {preset}, {detail}"
            return self._new(record, APP, what, detail)
        if previous is not None and previous != preset:
            return self._new(record, APP, "preset switch", f"{previous} -> {preset}")
        return self._new(record, ENGINE, "started", f"preset {preset}")


def journal(records: Iterable[Mapping[str, Any]]) -> list[Entry]:
    """The entries of a run's records, oldest first."""
    return Journal().extend(records).entries


def journal_records(lines: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The records of `metrics.jsonl` lines that can matter to the journal: the others (steps,
    telemetry, samples: nearly all of a big file) are skipped by their kind's prefix, unparsed;
    lines cut short or not JSON are skipped."""
    for line in lines:
        if line.startswith(b'{"kind":"'):  # as MetricsWriter writes: the kind first, compact
            end = line.find(b'"', 9)
            if line[9:end].decode("ascii", "replace") not in JOURNAL_KINDS:
                continue
        try:
            record = parse_record(line)
        except ValueError:  # cut short by a crash, or damaged
            continue
        if record.get("kind") in JOURNAL_KINDS:
            yield record


def read_journal(metrics: Path) -> list[Entry]:
    """A run's journal from its metrics file, read as a stream (a big file is never held)."""
    with metrics.open("rb") as f:
        return journal(journal_records(f))


class JournalTail:
    """A metrics file followed as it grows: `poll()` reads the lines written since the last
    call (a line still being written waits for the next) into `journal`."""

    def __init__(self, metrics: Path) -> None:
        self.path = metrics
        self.journal = Journal()
        self._offset = 0

    @property
    def entries(self) -> list[Entry]:
        return self.journal.entries

    def poll(self) -> int:
        """Read what is new; returns how many whole lines were read (0 without a file)."""
        try:
            f = self.path.open("rb")
        except OSError:
            return 0
        lines = 0
        with f:
            if os.fstat(f.fileno()).st_size < self._offset:
                self.journal, self._offset = Journal(), 0  # a new file: start again
            f.seek(self._offset)
            whole: list[bytes] = []
            for line in f:
                if not line.endswith(b"\n"):
                    break  # being written: read it whole next time
                self._offset += len(line)
                whole.append(line)
                if len(whole) >= 4096:
                    self.journal.extend(journal_records(whole))
                    lines += len(whole)
                    whole = []
            self.journal.extend(journal_records(whole))
            lines += len(whole)
        return lines


def _why_refused(message: str) -> str:
    """A set's refusal without the "set refused: " (a rule) or "set: " (a value's check) that
    the entry's "refused: " already says."""
    for prefix in ("set refused: ", "set: "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message
