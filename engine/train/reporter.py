"""What a run says: its events, alerts and state changes, to the UI's queue and to the sinks.

Every part of the loop reports through one Reporter instead of through the Trainer. It holds
the run's state, because announcing a state and being in it must not drift apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from engine.events import Alert, Event, EventQueue, RunState, StateChanged
from engine.train.counters import Counters


class Reporter:
    """Events go to `events` (drained by the UI, which `wait_for_events` wakes) and to each of
    `sinks` (the metrics file, the control socket...), read at every emit so a sink appended
    later receives the rest.
    `before_final_state(state)` runs once the run reaches an ended state, before it is
    announced (what closes then reports before the final state, which stays the last record)."""

    def __init__(
        self,
        *,
        events: EventQueue,
        sinks: Sequence[Callable[[Event], None]],
        counters: Counters,
        before_final_state: Callable[[str], None] | None = None,
    ) -> None:
        self.events = events
        self.sinks = sinks
        self.counters = counters
        self.before_final_state = before_final_state
        self.state = RunState.STARTING
        self._queued = threading.Condition()  # notified at every emit: a waiting viewer wakes

    def emit(self, event: Event) -> None:
        """Queue an event for the UI and hand it to the sinks (thread-safe)."""
        self.events.put(event)
        with self._queued:  # a microsecond or two: the loop never waits for the viewer
            self._queued.notify_all()
        for sink in self.sinks:
            sink(event)

    def wait_for_events(self, timeout: float) -> bool:
        """Block until `events` holds something or `timeout` seconds passed; True if it does."""
        with self._queued:
            return self._queued.wait_for(lambda: len(self.events) > 0, timeout)

    def alert(self, level: str, message: str, code: str = "") -> None:
        """One line for a person ("info", "warning", "error"), at the current step."""
        self.emit(Alert(level=level, message=message, step=self.counters.step, code=code))

    def set_state(self, state: str, reason: str = "") -> None:
        """Enter `state` and announce it, with the step and training time it was entered at."""
        self.state = state
        if state in RunState.ENDED and self.before_final_state is not None:
            self.before_final_state(state)
        counters = self.counters
        self.emit(
            StateChanged(
                state=state, step=counters.step, reason=reason, train_time_s=counters.train_time_s
            )
        )
