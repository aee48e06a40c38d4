"""The Device panel: what the machine is doing, from `Telemetry` events (about 1 Hz).

nvml: per GPU a header and strip charts of utilisation and memory; psutil: CPU% (and per core),
RAM and the process' RSS; unavailable: the reason. Under torchrun, `RankReport` events draw one
row per rank instead (`RanksView`). Zoomed, the panel shows the last minutes' history instead
(`HistoryMeter`: time-based, as tall as the panel's room allows): per GPU its utilisation, the
run's own SM use, its memory and the run's share, its power; the run's own CPU and RSS; on a CPU
machine each core too.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Label, Static

from cockpit.figures.numbers import fmt_bytes, fmt_gib_pair, fmt_pct
from cockpit.widgets.ranks import RanksView
from cockpit.widgets.sparkline import BARS, StripSparkline, WindowChart
from cockpit.widgets.status import Segment, StatusText
from cockpit.widgets.throttling import throttle_labels
from cockpit.widgets.time_window import SPAN_S, TimeSeries, span_label
from engine.events import RankReport, Telemetry, ThreadsChosen

HISTORY = 240  # readings kept per series (about 4 minutes at 1 Hz)
MAX_CHART_ROWS = 6  # a zoomed history chart grows up to this many rows to fill the panel
HISTORY_NOTE = f"last {span_label(SPAN_S)}, newest on the right"


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


def show_if_changed(widget: Static, content: str | Content, layout: bool = False) -> bool:
    """`widget.update(content)` unless it already shows exactly that: an update repaints the
    widget and widens the screen update around it, even when the text is the same (most of
    a reading's figures, RAM or RSS, do not move from one second to the next).
    Returns True if it was updated."""
    if widget.__dict__.get("_shown_content", None) == content:
        return False
    widget.__dict__["_shown_content"] = content
    widget.update(content, layout=layout)
    return True


class Meter(Horizontal):
    """`label  ▁▂▄▆█▇  value`: a strip chart between a label and the current value."""

    def __init__(self, label: str) -> None:
        super().__init__(classes="meter")
        self.label = Label(label, classes="meter-label")
        self.spark = StripSparkline(classes="meter-spark")
        self.value = Label("-", classes="meter-value")

    def compose(self) -> ComposeResult:
        yield self.label
        yield self.spark
        yield self.value

    def set(self, data: deque, value_text: str) -> None:
        self.spark.data = tuple(data)
        # fixed width in CSS: no layout pass (it would re-arrange the whole screen each second)
        show_if_changed(self.value, value_text)


class HistoryMeter(Horizontal):
    """`label  chart  value`: a zoomed panel's history of one figure over the last minutes,
    one or more rows tall (`set_rows`)."""

    def __init__(self, label: str, hi: float = 100.0) -> None:
        super().__init__(classes="history-meter")
        self.label = Label(label, classes="meter-label")
        self.chart = WindowChart(hi=hi, classes="history-chart")
        self.value = Label("-", classes="meter-value")
        self.series = TimeSeries()

    def compose(self) -> ComposeResult:
        yield self.label
        yield self.chart
        yield self.value

    def add(self, t: float, value: float | None) -> None:
        self.series.add(t, value)

    def show(self, value_text: str, hi: float | None = None) -> None:
        self.chart.show(self.series, hi)
        show_if_changed(self.value, value_text)

    def set_rows(self, rows: int) -> None:
        if self.styles.height is None or self.styles.height.value != rows:
            self.styles.height = rows


def history_note(text: str) -> Static:
    return Static(Content.styled(text, "$foreground-muted"), classes="note history-note")


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


class CpuHistory(Vertical):
    """A zoomed panel's history of the run's own process: its CPU (on the machine's scale) and
    resident memory (on RAM's scale); on a CPU machine one chart per core too (`per_core`).
    Hidden unless zoomed; on a GPU machine it is a view of its own, under the GPUs."""

    def __init__(self, per_core: bool = True) -> None:
        super().__init__(classes="history cpu-history")
        self.per_core = per_core
        self.run_meter = HistoryMeter("run")
        self.rss_meter = HistoryMeter("rss")
        self.core_meters: list[HistoryMeter] = []
        self._n_cores = 0
        self._event: Any = None
        what = "the run's own process, each core" if per_core else "the run's own process"
        self.title = history_note(f"{HISTORY_NOTE}: {what}")

    def compose(self) -> ComposeResult:
        yield self.title
        yield self.run_meter
        yield self.rss_meter

    @property
    def meters(self) -> list[HistoryMeter]:
        return [self.run_meter, self.rss_meter, *self.core_meters]

    def add(self, ev: Any) -> None:
        self._event = ev
        cores = ev.cpu_per_core or ()
        if cores:
            self._n_cores = len(cores)
        if self.per_core and cores and len(cores) != len(self.core_meters):
            # another machine: its own history (mounted by the next apply)
            for meter in self.core_meters:
                if meter.is_mounted:
                    meter.remove()
            self.core_meters = [HistoryMeter(f"cpu{i}") for i in range(len(cores))]
        for meter, value in zip(self.core_meters, cores, strict=False):
            meter.add(ev.time, value)
        self.run_meter.add(ev.time, ev.process_cpu_percent)
        rss, total = ev.process_rss, ev.ram_total
        self.rss_meter.add(ev.time, 100.0 * rss / total if rss is not None and total else None)

    def on_mount(self) -> None:
        self.call_after_refresh(self.apply)  # a reading that came before this was mounted

    def apply(self) -> None:
        ev = self._event
        if ev is None or not self.is_mounted:  # its meters cannot be mounted yet: drawn on mount
            return
        new = [m for m in self.core_meters if not m.is_mounted and m.parent is None]
        if new:
            self.mount_all(new)
        # the run's CPU on the scale of the whole machine (100% a core, n cores): as the cpu row
        own = ev.process_cpu_percent
        self.run_meter.show(
            "-" if own is None else f"{own / 100:.1f} cores", hi=100.0 * max(1, self._n_cores)
        )
        # its memory on the scale of the machine's RAM, as the ram row
        self.rss_meter.show(fmt_bytes(ev.process_rss))
        for meter in self.core_meters:
            meter.show(fmt_pct(meter.series.latest))


class CpuView(Vertical):
    """CPU-only telemetry: overall CPU%, per-core bars, RAM and the process RSS; zoomed, their
    history too (`CpuHistory`)."""

    def __init__(self) -> None:
        super().__init__(classes="cpu-view")
        self.cpu: deque[float] = deque(maxlen=HISTORY)
        self.ram: deque[float] = deque(maxlen=HISTORY)
        self._event: Any = None
        self._ready = False
        self._n_cores = -1
        self.cpu_meter = Meter("cpu")
        self.cores = Static("", classes="cores")
        self.ram_meter = Meter("ram")
        self.rss = Static("", classes="rss")
        self.threads = Static("", classes="threads")
        self.threads.display = False  # until the run has measured its threads
        self.history = CpuHistory()

    def compose(self) -> ComposeResult:
        yield Static(
            Content.styled("CPU only: no GPU telemetry", "italic $foreground-muted"), classes="note"
        )
        yield self.cpu_meter
        yield self.cores
        yield self.ram_meter
        yield self.rss
        yield self.threads
        yield self.history

    def on_mount(self) -> None:
        self._ready = True  # composed: the meters exist
        self.apply()

    def add(self, ev: Any) -> None:
        """Record a reading (drawn by the next apply)."""
        self._event = ev
        if ev.cpu_percent is not None:
            self.cpu.append(ev.cpu_percent)
        if ev.ram_used is not None and ev.ram_total:
            self.ram.append(100.0 * ev.ram_used / ev.ram_total)
        self.history.add(ev)

    def apply(self) -> None:
        ev = self._event
        if ev is None or not self._ready:
            return
        self.history.apply()
        self.cpu_meter.set(self.cpu, fmt_pct(ev.cpu_percent))
        cores = ev.cpu_per_core or ()
        bars = "".join(BARS[min(int(max(c, 0) / 100 * len(BARS)), len(BARS) - 1)] for c in cores)
        show_if_changed(
            self.cores,
            Content.assemble(
                ("cores ", "$foreground-muted"),
                (bars, "$primary"),
                (f" ×{len(cores)}", "$foreground-muted"),
            )
            if cores
            else "",
            layout=len(cores) != self._n_cores,  # the height can change only with the count
        )
        self._n_cores = len(cores)
        self.ram_meter.set(self.ram, fmt_gib_pair(ev.ram_used, ev.ram_total))
        rss = ev.process_rss
        show_if_changed(
            self.rss,
            Content.assemble(("process RSS ", "$foreground-muted"), fmt_bytes(rss))
            if rss is not None
            else "",
        )

    def show_threads(self, ev: ThreadsChosen | None) -> None:
        """The run's thread count and the step times it was chosen by (None: hidden)."""
        self.threads.display = ev is not None
        if ev is None:
            return
        count, _, measured = ev.summary.removeprefix("threads ").partition(" ")
        show_if_changed(
            self.threads,
            Content.assemble(
                ("threads ", "$foreground-muted"),
                (count, "bold"),
                " ",
                (measured, "$foreground-muted"),
            ),
        )
        self.threads.tooltip = f"measured at step {ev.step}: {ev.reason}"


class UnavailableView(Static):
    def __init__(self) -> None:
        super().__init__("", classes="note unavailable")
        self._reason = ""

    def add(self, ev: Any) -> None:
        self._reason = ev.reason or "no reason given"

    def apply(self) -> None:
        self.update(Content.assemble(("telemetry unavailable: ", "$warning"), self._reason))


class DevicePanel(VerticalScroll):
    """Switches between GPU, CPU and 'unavailable' views as telemetry arrives.

    Readings are recorded as they come; `flush()` (the app's timer) draws them at most every
    `min_interval` seconds, which the app stretches when the UI uses too much CPU.
    """

    BORDER_TITLE = "Device"
    ALLOW_MAXIMIZE = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mode = "waiting"
        self.n_gpus = 0
        self.min_interval = 1.0
        self._pending = False
        self._drawn_at = -1e9
        self._views: list[Any] = []
        self._last_reading_time: float | None = None  # the engine's timestamp of the last reading
        self._stopped_because = ""  # why readings stopped ("run ended"); "" while they come
        self._threads: ThreadsChosen | None = None  # the run's latest measurement (on CPU)
        self._waiting = Static(
            Content.styled("waiting for telemetry...", "$foreground-muted"), classes="note waiting"
        )

    def compose(self) -> ComposeResult:
        yield self._waiting

    def set_waiting_note(self, text: str) -> None:
        """The note shown until the first telemetry arrives."""
        self._waiting.update(Content.styled(text, "$foreground-muted"))

    def reset(self) -> None:
        """Telemetry is about the machine, not the run: keep the history across runs. The
        ranks are the run's: the next run starts without them."""
        if self.mode == "ranks":
            self.mode, self.n_gpus = "waiting", 0
            self.remove_children()
            self._views = []
            self.border_title = "Device"
        self._threads = None
        self._show_threads()

    def update_threads(self, ev: ThreadsChosen) -> None:
        """The run measured its CPU threads: shown under the CPU's readings."""
        self._threads = ev
        self._show_threads()

    def _show_threads(self) -> None:
        for view in self._views:
            if isinstance(view, CpuView):
                view.show_threads(self._threads)

    def readings_stopped(self, why: str) -> None:
        """No more readings will come (the run that polled them ended): say so, with the time of
        the last one, rather than leave it on screen as if it were live."""
        if self.mode == "waiting":
            self.set_waiting_note(f"no telemetry: {why}")
            return
        self._stopped_because = why
        self._show_stopped()

    def _show_stopped(self) -> None:
        t = self._last_reading_time
        when = time.strftime("%H:%M:%S", time.localtime(t)) if t is not None else "?"
        # the panel is ~40 columns at 80x24: the reason only where it fits
        long = f"readings stopped {when} ({self._stopped_because})"
        text = long if len(long) + 6 <= self.outer_size.width else f"readings stopped {when}"
        self.border_subtitle = f"[$warning]{text}[/]"

    def on_resize(self) -> None:
        if self._stopped_because:
            self._show_stopped()
        if self.mode == "ranks":
            self._pending = True  # the rows follow the width and height
        self.call_after_refresh(self._fit_history)  # zoomed: the charts fill the new height

    def update_ranks(self, report: RankReport) -> None:
        """Record one RankReport: from now on the panel shows every rank, not this machine."""
        if len(report.ranks) < 2:
            return  # torchrun with one rank: its own Telemetry says more (the strip charts)
        self._last_reading_time = report.time
        if self._stopped_because:
            self._stopped_because = ""
            self.border_subtitle = ""
        on_gpu = any(r.gpus for r in report.ranks)
        if self.mode != "ranks" or self.n_gpus != len(report.ranks):
            self.mode, self.n_gpus = "ranks", len(report.ranks)
            self.remove_children()
            self._views = [RanksView()]
            self.mount_all(self._views)
            self._drawn_at = -1e9
        kind = "GPU" if on_gpu else "CPU"
        self.border_title = (
            f"Device [not bold $foreground-muted]{len(report.ranks)} ranks · {kind}[/]"
        )
        self._views[0].add(report)
        self._pending = True

    def _rank_rows_limit(self) -> int | None:
        """The rows the rank view may take: the panel's height where the layout fixes it (the
        compact screen), unbounded where the panel grows with its content or is zoomed."""
        screen = self.screen
        if screen.maximized is self or not screen.has_class("compact"):
            return None
        return self.scrollable_content_region.height or None

    def update_telemetry(self, ev: Telemetry) -> None:
        """Record one Telemetry event (switching views if the source changed)."""
        if self.mode == "ranks":
            return  # rank 0's machine is in its row of the rank report
        self._last_reading_time = ev.time
        if self._stopped_because:  # readings come again (a new run)
            self._stopped_because = ""
            self.border_subtitle = ""
        source = ev.source
        if source == "nvml" and not ev.gpus:
            source = "unavailable"
        key = (source, len(ev.gpus) if source == "nvml" else 0)
        if key != (self.mode, self.n_gpus):
            self.mode, self.n_gpus = key
            self.remove_children()
            if source == "nvml":
                self._views = [GpuView(g.index) for g in ev.gpus]
                self._views.append(CpuHistory(per_core=False))  # the run's own, zoomed
                title = f"Device [not bold $foreground-muted]GPU × {len(ev.gpus)}[/]"
            elif source == "psutil":
                self._views = [CpuView()]
                self._views[0].show_threads(self._threads)
                title = "Device [not bold $foreground-muted]CPU[/]"
            else:
                self._views = [UnavailableView()]
                title = "Device"
            self.border_title = title
            self.mount_all(self._views)
            self.call_after_refresh(self._fit_history)  # once the new views are laid out
            self._drawn_at = -1e9  # draw the new view at once
        if source == "nvml":
            for view, reading in zip(self._views, ev.gpus, strict=False):
                view.add(reading, ev.time)
            self._views[-1].add(ev)
        else:
            for view in self._views:
                view.add(ev)
        self._pending = True

    def flush(self, now: float, force: bool = False) -> bool:
        """Draw the latest readings if there are new ones and it is time (or force)."""
        if not self._pending or (not force and now - self._drawn_at < self.min_interval * 0.9):
            return False
        self._pending = False
        self._drawn_at = now
        if self.mode == "ranks" and self._views:
            self._views[0].height_limit = self._rank_rows_limit()
        for view in self._views:
            view.apply()
        self._fit_history()
        return True

    def _fit_history(self) -> None:
        """Zoomed, the history charts share the panel's height: as tall as there is room for
        (up to MAX_CHART_ROWS rows each), one row each where there is none (it scrolls)."""
        if not self.has_class("-maximized"):
            return
        meters = [m for m in self.query(HistoryMeter) if m.parent is not None and m.parent.display]
        if not meters:
            return
        # the rows everything but the charts takes: the content's height, less the charts'
        drawn = sum(m.outer_size.height for m in meters)
        shown = [v for v in self._views if v.display]
        content = max((v.virtual_region_with_margin.bottom for v in shown), default=0)
        room = self.scrollable_content_region.height - (content - drawn)
        rows, extra = divmod(max(room, len(meters)), len(meters))
        for i, meter in enumerate(meters):  # the rows left over go to the first charts
            meter.set_rows(min(MAX_CHART_ROWS, rows + (i < extra)))
