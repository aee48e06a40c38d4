"""What a run's records add up to, as summary.json keeps it: `RunSummary` folds each record in
(a step is a few dict updates), says the derived facts (best val, bits per byte, training
time), and checks facts read back (`facts_problem`: a field not of the type written here makes
the summary one to rebuild). Pure: no file is read or written here.
"""

from __future__ import annotations

import math
from typing import Any

from engine.data.shape_schedule import recorded_changes, tokens_through
from engine.events import RunState

# 2: a rollback cuts the figures after its step (a summary of 1 may hold a discarded branch's)
VERSION = 2
# The reason of the state record a rollback writes once the run is back at its checkpoint's step
# (engine/train/fault_handler.py): the figures recorded after that step are no longer the run's.
ROLLED_BACK = "rolled back"


class RunSummary:
    """What a run's records add up to. `facts` is what summary.json holds; besides the facts
    shown, it keeps what folding in later records needs: the best val losses in step order (a
    resume from an older checkpoint, or a rollback to one, drops those after it) and the last
    exact training time."""

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
            if record.get("reason") == ROLLED_BACK and step is not None:
                # back at its checkpoint of `step`: what the run trained since is discarded
                self._cut_after(step)
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
            changes = recorded_changes(record.get("tokens_schedule"))  # steps that grow
            f["tokens"] = (
                tokens_through(changes, start)
                if changes
                else start * (_count(record.get("tokens_per_step")) or 0)
            )
        self._cut_after(start)
        saved = f["last_checkpoint"]
        if saved is not None and saved["step"] > start:
            resumed = record.get("resumed_from")
            f["last_checkpoint"] = {"path": resumed, "step": start} if isinstance(resumed, str) else None
        f["train_time_anchor"] = [_number(record.get("train_time_s")) or 0.0, start]

    def _cut_after(self, start: int) -> None:
        """The run goes on from `start` (a resume, a rollback): the figures of the branch it
        abandoned, recorded after `start`, are no longer the run's. Its tokens are the next
        step record's (a rollback's record does not carry them; the step follows at once)."""
        f = self.facts
        f["step"] = start
        f["best_vals"] = [b for b in f["best_vals"] if b[0] <= start]
        f["best_val_bpbs"] = [b for b in f["best_val_bpbs"] or [] if b[0] <= start]
        for last in ("last_val", "last_val_bpb"):
            if f[last] is not None and f[last]["step"] > start:
                f[last] = None

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
