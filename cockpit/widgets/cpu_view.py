"""The machine's CPU in the Device panel, from `Telemetry` events of the psutil source: CPU%, a
bar per core, RAM, the process' RSS and the threads the run chose; zoomed, the history of the
run's own process too (`CpuHistory`, which a GPU machine shows under its GPUs)."""

from __future__ import annotations

from collections import deque
from typing import Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from cockpit.figures.numbers import fmt_bytes, fmt_gib_pair, fmt_pct
from cockpit.widgets.meters import (
    HISTORY,
    HISTORY_NOTE,
    HistoryMeter,
    Meter,
    history_note,
    show_if_changed,
)
from cockpit.widgets.sparkline import BARS
from engine.events import ThreadsChosen


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
