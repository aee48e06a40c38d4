"""One GPU in the Device panel, from `Telemetry` events of the nvml source: a header (name,
temperature, power, clock, throttle reasons) and strip charts of its utilisation and memory;
zoomed, their history instead (`GpuHistory`), with the run's own SM use and memory, and power."""

from __future__ import annotations

from collections import deque
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content

from cockpit.figures.numbers import fmt_bytes, fmt_gib_pair, fmt_pct
from cockpit.widgets.meters import HISTORY, HISTORY_NOTE, HistoryMeter, Meter, history_note
from cockpit.widgets.status import Segment, StatusText
from cockpit.widgets.throttling import throttle_labels


def gpu_header(r: Any) -> list[Segment]:
    """Header segments for one GPU, the least important dropped first when narrow."""
    name = r.name.removeprefix("NVIDIA ").removeprefix("GeForce ")
    segs = [Segment(Content.assemble((f"{r.index} ", "bold"), name), 0)]
    if r.temperature_c is not None:
        t_style = (
            "$error" if r.temperature_c >= 85 else ("$warning" if r.temperature_c >= 75 else "")
        )
        segs.append(Segment(Content.styled(f"{r.temperature_c:.0f}°C", t_style), 1))
    if r.power_w is not None:
        limit = f"/{r.power_limit_w:.0f}" if r.power_limit_w else ""
        segs.append(Segment(Content(f"{r.power_w:.0f}{limit} W"), 3))
    if r.sm_clock_mhz is not None:
        segs.append(Segment(Content(f"{r.sm_clock_mhz:.0f} MHz"), 4))
    warnings, notes = throttle_labels(r.throttle)
    if warnings:
        segs.append(Segment(Content.styled("⚠ " + ", ".join(warnings), "$warning"), 2))
    if notes:
        segs.append(Segment(Content.styled(", ".join(notes), "$foreground-muted"), 5))
    return segs


class GpuHistory(Vertical):
    """One GPU's zoomed history: its utilisation and the run's own SM use, its memory and the
    run's share of it, its power against the limit (hidden unless zoomed)."""

    def __init__(self) -> None:
        super().__init__(classes="history gpu-history")
        self.util = HistoryMeter("util")
        self.run_util = HistoryMeter(" run")
        self.mem = HistoryMeter("mem")
        self.run_mem = HistoryMeter(" run")
        self.power = HistoryMeter("power")
        self.meters = [self.util, self.run_util, self.mem, self.run_mem, self.power]

    def compose(self) -> ComposeResult:
        yield history_note(f"{HISTORY_NOTE}; run: this run's own process")
        yield from self.meters

    def add(self, r: Any, t: float) -> None:
        total = r.mem_total

        def share(n: int | None) -> float | None:
            return 100.0 * n / total if n is not None and total else None

        self.util.add(t, r.util_percent)
        self.run_util.add(t, r.process_util_percent)
        self.mem.add(t, share(r.mem_used))
        self.run_mem.add(t, share(r.process_mem))
        self.power.add(t, r.power_w)

    def apply(self, r: Any) -> None:
        self.util.show(fmt_pct(r.util_percent))
        own = r.process_util_percent
        self.run_util.show("-" if own is None else f"{own:.0f}% SM")
        self.mem.show(fmt_gib_pair(r.mem_used, r.mem_total))
        self.run_mem.show(fmt_bytes(r.process_mem))
        # on the scale of the power limit (of the highest draw seen where there is none)
        seen = [v for _, v in self.power.series.readings if v is not None]
        hi = r.power_limit_w or max(seen, default=0.0) or 1.0
        if r.power_w is None:
            text = "-"
        else:
            text = (
                f"{r.power_w:.0f}/{r.power_limit_w:.0f} W"
                if r.power_limit_w
                else f"{r.power_w:.0f} W"
            )
        self.power.show(text, hi=hi)


class GpuView(Vertical):
    """One GPU: header line + util and memory strip charts; zoomed, their history instead
    (`GpuHistory`)."""

    def __init__(self, index: int) -> None:
        super().__init__(classes="gpu-view")
        self.index = index
        self.util: deque[float] = deque(maxlen=HISTORY)
        self.mem: deque[float] = deque(maxlen=HISTORY)
        self._reading: Any = None
        self._ready = False
        self.header = StatusText(classes="gpu-header")
        self.util_meter = Meter("util")
        self.mem_meter = Meter("mem")
        self.history = GpuHistory()

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.util_meter
        yield self.mem_meter
        yield self.history

    def on_mount(self) -> None:
        self._ready = True  # composed: the meters exist
        self.apply()

    def add(self, reading: Any, t: float) -> None:
        """Record a reading taken at `t` (drawn by the next apply)."""
        self._reading = reading
        if reading.util_percent is not None:
            self.util.append(reading.util_percent)
        if reading.mem_used is not None and reading.mem_total:
            self.mem.append(100.0 * reading.mem_used / reading.mem_total)
        self.history.add(reading, t)

    def apply(self) -> None:
        r = self._reading
        if r is None or not self._ready:
            return
        self.header.set_segments(gpu_header(r))
        self.util_meter.set(self.util, fmt_pct(r.util_percent))
        self.mem_meter.set(self.mem, fmt_gib_pair(r.mem_used, r.mem_total))
        self.history.apply(r)
