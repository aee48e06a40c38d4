"""A run's loss curves read back from its files, fast enough for a million steps: `read_curves`
gives every step's loss with its tokens and time, and every eval, as numpy arrays (`RunCurves`),
from one pass over metrics.jsonl's bytes. Torch-free and textual-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import ConfigError, open_regular_file
from engine.data.shape_schedule import recorded_changes, tokens_through
from engine.rundir.metrics_scan import (
    METRICS_NAME,
    Scan,
    kept_others,
    kept_steps,
    newest_run_started,
    scan_metrics,
)
from engine.rundir.records import parse_record
from engine.rundir.summary_facts import ROLLED_BACK


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
    tokenizer: str | None = None  # the run's (its newest run_started's); None: not recorded
    # bits per byte per nat of loss on each split (its tokens / its bytes / ln 2), from the
    # newest eval that recorded bits per byte; None for a run recorded before them
    train_bpb_per_loss: float | None = None
    val_bpb_per_loss: float | None = None


def run_tokenizer(run_dir: Path) -> str | None:
    """The tokenizer the run's first readable run_started record names, read up to that line
    only (a fork's first records are its parent's: the same corpus); None when none is."""
    try:
        with open_regular_file(run_dir / METRICS_NAME, "a metrics log") as f:
            for line in f:
                if line.startswith(b'{"kind":"run_started"'):
                    try:
                        tokenizer = parse_record(line).get("tokenizer")
                    except ValueError:
                        continue  # cut short by a crash, or damaged: the next one says it
                    return tokenizer if isinstance(tokenizer, str) else None
    except (OSError, ConfigError):  # missing, unreadable, or not a regular file
        pass
    return None


def bpb_per_loss(evals: list[tuple[int, dict[str, Any]]], split: str) -> float | None:
    """`split`'s bits per byte over its loss, from the newest eval record with both finite."""
    for _, record in reversed(evals):
        loss, bpb = record.get(f"{split}_loss"), record.get(f"{split}_bpb")
        if isinstance(loss, (int, float)) and isinstance(bpb, (int, float)):
            if math.isfinite(loss) and math.isfinite(bpb) and loss > 0 and bpb > 0:
                return float(bpb) / float(loss)
    return None


def _float(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) else math.nan


def _anchor_time(record: dict[str, Any]) -> Any:
    """The exact training time a record gives at its row: a run_started's (at its start, 0 when
    not recorded), an eval's, a rollback's (at the checkpoint it went back to); None for others."""
    kind = record.get("kind")
    if kind == "run_started":
        return record.get("train_time_s") or 0.0
    if kind == "eval" or (kind == "state" and record.get("reason") == ROLLED_BACK):
        return record.get("train_time_s")
    return None


def _train_clock(scan: Scan) -> np.ndarray:
    """Training time at every row: anchored at each run_started, eval and rollback (its
    train_time_s), plus the step_time_s of every step record since."""
    step_time = np.nan_to_num(scan.columns["step_time_s"], nan=0.0)
    step_time[~scan.is_step] = 0.0
    total = np.cumsum(step_time)
    anchors = [(row, _anchor_time(r)) for row, r in scan.others]
    anchors = [(row, float(s)) for row, s in anchors if isinstance(s, (int, float)) and math.isfinite(s)]
    if not anchors:
        return total
    anchor_rows = np.array([row for row, _ in anchors], np.int64)
    anchor_at = np.array([s for _, s in anchors], np.float64) - total[anchor_rows]
    which = np.searchsorted(anchor_rows, np.arange(len(total)), side="right") - 1
    return total + np.where(which >= 0, anchor_at[np.maximum(which, 0)], 0.0)


def _val_tokens(
    val_step: np.ndarray,
    tokens_per_step: int,
    schedule: Any,
    step: np.ndarray,
    tokens: np.ndarray,
) -> np.ndarray:
    """The tokens trained before each eval: the count of the last step record at or before it
    (what was trained, whatever schedule each session had: a resume may change it), plus the
    steps between at the newest session's sizes (a batch-size schedule's or sequence-length
    warmup's sum of the steps' sizes)."""
    changes = recorded_changes(schedule)

    def through(s: int) -> float:
        return float(tokens_through(changes, s) if changes else s * tokens_per_step)

    rows = np.searchsorted(step, val_step, side="right") - 1
    out = []
    for s, row in zip(val_step.tolist(), rows.tolist(), strict=True):
        known = row >= 0 and np.isfinite(tokens[row]) and tokens[row] > 0
        base = float(tokens[row]) - through(int(step[row])) if known else 0.0
        out.append(base + through(s))
    return np.array(out, np.float64)


def read_curves(run_dir: Path) -> RunCurves:
    """Every step's loss (with its tokens and training time) and every eval of the run in
    `run_dir`, read as read_history reads a run (the later record of a step wins, a resume drops
    the branch it abandoned, a line cut by a crash is skipped). RunHistoryError: one line."""
    scan = scan_metrics(run_dir, replay=False)
    _, started = newest_run_started(scan, run_dir)
    tokens_per_step = int(started.get("tokens_per_step") or 0)
    clock = _train_clock(scan)
    rows = kept_steps(scan)
    evals = kept_others(scan, ("eval",), key=lambda r: r["step"])
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
        val_tokens=_val_tokens(
            val_step,
            tokens_per_step,
            started.get("tokens_schedule"),
            scan.step[rows],
            scan.columns["tokens"][rows].astype(np.float64),
        ),
        val_train_s=val_train_s,
        val_loss=np.array([_float(r.get("val_loss")) for _, r in evals], np.float64),
        tokens_per_step=tokens_per_step,
        max_steps=int(started.get("max_steps") or 0),
        preset=str(started.get("preset") or ""),
        tokenizer=started["tokenizer"] if isinstance(started.get("tokenizer"), str) else None,
        train_bpb_per_loss=bpb_per_loss(evals, "train"),
        val_bpb_per_loss=bpb_per_loss(evals, "val"),
    )
