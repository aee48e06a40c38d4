"""A series' table: every run's result against the baseline's mean, with the baseline's spread
over its repeats as the noise a difference is judged against."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from cockpit.ablation.results import RunResult


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


def difference(
    value: float | None, base: float | None, spread: Spread | None, is_change: bool
) -> Difference | None:
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
    return AblationTable(
        title, target, tuple(rows), base_time, base_val, time_spread, val_spread, budget
    )
