"""An ablation series' experiments as research log rows: each run with a result is one row, its
change measured against the baseline on the figure its table compares (val bits per byte after
a budget, the time to a target val loss, else the final val loss), `kept` when it beat the baseline
by more than the baseline's own spread (its repeats), `discarded` otherwise; a run that failed
before its first step was `refused`, one that failed later `crashed`."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from cockpit.ablation.research_log import LogRow
from cockpit.ablation.results import RunResult
from cockpit.ablation.series_record import Series, SeriesRun
from cockpit.ablation.spec import AblationSpec, settled, shown_setting
from engine.events import RunState

PROPOSER = "ablate"


def figure(result: RunResult, spec: AblationSpec) -> tuple[float | None, str]:
    """The value a change is judged on (lower is better) and its name."""
    if spec.target is not None:
        return result.time_to_target_s, f"time to val {spec.target:g}"
    if spec.budget is not None:  # as the table compares them
        return result.final_val_bpb, "val bpb"
    return result.final_val, "val loss"


def fmt(value: float, name: str) -> str:
    return f"{value:.2f} s" if name.startswith("time") else f"{value:.4f}"


def verdict(
    result: RunResult, spec: AblationSpec, baselines: Sequence[RunResult]
) -> tuple[str, str]:
    """(kept or discarded, why) of a finished change against the baseline's runs with a result."""
    value, name = figure(result, spec)
    base = [v for b in baselines if (v := figure(b, spec)[0]) is not None]
    if value is None:
        return "discarded", f"no {name} measured" + (
            " (not reached)" if spec.target is not None else ""
        )
    if not base:
        return "discarded", f"{name} {fmt(value, name)}; no baseline measured to compare with"
    mean = statistics.fmean(base)
    said = f"{name} {fmt(value, name)} against the baseline's {fmt(mean, name)}"
    if len(base) > 1:
        said += f" (mean of {len(base)}, spread {fmt(min(base), name)} to {fmt(max(base), name)})"
        if value < min(base):
            return "kept", said + ": lower than every baseline run"
        return "discarded", said + ": " + (
            "within the baseline's spread" if value <= max(base) else "higher"
        )
    if value < mean:
        return "kept", said + ": lower (no noise measured: --repeat-baseline K)"
    return "discarded", said + ": not lower"


def proposer(run: SeriesRun, spec: AblationSpec) -> tuple[str, str]:
    """(who proposed the run, the reason given): a series file's change is its file's, with its
    name as the reason; a --change the command line's."""
    if run.is_baseline:
        return PROPOSER, ""
    key = settled(run.settings)
    change = next((c for c in spec.changes if settled(c.settings) == key), None)
    if change is None or change.source == "--change":
        return f"{PROPOSER} --change", ""
    plain = " ".join(shown_setting(t) for t in change.settings)
    return f"{PROPOSER} {change.source}", "" if change.label == plain else change.label


def series_rows(series: Series, results: Sequence[RunResult], logged: set[str]) -> list[LogRow]:
    """The rows of the runs of `series` with a result (`results` in the order of its runs)
    whose id (their directory's name) is not in `logged`."""
    spec = series.spec
    baselines = [r for r in results if r.is_baseline and r.status == RunState.FINISHED]
    parent = series.baseline_runs[0].run_dir.name if series.baseline_runs else spec.preset
    rows = []
    for run, result in zip(series.runs, results, strict=True):
        if run.run_dir.name in logged or result.status not in (RunState.FINISHED, RunState.FAILED):
            continue
        who, reason = proposer(run, spec)
        if result.status == RunState.FAILED:
            status = "refused" if result.steps == 0 else "crashed"
            note = result.end_reason.splitlines()[0] if result.end_reason else "failed"
        elif run.is_baseline:
            status = "kept"
            note = f"the baseline, preset {spec.preset}" + (
                f" ({', '.join(run.settings)})" if run.settings else ""
            )
        else:
            status, note = verdict(result, spec, baselines)
        rows.append(
            LogRow(
                id=run.run_dir.name,
                change="" if run.is_baseline else " ".join(shown_setting(t) for t in run.settings),
                parent=f"preset {spec.preset}" if run.is_baseline else parent,
                val_bpb=result.final_val_bpb,
                tokens=result.tokens,
                train_time_s=result.train_time_s,
                peak_memory_bytes=result.peak_memory,
                status=status,
                reason=reason,
                proposed_by=who,
                note=note,
                run_dir=str(Path(result.run_dir)),
            )
        )
    return rows
