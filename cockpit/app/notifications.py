"""Alerts you hear: a desktop notification (OSC 9 and OSC 777, which pass through SSH, and
through tmux when wrapped for it) and, if asked for, the terminal bell, when a run finishes,
fails, pauses on a fault, or stalls.

`notice_for` and `StallWatch` decide, from the run's events and times, what deserves a
notification (pure, tested alone); `Notifier` turns a notice into the terminal's escape
sequences and writes them through the app's driver.
"""

from __future__ import annotations

import os
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from cockpit.figures.anomaly import with_keys
from engine.events import Alert, Event, RunState, StateChanged, Step

STALL_FACTOR = 10.0  # no step for this many times the usual step time: a stall
STALL_MIN_S = 30.0  # ... and never sooner than this (a checkpoint or an eval is no stall)
FAULT_CODES = ("nan", "spike", "oom", "disk", "rank")  # faults that pause or end a run


@dataclass(frozen=True)
class Notice:
    title: str
    body: str


@dataclass(frozen=True)
class NotifySettings:
    desktop: bool = True  # OSC 9 / 777 notifications (on by default)
    bell: bool = False  # the terminal bell too (off by default)


def notice_for(event: Event, preset: str) -> Notice | None:
    """The notice an event deserves, or None: the run finished or failed, or a fault paused it
    (the fault's alert; the pause that follows says nothing more)."""
    if isinstance(event, StateChanged):
        if event.state == RunState.FINISHED:
            return Notice(f"cockpit: {preset} finished", f"{preset} finished at step {event.step}")
        if event.state == RunState.FAILED:
            why = f": {event.reason}" if event.reason else ""
            return Notice(f"cockpit: {preset} failed", f"{preset} failed at step {event.step}{why}")
    if isinstance(event, Alert) and event.level == "error" and event.code in FAULT_CODES:
        return Notice(f"cockpit: {preset} needs you", f"step {event.step}: {with_keys(event.message)}")
    return None


class StallWatch:
    """No step for STALL_FACTOR times the usual step time (and at least STALL_MIN_S) while the
    run is running: one notice per stall, armed again by the next step."""

    def __init__(self) -> None:
        self._step_times: deque[float] = deque(maxlen=50)
        self._last_step_at: float | None = None
        self._told = False

    def step(self, event: Step, now: float) -> None:
        if event.step_time_s > 0:
            self._step_times.append(event.step_time_s)
        self._last_step_at = now
        self._told = False

    def reset(self, now: float) -> None:
        """Paused, resumed, a new run: the wait starts again from now."""
        self._last_step_at = now
        self._told = False

    def check(self, now: float, state: str, preset: str) -> Notice | None:
        if state != RunState.RUNNING or self._last_step_at is None or self._told:
            return None
        if not self._step_times:
            return None
        usual = statistics.median(self._step_times)
        waited = now - self._last_step_at
        if waited < max(STALL_MIN_S, STALL_FACTOR * usual):
            return None
        self._told = True
        return Notice(
            f"cockpit: {preset} stalled",
            f"no step for {waited:.0f} s (a step usually takes {usual:.2g} s)",
        )


def escape_sequences(notice: Notice, in_tmux: bool) -> str:
    """OSC 9 (iTerm2, Windows Terminal, kitty...) and OSC 777 (rxvt, foot, VTE); inside tmux
    each wrapped in its passthrough (tmux's allow-passthrough must be on)."""
    text = _clean(notice.body)
    sequences = [f"\x1b]9;{text}\x07", f"\x1b]777;notify;{_clean(notice.title)};{text}\x07"]
    if in_tmux:
        sequences = ["\x1bPtmux;" + s.replace("\x1b", "\x1b\x1b") + "\x1b\\" for s in sequences]
    return "".join(sequences)


def _clean(text: str) -> str:
    """No control characters or ';' (they would end or split the sequence), one line."""
    return "".join(c if c.isprintable() and c != ";" else " " for c in text)[:200]


class Notifier:
    """Writes notices to the terminal (`write`: the app driver's) and rings the bell."""

    def __init__(
        self,
        settings: NotifySettings,
        write: Callable[[str], None],
        bell: Callable[[], None],
        in_tmux: bool | None = None,
    ) -> None:
        self.settings = settings
        self.write = write
        self.ring = bell
        self.in_tmux = bool(os.environ.get("TMUX")) if in_tmux is None else in_tmux
        self.sent: list[Notice] = []

    def notify(self, notice: Notice) -> None:
        self.sent.append(notice)
        if self.settings.desktop:
            self.write(escape_sequences(notice, self.in_tmux))
        if self.settings.bell:
            self.ring()
