"""A run's result in a series, from its metrics.jsonl: the time to the target val loss, the
final val loss, the throughput, the peak memory and what was changed while it trained. The time
is the run's training wall time, linear between the evaluations either side of the target, as
the speedrun's bench measures it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Point = tuple[int, float, float]  # step, train time (s), val loss


@dataclass(frozen=True)
class RunResult:
    """What one run of the series measured (None: not measured, e.g. no evaluation yet)."""

    label: str
    run_dir: str
    status: str
    is_baseline: bool = False
    steps: int = 0
    train_time_s: float | None = None  # the whole run's
    final_val: float | None = None
    time_to_target_s: float | None = None  # None: no target, or not reached
    target_step: int | None = None  # the first evaluation at or below the target
    before_step: int | None = None  # the last one above it (None: the first reached it)
    tokens_per_s: float | None = None
    tokens: int = 0  # tokens trained on
    final_val_bpb: float | None = None  # the last evaluation's val bits per byte
    full_val: bool = False  # the last evaluation measured the whole val split
    peak_memory: int | None = None  # bytes: the largest total of its memory breakdowns
    end_reason: str = ""  # its final state's reason: why it finished, or how it failed
    # what was changed while it trained (the LR by hand, a live setting): not the change alone
    changed_live: tuple[str, ...] = ()


def live_changes(records: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """What a run's records say was changed while it trained, in words ("LR x1.56 at step
    1005", "optim.weight_decay at step 300"): a set_lr or scale_lr (the app's l, +, -, a
    rollback's halving) or a live setting (the app's settings screen, a cool-down); not the
    changes a config.toml replayed at their steps, which its own settings made."""
    records = list(records)
    rollbacks = {
        r.get("step") for r in records if r.get("kind") == "alert" and r.get("code") == "rollback"
    }
    said: list[str] = []
    for r in records:
        if r.get("kind") == "lr_changed":
            lr = f"LR x{float(r.get('scale', 1.0)):.3g}"
            if r.get("step") in rollbacks:
                said.append(f"rolled back to step {r.get('step')} ({lr})")
            else:
                said.append(f"{lr} at step {r.get('step')}")
        elif r.get("kind") == "settings_changed" and not r.get("replayed"):
            keys = ", ".join(sorted(r.get("changes") or {}))
            if keys:
                said.append(f"{keys} at step {r.get('step')}")
    return tuple(dict.fromkeys(said))  # a resume's records again: once


def eval_curve(records: Iterable[dict[str, Any]]) -> list[Point]:
    """The evaluations of a metrics file in step order; those a resume from an older
    checkpoint trained again replace the first ones."""
    curve: list[Point] = []
    for r in records:
        if r.get("kind") != "eval":
            continue
        step, t, val = int(r["step"]), float(r["train_time_s"]), float(r["val_loss"])
        curve = [p for p in curve if p[0] < step]
        curve.append((step, t, val))
    return curve


def time_to_target(curve: Sequence[Point], target: float) -> tuple[float, int] | None:
    """(train time at which the val loss reached `target`, the step of the first evaluation at
    or below it), linear in train time between that evaluation and the one before; None when
    never reached. The first evaluation reaching it counts from time 0 and loss +inf: its own."""
    prev: Point | None = None
    for step, t, val in curve:
        if val <= target:
            if prev is None or not math.isfinite(prev[2]) or prev[2] == val:
                return t, step
            t0, v0 = prev[1], prev[2]
            return t0 + (t - t0) * (v0 - target) / (v0 - val), step
        prev = (step, t, val)
    return None


def step_before(curve: Sequence[Point], target_step: int | None) -> int | None:
    """The step of the evaluation before the one at `target_step` (the time is linear between
    the two); None when that one is the first, or there is none."""
    steps = [p[0] for p in curve]
    if target_step is None or target_step not in steps or steps.index(target_step) == 0:
        return None
    return steps[steps.index(target_step) - 1]


def read_result(
    label: str, run_dir: Path, status: str, target: float | None, is_baseline: bool = False
) -> RunResult:
    """A run's result from its metrics.jsonl."""
    from engine.rundir import METRICS_NAME, read_records

    records = (
        list(read_records(run_dir / METRICS_NAME)) if (run_dir / METRICS_NAME).is_file() else []
    )
    curve = eval_curve(records)
    steps, tokens, train_time = 0, 0, None
    last_eval: dict[str, Any] | None = None
    end_reason = ""
    peak: int | None = None
    for r in records:
        if r.get("kind") == "eval":
            last_eval = r
        elif r.get("kind") == "memory":
            peak = max(peak or 0, memory_total(r))
        if r.get("kind") == "state":
            end_reason = str(r.get("reason") or "")
        if r.get("kind") == "step":
            steps, tokens = int(r["step"]), int(r.get("tokens", 0))
        elif r.get("kind") == "state" and r.get("train_time_s") is not None:
            steps, train_time = int(r["step"]), float(r["train_time_s"])
    if train_time is None and curve:  # no final state yet (cut short): the last evaluation's
        train_time = curve[-1][1]
    reached = time_to_target(curve, target) if target is not None else None
    return RunResult(
        label=label,
        run_dir=str(run_dir),
        status=status,
        is_baseline=is_baseline,
        steps=steps,
        train_time_s=train_time,
        final_val=curve[-1][2] if curve else None,
        time_to_target_s=reached[0] if reached else None,
        target_step=reached[1] if reached else None,
        before_step=step_before(curve, reached[1]) if reached else None,
        tokens_per_s=tokens / train_time if train_time and tokens else None,
        tokens=tokens,
        final_val_bpb=_finite(last_eval.get("val_bpb")) if last_eval else None,
        full_val=bool(last_eval.get("full_split")) if last_eval else False,
        peak_memory=peak,
        end_reason=end_reason,
        changed_live=live_changes(records),
    )


MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "cache", "other")


def memory_total(record: dict[str, Any]) -> int:
    """A memory record's total in bytes: what the process held on its device then."""
    return sum(int(record.get(part) or 0) for part in MEMORY_PARTS)


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def fmt_bytes(n: int | None) -> str:
    """A result's peak memory in words: '1.5 GiB', '-' when not measured."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
