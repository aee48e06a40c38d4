"""One viewer of a run's control socket: its connection and its queue (under the server's lock).

A queue that reaches its bound is cleared and the viewer marked for a resync, never waited
for. A viewer that sends and never reads is not read from once REPLY_BACKLOG_BYTES of its
lines wait for replies (`room` is set again when the writer takes them).
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from typing import Any

from engine.events import Event

VIEWER_QUEUE = 10_000  # events a viewer may fall behind by before it is resynchronised
# the lines a viewer sent whose replies it has not taken yet: past this, its reader waits (a
# reply echoes its line's id, so the replies waiting are at most about this size)
REPLY_BACKLOG_BYTES = 1 << 20


class Viewer:
    """One connection: its queue (events and replies), its writer wake-up, its threads."""

    def __init__(self, number: int, conn: socket.socket) -> None:
        self.number = number
        self.conn = conn
        self.queue: deque[Event | dict[str, Any]] = deque()
        self.wake = threading.Event()
        self.resync = False  # set when the queue overflowed: the writer replays afresh
        self.read_only = False
        self.who = ""  # what the viewer says it is (its client hello): "user@host (tty)"
        self.closed = False
        self.warned: set[str] = set()  # kinds of mistake already logged for this viewer
        self.announced = False  # its attach was recorded (at its client hello: probes say none)
        self.writer: threading.Thread | None = None
        self.owed_bytes = 0  # the lines whose replies are queued, not yet taken by the writer
        self.room = threading.Event()  # set while the reader may read on (see module doc)
        self.room.set()

    def push(self, item: Event | dict[str, Any]) -> None:
        """Queue an event or a reply for the writer and wake it."""
        self.queue.append(item)
        self.wake.set()

    def owe(self, line_bytes: int) -> None:
        """A line of `line_bytes` was read, whose reply is about to be queued; the reader waits
        on `room` once the replies queued answer more than REPLY_BACKLOG_BYTES."""
        self.owed_bytes += line_bytes
        if self.owed_bytes > REPLY_BACKLOG_BYTES:
            self.room.clear()

    def offer(self, event: Event, limit: int) -> None:
        """Queue one of the run's events; a viewer `limit` behind gets the replay again instead."""
        if len(self.queue) >= limit:
            self._clear()  # fallen behind: it gets the replay again instead
            self.resync = True
        self.push(event)

    def _clear(self) -> None:
        """Empty the queue (its replies with it): the reader may read on."""
        self.queue.clear()
        self.owed_bytes = 0
        self.room.set()

    def take_resync(self) -> bool:
        """Whether the writer owes a replay now (its queue dropped: the replay covers it)."""
        if not self.resync:
            return False
        self.resync = False
        self._clear()
        return True

    def drain(self) -> list[Event | dict[str, Any]]:
        """Everything queued since the writer last took it, oldest first."""
        items = list(self.queue)
        self._clear()
        return items
