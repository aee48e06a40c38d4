"""Alerts you hear: a desktop notification (OSC 9 and OSC 777, which pass through SSH, and
through tmux when wrapped for it) and, if asked for, the terminal bell, when a run finishes,
fails, pauses on a fault, or stalls.

What deserves a notification is the engine's rule (engine.rundir: `notice_for`, `StallWatch`),
the one headless runs and webhooks follow too; `Notifier` turns a notice into the terminal's escape
sequences and writes them through the app's driver.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from cockpit.figures.anomaly import with_keys
from engine.events import Event
from engine.rundir import Notice, StallWatch
from engine.rundir import notice_for as engine_notice_for

__all__ = ["Notice", "Notifier", "NotifySettings", "StallWatch", "escape_sequences", "notice_for"]


@dataclass(frozen=True)
class NotifySettings:
    desktop: bool = True  # OSC 9 / 777 notifications (on by default)
    bell: bool = False  # the terminal bell too (off by default)


def notice_for(event: Event, preset: str) -> Notice | None:
    """The engine's rule for what deserves a notice (the run finished or failed, a fault paused
    it, ...), its alert messages with the app's keys for the advice they give."""
    return engine_notice_for(event, preset, with_keys)


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
