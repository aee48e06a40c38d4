"""Every rank of a torchrun world in the Device panel, from `RankReport` events (every ~2 s).

A line of step times (the mean and the slowest rank), then one row per rank: its GPU or process
and its step and data times. Columns are dropped least important first until a row fits.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from textual.content import Content
from textual.widgets import Static

from cockpit.figures.numbers import fmt_bytes
from cockpit.widgets.throttling import throttle_labels

STRAGGLER_RATIO = 1.10  # the slowest rank more than 10% above the mean is flagged
GiB = 2**30


def fmt_step_time(seconds: float | None) -> str:
    """412ms, 1.23s, 12.5s; '-' when unknown (a rank that trained nothing in the interval)."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 1.0:
        return f"{seconds * 1000:.3g}ms"
    return f"{seconds:.3g}s"


def fmt_gib_short(used: float | None, total: float | None) -> str:
    """61/80G: a GPU's memory in a narrow column."""
    if used is None:
        return "-"
    if not total:
        return f"{used / GiB:.0f}G"
    return f"{used / GiB:.0f}/{total / GiB:.0f}G"


def straggler(report: Any) -> tuple[Any, float] | None:
    """(the slowest rank, its excess over the mean as a fraction) when it is more than 10%
    above the mean; None otherwise."""
    slowest, mean = report.slowest, report.mean_step_time_s
    if slowest is None or not mean > 0 or len(report.timed) < 2:
        return None
    excess = slowest.step_time_s / mean - 1.0
    return (slowest, excess) if slowest.step_time_s > STRAGGLER_RATIO * mean else None


def step_line(report: Any, width: int) -> Content:
    """`step: mean 412ms · slowest r3 480ms +17%`, in the warning colour for a straggler."""
    slowest, mean = report.slowest, report.mean_step_time_s
    if slowest is None:
        return Content.styled("step: no steps in this interval", "$foreground-muted")
    flagged = straggler(report)
    m, s, r = fmt_step_time(mean), fmt_step_time(slowest.step_time_s), f"r{slowest.rank}"
    excess = f" +{flagged[1] * 100:.0f}%" if flagged else ""
    mark = "⚠ " if flagged else ""
    variants = (
        f"{mark}step: mean {m} · slowest {r} {s}{excess}",
        f"{mark}step: mean {m} · slowest {r} {s}",
        f"{mark}step {m} · slowest {r} {s}{excess}",
        f"{mark}step {m} · slowest {r} {s}",
        f"{mark}{m} · slow {r} {s}",
    )
    text = next((v for v in variants if len(v) <= width), variants[-1])
    return Content.styled(text, "$warning bold" if flagged else "")


@dataclass
class Column:
    """One column of the rank rows: a long and an optional short form of each row's cell."""

    priority: int  # the larger, the sooner it is shortened, then dropped
    cells: list[tuple[str, str]]  # (text, style) per row
    short: list[tuple[str, str]] | None = None
    right: bool = False  # numbers: aligned right
    cheap: bool = False  # the short form loses little (a label, a limit): taken before any drop
    optional: bool = False  # dropped before any cheap short form is taken
    width: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.width = max((len(t) for t, _ in self.cells), default=0)

    def shorten(self) -> bool:
        if self.short is None:
            return False
        self.cells, self.short = self.short, None
        self.__post_init__()
        return True


def fit_columns(columns: list[Column], width: int) -> list[Column]:
    """Fit a row to `width`: first the cheap short forms, least important column first; then
    each column in turn from the least important, shortened and, if that is not enough,
    dropped (the first column, the rank, always stays)."""
    kept = [c for c in columns if c.width > 0]

    def total() -> int:
        return sum(c.width for c in kept) + max(0, len(kept) - 1)

    by_priority = sorted(kept[1:], key=lambda c: -c.priority)
    for column in by_priority:
        if total() > width and column.optional:
            kept.remove(column)
    by_priority = [c for c in by_priority if c in kept]
    for column in by_priority:
        if total() > width and column.cheap:
            column.shorten()
    for column in by_priority:
        if total() <= width:
            break
        column.shorten()
        if total() > width or column.width == 0:  # nothing left: one host only
            kept.remove(column)
    return kept


def short_hosts(hosts: list[str]) -> list[str]:
    """What tells the hosts apart: `gpu-node-a`, `gpu-node-b` -> `a`, `b` (at most 8
    characters); nothing when they are all one host."""
    if len(set(hosts)) < 2:
        return ["" for _ in hosts]
    prefix = os.path.commonprefix(hosts)
    return [(h[len(prefix) :] or h)[:8] for h in hosts]


def _gpu_columns(rows: list[Any]) -> list[Column]:
    gpus = [r.gpus[0] if r.gpus else None for r in rows]

    def cell(fn: Any) -> list[tuple[str, str]]:
        return [(fn(g) if g is not None else "-", "") for g in gpus]

    def temp_style(g: Any) -> str:
        t = g.temperature_c if g is not None else None
        return "" if t is None else ("$error" if t >= 85 else ("$warning" if t >= 75 else ""))

    def throttle(g: Any, short: bool) -> tuple[str, str]:
        warnings = throttle_labels(g.throttle)[0] if g is not None else []
        if not warnings:
            return "", ""
        return ("⚠" if short else "⚠ " + ",".join(warnings)), "$warning"

    return [
        Column(1, cell(lambda g: "-" if g.util_percent is None else f"{g.util_percent:.0f}%"),
               right=True),
        Column(2, cell(lambda g: fmt_gib_short(g.mem_used, g.mem_total)), right=True),
        Column(5, cell(lambda g: "-" if g.power_w is None else (
                   f"{g.power_w:.0f}/{g.power_limit_w:.0f}W" if g.power_limit_w else f"{g.power_w:.0f}W")),
               short=cell(lambda g: "-" if g.power_w is None else f"{g.power_w:.0f}W"), right=True,
               cheap=True),
        Column(4, [("-" if g is None or g.temperature_c is None else f"{g.temperature_c:.0f}°C",
                    temp_style(g)) for g in gpus], right=True),
        Column(3, [throttle(g, False) for g in gpus], short=[throttle(g, True) for g in gpus],
               cheap=True),
    ]  # fmt: skip


def _cpu_columns(rows: list[Any]) -> list[Column]:
    return [
        Column(1, [("cpu " + ("-" if r.cpu_percent is None else f"{r.cpu_percent:.0f}%"), "")
                   for r in rows],
               short=[("-" if r.cpu_percent is None else f"{r.cpu_percent:.0f}%", "") for r in rows],
               cheap=True),
        Column(2, [("rss " + fmt_bytes(r.process_rss), "") for r in rows],
               short=[(fmt_bytes(r.process_rss), "") for r in rows], cheap=True),
    ]  # fmt: skip


def rank_rows(rows: list[Any], width: int, flagged: Any = None) -> list[Content]:
    """One line per rank in `rows`: `r0 host util mem power temp throttle step data` on GPU
    ranks, `r0 host cpu rss step data` on CPU ranks, fitted to `width`."""
    if not rows:
        return []
    on_gpu = any(r.gpus for r in rows)
    columns = [
        Column(0, [(f"r{r.rank}", "bold") for r in rows]),
        Column(7, [(r.host, "$foreground-muted") for r in rows],
               short=[(h, "$foreground-muted") for h in short_hosts([r.host for r in rows])]),
        *(_gpu_columns(rows) if on_gpu else _cpu_columns(rows)),
        Column(6, [(fmt_step_time(r.step_time_s),
                    "$warning" if flagged is not None and r.rank == flagged.rank else "")
                   for r in rows], right=True),
        # the ranks wait for each other at every gradient exchange, so their step times stay
        # close: time waiting for batches is where a slow data loader shows (on GPU ranks,
        # after the device's own figures)
        Column(8, [("data " + fmt_step_time(r.data_time_s), "$foreground-muted") for r in rows],
               short=[("d" + fmt_step_time(r.data_time_s), "$foreground-muted") for r in rows],
               optional=on_gpu),
    ]  # fmt: skip
    kept = fit_columns(columns, width)
    lines = []
    for i in range(len(rows)):
        parts: list[Any] = []
        for n, column in enumerate(kept):
            text, style = column.cells[i]
            padded = text.rjust(column.width) if column.right else text.ljust(column.width)
            if n:
                parts.append(" ")
            parts.append((padded, style) if style else padded)
        lines.append(Content.assemble(*parts).rstrip())
    return lines


def shown_ranks(report: Any, limit: int) -> tuple[list[Any], int]:
    """The ranks to draw in at most `limit` rows, and how many are left out. All of them in
    rank order when they fit; otherwise the slowest and the fastest (a row for "+N more")."""
    ranks = list(report.ranks)
    if len(ranks) <= limit:
        return ranks, 0
    room = max(1, limit - 1)
    by_time = sorted(
        ranks,
        key=lambda r: r.step_time_s if r.steps and math.isfinite(r.step_time_s) else -math.inf,
        reverse=True,
    )
    slow = (room + 1) // 2
    chosen = by_time[:slow] + (by_time[-(room - slow) :] if room > slow else [])
    chosen = sorted({r.rank: r for r in chosen}.values(), key=lambda r: r.rank)
    return chosen, len(ranks) - len(chosen)


def ranks_lines(report: Any, width: int, height: int | None) -> list[Content]:
    """The whole view: the step line, the rank rows, and "+N more" when some are left out.
    `height` is the rows the panel has (None: as many as needed)."""
    width = max(width, 1)
    limit = len(report.ranks) if height is None else max(1, height - 1)
    rows, left_out = shown_ranks(report, limit)
    flagged = straggler(report)
    lines = [step_line(report, width), *rank_rows(rows, width, flagged[0] if flagged else None)]
    if left_out:
        more = f"+{left_out} more (zoom: 3)"
        lines.append(Content.styled(more if len(more) <= width else f"+{left_out}", "$foreground-muted"))
    return lines


class RanksView(Static):
    """The rank rows of the newest report, redrawn for the panel's size."""

    def __init__(self) -> None:
        super().__init__("", classes="ranks-view")
        self.report: Any = None
        self.height_limit: int | None = None  # the panel's rows when its height is fixed

    def add(self, report: Any) -> None:
        self.report = report

    def apply(self) -> None:
        if self.report is None:
            return
        lines = ranks_lines(self.report, self.size.width or 36, self.height_limit)
        self.update(Content("\n").join(lines))
