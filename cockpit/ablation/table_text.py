"""A series' table written out: results.csv (one row a run, every figure) and results.md (the
table aligned, with the notes under it on how the figures were measured and the noise)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from cockpit.ablation.results import fmt_bytes
from cockpit.ablation.series_record import RESULT_STATES
from cockpit.ablation.table import AblationTable, Difference, Row
from engine.events import RunState

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
        # fmt: off
        writer.writerow(
            _cell(v)
            for v in (
                r.label, r.run_dir, r.status, r.is_baseline, r.steps, row.time_s, r.time_to_target_s,
                r.target_step, r.before_step, r.train_time_s, r.final_val, r.tokens_per_s,
                dt.value if dt else None, dt.percent if dt else None, dt.in_noise if dt else None,
                dv.value if dv else None, dv.percent if dv else None, dv.in_noise if dv else None,
                "; ".join(r.changed_live) or None, r.final_val_bpb, r.tokens, r.peak_memory,
            )
        )
        # fmt: on
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


def budget_rows(table: AblationTable) -> list[list[str]]:
    """The table of a budget series: what the same training time bought each run."""
    head = [
        "run",
        "val bpb",
        "Δ bpb",
        "tokens",
        "tokens/s",
        "peak memory",
        "train time",
        "steps",
        "status",
    ]
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
        lines.append(
            "† evaluated on part of the val split (a bound cut it short): see the run's alerts."
        )
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
        first = [
            r.result.label
            for r in table.rows
            if r.time_s is not None and r.result.before_step is None
        ]
        if first:
            lines.append(
                f"Reached at the run's first evaluation ({', '.join(first)}): that evaluation's time, "
                "at most the time it took (a lower --target, or --set eval.interval=N with a smaller N, measures it)."
            )
    else:
        lines.append(
            "Train time: the run's training wall time to its last step (evaluation excluded)."
        )
    changed = [row.result for row in table.rows if row.result.changed_live]
    if changed:
        lines.append(
            "* changed while it trained, so its figures are not those of its settings alone: "
            + "; ".join(f"{r.label}: {', '.join(r.changed_live)}" for r in changed)
            + "."
        )
    n_base = len([r for r in table.rows if r.result.is_baseline])
    if n_base > 1:
        lines.append(
            f"Differences are from the baseline's mean over its {n_base} runs (each a seed of its own)."
        )
        timed = [row for row in table.rows if row.result.is_baseline and row.time_s is not None]
        if table.target is not None and len(timed) < n_base:  # the time's mean is not over them all
            lines.append(
                f"Only {len(timed)} of the {n_base} baseline runs reached val {table.target:g}: "
                "the time's mean and spread are of those alone."
            )
        spreads = []
        # a budget's times are all its own: no spread of them
        if table.time_spread is not None and table.budget is None:
            s = table.time_spread
            spreads.append(
                f"time {fmt_seconds(s.low)} to {fmt_seconds(s.high)} (std {fmt_seconds(s.std)})"
            )
        if table.val_spread is not None:
            s = table.val_spread
            what = "val bpb" if table.budget is not None else "val"
            spreads.append(f"{what} {s.low:.4f} to {s.high:.4f} (std {s.std:.4f})")
        if spreads:
            lines.append(
                "Noise, the baseline's spread: "
                + "; ".join(spreads)
                + ". ~ marks a value inside it."
            )
    else:
        lines.append(
            "No noise estimate: --repeat-baseline 3 runs the baseline 3 times (seeds of their own) to measure it."
        )
    return lines


def min_val(rows: Sequence[Row]) -> str:
    vals = [row.result.final_val for row in rows if row.result.final_val is not None]
    return f"{min(vals):.4f}" if vals else "no evaluation"


def resolution(table: AblationTable) -> str:
    """How far apart the evaluations around the crossings were: the time's resolution."""
    gaps = [
        r.result.target_step - r.result.before_step
        for r in table.rows
        if r.time_s is not None
        and r.result.target_step is not None
        and r.result.before_step is not None
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
        padded = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)
        ]
        return "| " + " | ".join(padded) + " |"

    rule = (
        "|"
        + "|".join(
            ("-" * (w + 1) + ":") if r else ("-" * (w + 2))
            for w, r in zip(widths, right, strict=True)
        )
        + "|"
    )
    return [line(rows[0]), rule, *(line(r) for r in rows[1:])]


def to_markdown(table: AblationTable) -> str:
    lines = [f"# {table.title}", ""] if table.title else []
    lines += aligned(markdown_rows(table))
    lines += ["", *notes(table)]
    return "\n".join(lines) + "\n"
