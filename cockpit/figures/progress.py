"""Step rate and ETA of a run, from event timestamps only (never the wall clock). The run's
training time is the training clock's: the status line shows that, not wall time."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from engine.data import tokens_through


class ProgressTracker:
    """Step rate and ETA from event timestamps only (never the wall clock): the rate is
    measured over the last `window` Step events, and forgotten after a pause so the gap does
    not count as slowness."""

    def __init__(self, window: int = 50) -> None:
        self.start_time: float | None = None
        self.last_time: float | None = None
        self._points: deque[tuple[float, int]] = deque(maxlen=window)
        # a batch-size schedule's steps grow: the ETA weighs each step by its tokens
        self.tokens_schedule: tuple[tuple[int, int], ...] = ()

    def start(self, t: float) -> None:
        self.start_time = t
        self.last_time = t
        self._points.clear()

    def observe(self, t: float) -> None:
        if self.start_time is None:
            self.start_time = t
        if self.last_time is None or t > self.last_time:
            self.last_time = t

    def add_step(self, t: float, step: int) -> None:
        self.observe(t)
        if self._points and step <= self._points[-1][1]:
            self._points.clear()  # resumed from an earlier step
        self._points.append((t, step))

    def forget_rate(self) -> None:
        """After a pause: measure the rate afresh from the next steps (the gap is not slowness)."""
        self._points.clear()

    @property
    def rate(self) -> float | None:
        """Steps per second over the window, or None with too little data."""
        if len(self._points) < 2:
            return None
        (t0, s0), (t1, s1) = self._points[0], self._points[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)

    def eta(self, step: int, max_steps: int) -> float | None:
        rate = self.rate
        if rate is None or rate <= 0:
            return None
        if self.tokens_schedule:
            # the steps ahead at the token rate of the window's steps, not at their step rate
            (t0, s0), (t1, s1) = self._points[0], self._points[-1]
            schedule = self.tokens_schedule
            done = tokens_through(schedule, s1) - tokens_through(schedule, s0)
            if done > 0:
                ahead = tokens_through(schedule, max_steps) - tokens_through(schedule, step)
                return max(0, ahead) * (t1 - t0) / done
        return max(0, max_steps - step) / rate


def size_at(schedule: Sequence[tuple[int, int]], step: int) -> int:
    """The tokens step `step` (the steps done before it) trains under a tokens schedule, 0
    before its first entry."""
    sizes = [tokens for start, tokens in schedule if start <= step]
    return sizes[-1] if sizes else 0


def scaled_from(
    schedule: Sequence[tuple[int, int]], step: int, old: int, new: int
) -> tuple[tuple[int, int], ...]:
    """A tokens schedule once the full size went from `old` to `new` tokens a step before step
    `step` (a live train.grad_accum: every step's size from then on scales by new / old)."""
    now = size_at(schedule, step) * new // old
    before = [(start, tokens) for start, tokens in schedule if start < step]
    after = [(start, tokens * new // old) for start, tokens in schedule if start > step]
    return tuple([*before, *([(step, now)] if now else []), *after])
