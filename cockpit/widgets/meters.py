"""The Device panel's meters: a strip chart between a label and its value (`Meter`), and, zoomed,
one figure's history over the last minutes (`HistoryMeter`), as tall as the panel has room for."""

from __future__ import annotations

from collections import deque

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Label, Static

from cockpit.widgets.sparkline import StripSparkline, WindowChart
from cockpit.widgets.time_window import SPAN_S, TimeSeries, span_label

HISTORY = 240  # readings kept per strip chart (about 4 minutes at 1 Hz)
HISTORY_NOTE = f"last {span_label(SPAN_S)}, newest on the right"


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
