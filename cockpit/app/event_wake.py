"""Waking the app's drain when the run's events arrive, rather than polling the queue faster.

A daemon thread waits on the engine handle (`wait_for_events`) and moves what arrived into the
`EventInbox`; what a person waits to see (an acknowledgement, an alert, a state) asks for a drain
at once, the routine readings wait for the screen's tick (about 4 Hz). An idle run costs nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from engine.contract import EngineHandle
from engine.events import DataProgress, Event, MemoryBreakdown, RankReport, Step, Telemetry

# Readings that come all the time and are drawn at the next tick; every other event asks for a
# drain at once.
ROUTINE_EVENTS = (Step, Telemetry, MemoryBreakdown, RankReport, DataProgress)
THREAD_NAME = "event-wake"  # the waking thread's name (the overhead bench reads its CPU clock)
WAIT_S = 0.5  # the longest wait on one handle: then the thread looks for a new run, or stops
# Events are moved at most this often (a burst of steps is one batch): an acknowledgement that
# follows a step's event by microseconds, as a pause at the step boundary does, waits this long.
COALESCE_S = 0.02
FAILED_WAIT_S = 0.25  # a handle whose wait fails is drained on this period instead
INBOX_LIMIT = 20_000  # past this the events stay in the handle's bounded queue (which counts drops)


class EventInbox:
    """The run's events between its engine handle and the screen, oldest first (thread-safe).

    The waking thread moves them in (`pull`); the UI thread takes them (`take`, which drains the
    handle too), both under one lock. The events of a handle the app switched away from are dropped.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handle: EngineHandle | None = None
        self._events: list[Event] = []

    def pull(self, handle: EngineHandle) -> list[Event]:
        """Move `handle`'s events in; returns those moved (none while the inbox is full)."""
        with self._lock:
            return self._pull(handle)

    def take(self, handle: EngineHandle | None) -> list[Event]:
        """Everything waiting for `handle`: what was moved in, then what its queue holds now."""
        with self._lock:
            if handle is None:
                self._handle, self._events = None, []
                return []
            self._pull(handle)
            events, self._events = self._events, []
            return events

    def _pull(self, handle: EngineHandle) -> list[Event]:
        if handle is not self._handle:
            self._handle, self._events = handle, []
        if len(self._events) >= INBOX_LIMIT:
            return []
        arrived = handle.drain_events()
        self._events.extend(arrived)
        return arrived

    def __len__(self) -> int:
        return len(self._events)


class EventWake:
    """The waking thread of one app and the inbox it fills (see the module). `ask_drain` is
    called on that thread; `stop()` ends it at its next look (within WAIT_S)."""

    def __init__(
        self, handle_now: Callable[[], EngineHandle | None], ask_drain: Callable[[], None]
    ) -> None:
        self.inbox = EventInbox()
        self._handle_now, self._ask_drain = handle_now, ask_drain
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=wake_on_events,
                args=(self._handle_now, self.inbox, self._ask_drain, self._stop),
                name=THREAD_NAME,
                daemon=True,
            )
            self._thread.start()

    def stop(self, join_s: float = 0.0) -> bool:
        """Stop the thread (waiting up to `join_s` for it to end); True once it has ended."""
        self._stop.set()
        if self._thread is not None and join_s > 0:
            self._thread.join(join_s)
        return self._thread is None or not self._thread.is_alive()


def wake_on_events(
    handle_now: Callable[[], EngineHandle | None],
    inbox: EventInbox,
    ask_drain: Callable[[], None],
    stop: threading.Event,
) -> None:
    """Until `stop` is set: wait on the handle `handle_now()` returns (the app's run of the
    moment), move what arrives into `inbox`, and call `ask_drain()` (from this thread) when any
    of it is not routine (see the module)."""
    while not stop.is_set():
        handle = handle_now()
        began = time.monotonic()
        try:
            arrived = handle is not None and handle.wait_for_events(WAIT_S)
            if arrived and handle is not None:
                moved = inbox.pull(handle)
                if any(not isinstance(ev, ROUTINE_EVENTS) for ev in moved):
                    ask_drain()
        except Exception:  # noqa: BLE001 - the waking thread: a handle that cannot wait is drained on a timer
            ask_drain()
            stop.wait(FAILED_WAIT_S)
            continue
        if arrived:
            stop.wait(COALESCE_S)
        else:  # nothing came (no run yet, or a handle that returned at once): never spin
            stop.wait(max(0.0, WAIT_S - (time.monotonic() - began)))
