"""While you were away: what a run did between a time and now, from its records.

The digest a viewer gets when it attaches after a gap (`AWAY_MIN_S`, since the same user's last
detach, as the run's own `viewer` records say) and `cockpit runs RUN --since 8h` prints: steps and
tokens trained, evaluations (the best val and when), alerts and what was done (the journal's
entries: who paused, rolled back, stopped), checkpoints, settings changed and by whom.
Pure and torch-free: records in, a `Digest` out, and its lines shared by the CLI and the app.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.rundir.journal import JOURNAL_KINDS, Journal
from engine.rundir.records import parse_record

# A viewer's gap worth a digest: shorter, the person saw the run moments ago.
AWAY_MIN_S = 600.0
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_READ_KINDS = JOURNAL_KINDS | {"step", "eval"}
MAX_LISTED = 8  # alerts, actions or settings listed one a line; the rest counted


@dataclass(frozen=True)
class Noted:
    """One alert, action or change of the window: when, at which step, who, what."""

    time: float
    step: int
    who: str
    what: str
    detail: str = ""


@dataclass(frozen=True)
class Digest:
    since: float
    until: float  # the newest record's time (the run's clock)
    step_from: int  # the step when the window opened (0: before the run's first)
    step_to: int
    tokens_from: int
    tokens_to: int
    evals: int = 0
    best_val: float | None = None  # the lowest val loss evaluated in the window
    best_val_bpb: float | None = None
    best_val_step: int = 0
    best_val_time: float = 0.0
    alerts: list[Noted] = field(default_factory=list)  # warnings and errors
    actions: list[Noted] = field(default_factory=list)  # pauses, rollbacks, stops, ... by whom
    settings: list[Noted] = field(default_factory=list)  # set and LR changes, by whom
    checkpoints: list[Noted] = field(default_factory=list)  # who: the checkpoint's reason

    @property
    def steps(self) -> int:
        return max(0, self.step_to - self.step_from)

    @property
    def tokens(self) -> int:
        return max(0, self.tokens_to - self.tokens_from)

    @property
    def empty(self) -> bool:
        """Nothing happened in the window: no digest worth showing."""
        return not (
            self.steps
            or self.evals
            or self.alerts
            or self.actions
            or self.settings
            or self.checkpoints
        )

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["steps"], out["tokens"] = self.steps, self.tokens
        return out


def parse_duration(text: str) -> float:
    """Seconds of "30m", "8h", "2d", "90s"; ValueError with the one line that says how to write one."""
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(
            f"{text!r} is not a duration; write a number and a unit: 90s, 30m, 8h or 2d"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


def _user(who: Any) -> str:
    """The user of a viewer's "alice@gpu1 (pts/3)"."""
    return who.split("@", 1)[0] if isinstance(who, str) else ""


def last_detach(records: Iterable[Mapping[str, Any]], user: str) -> float | None:
    """When `user` last stopped watching the run (the time of its newest `viewer` detached
    record), or None when it never detached."""
    last = None
    for record in records:
        if (
            record.get("kind") == "viewer"
            and not record.get("attached")
            and _user(record.get("who")) == user
        ):
            last = float(record["time"])
    return last


_CHANGES = ("set ", "LR", "replayed set")
_VIEWING = ("attached", "detached")


def digest(records: Iterable[Mapping[str, Any]], since: float) -> Digest:
    """What the run did after `since` (Unix seconds), from its records oldest first."""
    journal = Journal()
    step_from = tokens_from = step_to = tokens_to = 0
    until = since
    evals, best = 0, None
    alerts: list[Noted] = []
    checkpoints: list[Noted] = []
    seen = 0  # the journal's entries made before the window
    for record in records:
        when = float(record.get("time", 0.0))
        kind = record.get("kind")
        if when <= since:
            if kind == "step":
                step_from = step_to = int(record["step"])
                tokens_from = tokens_to = int(record.get("tokens") or 0)
            journal.add(record)
            seen = len(journal.entries)
            continue
        until = max(until, when)
        journal.add(record)
        if kind == "step":
            step_to, tokens_to = int(record["step"]), int(record.get("tokens") or 0)
        elif kind == "eval":
            val = record.get("val_loss")
            if isinstance(val, (int, float)) and math.isfinite(val):
                evals += 1
                if best is None or val < best["val_loss"]:
                    best = record
        elif kind == "alert" and record.get("level") in ("warning", "error"):
            what = f"{record.get('level')} {record.get('code') or ''}".strip()
            alerts.append(
                Noted(
                    when,
                    int(record.get("step") or 0),
                    "engine",
                    what,
                    str(record.get("message", "")),
                )
            )
        elif kind == "checkpoint":
            name = Path(str(record.get("path", ""))).name
            checkpoints.append(
                Noted(when, int(record["step"]), str(record.get("reason", "")), name)
            )
    actions: list[Noted] = []
    settings: list[Noted] = []
    for entry in journal.entries[seen:]:
        if entry.time <= since or entry.what in _VIEWING:
            continue
        if entry.who == "engine" and entry.what.startswith(("warning", "error")):
            continue  # the alert itself, listed with the alerts
        noted = Noted(entry.time, entry.step, entry.who, entry.what, entry.detail)
        (settings if entry.what.startswith(_CHANGES) else actions).append(noted)
    return Digest(
        since=since, until=until, step_from=step_from, step_to=step_to,
        tokens_from=tokens_from, tokens_to=tokens_to, evals=evals,
        best_val=None if best is None else float(best["val_loss"]),
        best_val_bpb=None if best is None else best.get("val_bpb"),
        best_val_step=0 if best is None else int(best["step"]),
        best_val_time=0.0 if best is None else float(best["time"]),
        alerts=alerts, actions=actions, settings=settings, checkpoints=checkpoints,
    )  # fmt: skip


def file_records(metrics: Path) -> list[dict[str, Any]]:
    """A metrics file's whole records of the kinds a digest reads (a line cut short or damaged
    is read past; telemetry, samples and the like are skipped by their kind's prefix, unparsed)."""
    out = []
    with metrics.open("rb") as f:
        for line in f:
            if line.startswith(b'{"kind":"'):  # as MetricsWriter writes: the kind first, compact
                end = line.find(b'"', 9)
                if line[9:end].decode("ascii", "replace") not in _READ_KINDS:
                    continue
            try:
                out.append(parse_record(line))
            except ValueError:
                continue
    return out


def read_digest(metrics: Path, since: float) -> Digest:
    return digest(file_records(metrics), since)


def away_digest(
    metrics: Path, user: str, min_gap_s: float = AWAY_MIN_S, now: float | None = None
) -> Digest | None:
    """The digest for `user` attaching now: since its last detach, when that was at least
    `min_gap_s` ago and the run did something since; else None."""
    records = file_records(metrics)
    since = last_detach(records, user)
    now = time.time() if now is None else now
    if since is None or now - since < min_gap_s:
        return None
    found = digest(records, since)
    return None if found.empty else found


# ---------------------------------------------------------------------------------- its text
def ago(seconds: float) -> str:
    """2d 3h, 8h 5m, 12m, 40s."""
    s = int(max(0.0, seconds))
    d, h, m = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m}m"
    return f"{m}m" if m else f"{s}s"


def _tokens(n: int) -> str:
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def local_clock(t: float) -> str:
    """The local time as 06:12 today, Dec 04 06:12 another day."""
    here = time.localtime(t)
    same_day = time.localtime().tm_yday == here.tm_yday
    return time.strftime("%H:%M" if same_day else "%b %d %H:%M", here)


def _listed(
    title: str, items: list[Noted], clock: Callable[[float], str], who: bool = True
) -> list[str]:
    lines = [f"{title}: {len(items)}"]
    for n in items[-MAX_LISTED:]:
        by = f"{n.who}: " if who else ""
        detail = f" ({n.detail})" if n.detail else ""
        lines.append(f"  {clock(n.time)}  step {n.step:,}  {by}{n.what}{detail}")
    if len(items) > MAX_LISTED:
        lines.insert(
            1,
            f"  ({len(items) - MAX_LISTED} earlier not listed: the journal, j in the app, has them all)",
        )
    return lines


def digest_lines(
    d: Digest, now: float | None = None, clock: Callable[[float], str] = local_clock
) -> list[str]:
    """The digest as plain lines: the CLI prints them, the app's dialog shows them."""
    now = time.time() if now is None else now
    lines = [f"Since {clock(d.since)} ({ago(now - d.since)} ago):"]
    if d.steps:
        lines.append(
            f"trained {d.steps:,} steps (step {d.step_from:,} -> {d.step_to:,}), {_tokens(d.tokens)} tokens"
        )
    else:
        lines.append(f"no steps trained (at step {d.step_to:,})")
    if d.best_val is not None:
        bpb = f", {d.best_val_bpb:.3f} bpb" if isinstance(d.best_val_bpb, (int, float)) else ""
        lines.append(
            f"evaluations: {d.evals}; best val {d.best_val:.4f}{bpb} at step {d.best_val_step:,}, {clock(d.best_val_time)}"
        )
    else:
        lines.append("evaluations: none")
    lines += _listed("alerts", d.alerts, clock, who=False) if d.alerts else ["alerts: none"]
    if d.actions:
        lines += _listed("what was done", d.actions, clock)
    lines += (
        _listed("settings changed", d.settings, clock) if d.settings else ["settings changed: none"]
    )
    if d.checkpoints:
        last = d.checkpoints[-1]
        lines.append(
            f"checkpoints: {len(d.checkpoints)}, the last {last.what} at step {last.step:,} ({last.who})"
        )
    else:
        lines.append("checkpoints: none")
    return lines
