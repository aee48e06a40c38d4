"""The Device panel: what the machine is doing, from `Telemetry` events (about 1 Hz).

nvml: per GPU a header and strip charts of utilisation and memory (`GpuView`); psutil: CPU% (and
per core), RAM and the process' RSS (`CpuView`); unavailable: the reason. Under torchrun,
`RankReport` events draw one row per rank instead (`RanksView`). Zoomed, the panel shows the last
minutes' history instead (`HistoryMeter`: time-based, as tall as the panel's room allows): per GPU
its utilisation, the run's own SM use, its memory and the run's share, its power; the run's own
CPU and RSS; on a CPU machine each core too.
"""

from __future__ import annotations

import time
from typing import Any

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from cockpit.widgets.cpu_view import CpuHistory, CpuView
from cockpit.widgets.gpu_view import GpuView
from cockpit.widgets.meters import HistoryMeter
from cockpit.widgets.ranks import RanksView
from engine.events import RankReport, Telemetry, ThreadsChosen

MAX_CHART_ROWS = 6  # a zoomed history chart grows up to this many rows to fill the panel


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
