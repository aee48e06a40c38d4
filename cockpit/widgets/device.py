"""The Device panel: what the machine is doing, from `Telemetry` events (about 1 Hz).

- nvml: per GPU a header (name, temperature, power/limit, SM clock, throttle reasons) and two
  strip charts (utilisation, memory);
- psutil: CPU% (overall strip chart and one bar per core), RAM and the process' RSS, and a note
  that there is no GPU telemetry;
- unavailable: the reason.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.widgets import Label, Static

from cockpit.widgets._format import fmt_bytes, fmt_gib_pair, fmt_pct
from cockpit.widgets.sparkline import BARS, StripSparkline
from cockpit.widgets.status import Segment, StatusText

HISTORY = 240  # readings kept per series (about 4 minutes at 1 Hz)

THROTTLE_NAMES = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "hw slowdown",
    "hw_thermal_slowdown": "thermal",
    "sw_thermal_slowdown": "thermal",
    "hw_power_brake_slowdown": "power brake",
    "sync_boost": "sync boost",
    "applications_clocks_setting": "app clocks",
}


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
    reasons = list(dict.fromkeys(THROTTLE_NAMES.get(t, t.replace("_", " ")) for t in r.throttle))
    if reasons:
        segs.append(Segment(Content.styled("⚠ " + ", ".join(reasons), "$warning"), 2))
    return segs


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
        self.value.update(value_text)


class GpuView(Vertical):
    """One GPU: header line + util and memory strip charts."""

    def __init__(self, index: int) -> None:
        super().__init__(classes="gpu-view")
        self.index = index
        self.util: deque[float] = deque(maxlen=HISTORY)
        self.mem: deque[float] = deque(maxlen=HISTORY)
        self._reading: Any = None
        self.header = StatusText(classes="gpu-header")
        self.util_meter = Meter("util")
        self.mem_meter = Meter("mem")

    def compose(self) -> ComposeResult:
        yield self.header
        yield self.util_meter
        yield self.mem_meter

    def on_mount(self) -> None:
        if self._reading is not None:
            self._apply()

    def update_reading(self, reading: Any) -> None:
        self._reading = reading
        if reading.util_percent is not None:
            self.util.append(reading.util_percent)
        if reading.mem_used is not None and reading.mem_total:
            self.mem.append(100.0 * reading.mem_used / reading.mem_total)
        if self.is_mounted and self.children:
            self._apply()

    def _apply(self) -> None:
        r = self._reading
        self.header.set_segments(gpu_header(r))
        self.util_meter.set(self.util, fmt_pct(r.util_percent))
        self.mem_meter.set(self.mem, fmt_gib_pair(r.mem_used, r.mem_total))


class CpuView(Vertical):
    """CPU-only telemetry: overall CPU%, per-core bars, RAM and the process RSS."""

    def __init__(self) -> None:
        super().__init__(classes="cpu-view")
        self.cpu: deque[float] = deque(maxlen=HISTORY)
        self.ram: deque[float] = deque(maxlen=HISTORY)
        self._event: Any = None
        self.cpu_meter = Meter("cpu")
        self.cores = Static("", classes="cores")
        self.ram_meter = Meter("ram")
        self.rss = Static("", classes="rss")

    def compose(self) -> ComposeResult:
        yield Static(
            Content.styled("CPU only: no GPU telemetry", "italic $foreground-muted"), classes="note"
        )
        yield self.cpu_meter
        yield self.cores
        yield self.ram_meter
        yield self.rss

    def on_mount(self) -> None:
        if self._event is not None:
            self._apply()

    def update_event(self, ev: Any) -> None:
        self._event = ev
        if ev.cpu_percent is not None:
            self.cpu.append(ev.cpu_percent)
        if ev.ram_used is not None and ev.ram_total:
            self.ram.append(100.0 * ev.ram_used / ev.ram_total)
        if self.is_mounted and self.children:
            self._apply()

    def _apply(self) -> None:
        ev = self._event
        self.cpu_meter.set(self.cpu, fmt_pct(ev.cpu_percent))
        cores = ev.cpu_per_core or ()
        bars = "".join(BARS[min(int(max(c, 0) / 100 * len(BARS)), len(BARS) - 1)] for c in cores)
        self.cores.update(
            Content.assemble(
                ("cores ", "$foreground-muted"), (bars, "$primary"), (f" ×{len(cores)}", "$foreground-muted")
            )
            if cores
            else ""
        )
        self.ram_meter.set(self.ram, fmt_gib_pair(ev.ram_used, ev.ram_total))
        rss = ev.process_rss
        self.rss.update(
            Content.assemble(("process RSS ", "$foreground-muted"), fmt_bytes(rss))
            if rss is not None
            else ""
        )


class DevicePanel(VerticalScroll):
    """Switches between GPU, CPU and 'unavailable' views as telemetry arrives."""

    BORDER_TITLE = "Device"
    ALLOW_MAXIMIZE = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mode = "waiting"
        self.n_gpus = 0
        self.updates = 0
        self._views: list[Any] = []
        self._waiting = Static(
            Content.styled("waiting for telemetry...", "$foreground-muted"), classes="note waiting"
        )

    def compose(self) -> ComposeResult:
        yield self._waiting

    def set_waiting_note(self, text: str) -> None:
        """The note shown until the first telemetry arrives."""
        self._waiting.update(Content.styled(text, "$foreground-muted"))

    def reset(self) -> None:
        """Telemetry is about the machine, not the run: keep the history across runs."""

    def update_telemetry(self, ev: Any) -> None:
        self.updates += 1
        source = ev.source
        if source == "nvml" and not ev.gpus:
            source = "unavailable"
        key = (source, len(ev.gpus) if source == "nvml" else 0)
        if key != (self.mode, self.n_gpus):
            self.mode, self.n_gpus = key
            self.remove_children()
            if source == "nvml":
                self._views = [GpuView(g.index) for g in ev.gpus]
            elif source == "psutil":
                self._views = [CpuView()]
            else:
                self._views = [Static("", classes="note unavailable")]
            self.mount_all(self._views)
        if source == "nvml":
            self.border_title = f"Device [not bold $foreground-muted]GPU × {len(ev.gpus)}[/]"
            for view, reading in zip(self._views, ev.gpus, strict=False):
                view.update_reading(reading)
        elif source == "psutil":
            self.border_title = "Device [not bold $foreground-muted]CPU[/]"
            for view in self._views:
                view.update_event(ev)
        else:
            self.border_title = "Device"
            reason = ev.reason or "no reason given"
            for note in self._views:
                note.update(Content.assemble(("telemetry unavailable: ", "$warning"), reason))
