"""The results of a series: per run the time to the target val loss, the final val loss and the
throughput, from its metrics.jsonl, and the table of differences from the baseline, with the
baseline's spread over its repeats as the noise. The time is the run's training wall time,
linear between the evaluations either side of the target, as the speedrun's bench measures it.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cockpit.ablation.series_record import RESULT_STATES
from engine.events import RunState

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
    rollbacks = {r.get("step") for r in records if r.get("kind") == "alert" and r.get("code") == "rollback"}
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


def read_result(label: str, run_dir: Path, status: str, target: float | None, is_baseline: bool = False) -> RunResult:
    """A run's result from its metrics.jsonl."""
    from engine.rundir import METRICS_NAME, read_records

    records = list(read_records(run_dir / METRICS_NAME)) if (run_dir / METRICS_NAME).is_file() else []
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


@dataclass(frozen=True)
class Spread:
    """The baseline's values over its repeats: the noise a difference is judged against."""

    low: float
    high: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        if len(values) < 2:
            return None
        return cls(min(values), max(values), statistics.stdev(values), len(values))

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high


@dataclass(frozen=True)
class Difference:
    """A value against the baseline's mean: absolute, in % of it, and whether the baseline's
    own repeats span it (None: no spread measured, or not a change)."""

    value: float
    percent: float | None
    in_noise: bool | None


@dataclass(frozen=True)
class Row:
    result: RunResult
    time_s: float | None  # what is compared: the time to the target, or the whole run's
    d_time: Difference | None
    d_val: Difference | None


@dataclass(frozen=True)
class AblationTable:
    title: str
    target: float | None
    rows: tuple[Row, ...]
    base_time: float | None  # the baseline's mean over its repeats
    base_val: float | None
    time_spread: Spread | None
    val_spread: Spread | None
    budget: float | None = None  # seconds of training every run had: val is in bits per byte


def compared_time(result: RunResult, target: float | None) -> float | None:
    return result.time_to_target_s if target is not None else result.train_time_s


def difference(value: float | None, base: float | None, spread: Spread | None, is_change: bool) -> Difference | None:
    if value is None or base is None:
        return None
    d = value - base
    percent = 100.0 * d / base if base else None
    in_noise = spread.holds(value) if (spread is not None and is_change) else None
    return Difference(d, percent, in_noise)


def compared_val(result: RunResult, budget: float | None) -> float | None:
    """The val figure compared: bits per byte with a budget (runs of other tokenizers compare),
    else the val loss."""
    return result.final_val_bpb if budget is not None else result.final_val


def build_table(
    results: Sequence[RunResult], target: float | None, title: str = "", budget: float | None = None
) -> AblationTable:
    """Every run against the baseline's mean (time and val; val bits per byte with a budget);
    the baseline's repeats give the spread a change's value is inside of (noise) or not."""
    base = [r for r in results if r.is_baseline]
    times = [t for r in base if (t := compared_time(r, target)) is not None]
    vals = [v for r in base if (v := compared_val(r, budget)) is not None]
    base_time = statistics.fmean(times) if times else None
    base_val = statistics.fmean(vals) if vals else None
    time_spread, val_spread = Spread.of(times), Spread.of(vals)
    rows = []
    for r in results:
        t = compared_time(r, target)
        rows.append(
            Row(
                result=r,
                time_s=t,
                d_time=difference(t, base_time, time_spread, not r.is_baseline),
                d_val=difference(compared_val(r, budget), base_val, val_spread, not r.is_baseline),
            )
        )
    return AblationTable(title, target, tuple(rows), base_time, base_val, time_spread, val_spread, budget)


# -------------------------------------------------------------------------------- writing it

CSV_COLUMNS = (
    "run", "run_dir", "status", "baseline", "steps", "time_s", "time_to_target_s", "target_step",
    "before_step", "train_time_s", "final_val", "tokens_per_s", "d_time_s", "d_time_pct", "time_in_noise",
    "d_val", "d_val_pct", "val_in_noise", "changed_live", "final_val_bpb", "tokens", "peak_memory_bytes",
)  # fmt: skip


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def to_csv(table: AblationTable) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in table.rows:
        r, dt, dv = row.result, row.d_time, row.d_val
        writer.writerow(
            _cell(v)
            for v in (
                r.label, r.run_dir, r.status, r.is_baseline, r.steps, row.time_s, r.time_to_target_s,
                r.target_step, r.before_step, r.train_time_s, r.final_val, r.tokens_per_s,
                dt.value if dt else None, dt.percent if dt else None, dt.in_noise if dt else None,
                dv.value if dv else None, dv.percent if dv else None, dv.in_noise if dv else None,
                "; ".join(r.changed_live) or None, r.final_val_bpb, r.tokens, r.peak_memory,
            )  # fmt: skip
        )
    return out.getvalue()


def fmt_seconds(t: float, sign: str = "") -> str:
    digits = 3 if abs(t) < 1 else 2 if abs(t) < 10 else 1
    return f"{t:{sign}.{digits}f} s"


def fmt_difference(d: Difference | None, unit: str) -> str:
    if d is None:
        return ""
    value = fmt_seconds(d.value, "+") if unit == "s" else f"{d.value:+.4f}"
    pct = f" ({d.percent:+.{1 if unit == 's' else 2}f}%)" if d.percent is not None else ""
    return value + pct + (" ~" if d.in_noise else "")


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def budget_rows(table: AblationTable) -> list[list[str]]:
    """The table of a budget series: what the same training time bought each run."""
    head = ["run", "val bpb", "Δ bpb", "tokens", "tokens/s", "peak memory", "train time", "steps", "status"]
    rows = [head]
    single = len([x for x in table.rows if x.result.is_baseline]) == 1
    for row in table.rows:
        r = row.result
        bpb = f"{r.final_val_bpb:.4f}" if r.final_val_bpb is not None else "-"
        rows.append(
            [
                r.label.replace("|", "\\|"),
                bpb + ("" if r.full_val or r.final_val_bpb is None else " †"),
                "" if r.is_baseline and single else fmt_difference(row.d_val, "val"),
                f"{r.tokens:,}",
                f"{r.tokens_per_s:,.0f}" if r.tokens_per_s is not None else "-",
                fmt_bytes(r.peak_memory),
                fmt_seconds(r.train_time_s) if r.train_time_s is not None else "-",
                str(r.steps),
                r.status + (" *" if r.changed_live else ""),
            ]
        )
    return rows


def budget_notes(table: AblationTable) -> list[str]:
    """The lines under a budget series' table: what was measured, and how."""
    assert table.budget is not None
    lines = [
        f"Every run trained for {fmt_seconds(table.budget)} of training time (the steps alone: start-up, data "
        "preparation, evaluations and saves not counted), then was evaluated on the whole val split; val bpb is its "
        "val loss in bits per byte of text, comparable across tokenizers. Peak memory: the largest total of the "
        "run's memory breakdowns (taken at its first step and every 20 s)."
    ]
    short = [
        r.result.label
        for r in table.rows
        if r.result.status == RunState.FINISHED
        and r.result.train_time_s is not None
        and r.result.train_time_s < table.budget
    ]
    if short:
        lines.append(
            f"Ended at its train.max_steps before the budget ({', '.join(short)}): --steps N raises the cap."
        )
    if any(r.result.final_val_bpb is not None and not r.result.full_val for r in table.rows):
        lines.append("† evaluated on part of the val split (a bound cut it short): see the run's alerts.")
    return lines


def markdown_rows(table: AblationTable) -> list[list[str]]:
    if table.budget is not None:
        return budget_rows(table)
    what = f"time to val {table.target:g}" if table.target is not None else "train time"
    head = ["run", what, "Δ time", "final val", "Δ val", "tokens/s", "steps", "status"]
    rows = [head]
    # one baseline run is the reference itself: no difference to show on its row
    single = len([x for x in table.rows if x.result.is_baseline]) == 1
    for row in table.rows:
        r = row.result
        if row.time_s is not None:
            time = fmt_seconds(row.time_s)
        else:
            time = "not reached" if table.target is not None and r.status in RESULT_STATES else "-"
        rows.append(
            [
                r.label.replace("|", "\\|"),
                time,
                "" if r.is_baseline and single else fmt_difference(row.d_time, "s"),
                f"{r.final_val:.4f}" if r.final_val is not None else "-",
                "" if r.is_baseline and single else fmt_difference(row.d_val, "val"),
                f"{r.tokens_per_s:,.0f}" if r.tokens_per_s is not None else "-",
                str(r.steps),
                r.status + (" *" if r.changed_live else ""),
            ]
        )
    return rows


def notes(table: AblationTable) -> list[str]:
    """The lines under the table: how times are measured, and the noise."""
    lines = []
    if table.budget is not None:
        lines.extend(budget_notes(table))
    elif table.target is not None:
        lines.append(
            f"Time to val {table.target:g}: the run's training wall time (evaluation excluded), "
            "linear between the last evaluation above the target and the first at or below it"
            + resolution(table)
            + "."
        )
        ended = [row for row in table.rows if row.result.status in RESULT_STATES]
        if ended and all(row.time_s is None for row in ended):
            most = max(row.result.steps for row in ended)
            lines.append(
                f"No run reached val {table.target:g} (the lowest final val {min_val(ended)}, in at most {most} steps): "
                "a higher --target, or more --steps, measures a time."
            )
        first = [r.result.label for r in table.rows if r.time_s is not None and r.result.before_step is None]
        if first:
            lines.append(
                f"Reached at the run's first evaluation ({', '.join(first)}): that evaluation's time, "
                "at most the time it took (a lower --target, or --set eval.interval=N with a smaller N, measures it)."
            )
    else:
        lines.append("Train time: the run's training wall time to its last step (evaluation excluded).")
    changed = [row.result for row in table.rows if row.result.changed_live]
    if changed:
        lines.append(
            "* changed while it trained, so its figures are not those of its settings alone: "
            + "; ".join(f"{r.label}: {', '.join(r.changed_live)}" for r in changed)
            + "."
        )
    n_base = len([r for r in table.rows if r.result.is_baseline])
    if n_base > 1:
        lines.append(f"Differences are from the baseline's mean over its {n_base} runs (each a seed of its own).")
        timed = [row for row in table.rows if row.result.is_baseline and row.time_s is not None]
        if table.target is not None and len(timed) < n_base:  # the time's mean is not over them all
            lines.append(
                f"Only {len(timed)} of the {n_base} baseline runs reached val {table.target:g}: "
                "the time's mean and spread are of those alone."
            )
        spreads = []
        if table.time_spread is not None and table.budget is None:  # a budget's times are all its own
            s = table.time_spread
            spreads.append(f"time {fmt_seconds(s.low)} to {fmt_seconds(s.high)} (std {fmt_seconds(s.std)})")
        if table.val_spread is not None:
            s = table.val_spread
            what = "val bpb" if table.budget is not None else "val"
            spreads.append(f"{what} {s.low:.4f} to {s.high:.4f} (std {s.std:.4f})")
        if spreads:
            lines.append("Noise, the baseline's spread: " + "; ".join(spreads) + ". ~ marks a value inside it.")
    else:
        lines.append("No noise estimate: --repeat-baseline 3 runs the baseline 3 times (seeds of their own) to measure it.")
    return lines


def min_val(rows: Sequence[Row]) -> str:
    vals = [row.result.final_val for row in rows if row.result.final_val is not None]
    return f"{min(vals):.4f}" if vals else "no evaluation"


def resolution(table: AblationTable) -> str:
    """How far apart the evaluations around the crossings were: the time's resolution."""
    gaps = [
        r.result.target_step - r.result.before_step
        for r in table.rows
        if r.time_s is not None and r.result.target_step is not None and r.result.before_step is not None
    ]
    if not gaps:
        return ""
    if min(gaps) == max(gaps):
        return f" ({gaps[0]} steps apart)"
    return f" ({min(gaps)} to {max(gaps)} steps apart)"


def aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    right = [False, *[True] * (len(widths) - 2), False]  # the run and its status to the left

    def line(cells: list[str]) -> str:
        padded = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if r else ("-" * (w + 2)) for w, r in zip(widths, right, strict=True)) + "|"
    return [line(rows[0]), rule, *(line(r) for r in rows[1:])]


def to_markdown(table: AblationTable) -> str:
    lines = [f"# {table.title}", ""] if table.title else []
    lines += aligned(markdown_rows(table))
    lines += ["", *notes(table)]
    return "\n".join(lines) + "\n"
