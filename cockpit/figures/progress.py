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
        # a batch-size schedule's steps grow: the ETA models a step's time from its tokens
        self.tokens_schedule: tuple[tuple[int, int], ...] = ()
        # seconds of each step measured alone, by its tokens (the latest few of each size)
        self._step_times: dict[int, deque[float]] = {}

    def start(self, t: float) -> None:
        self.start_time = t
        self.last_time = t
        self._points.clear()
        self._step_times.clear()

    def observe(self, t: float) -> None:
        if self.start_time is None:
            self.start_time = t
        if self.last_time is None or t > self.last_time:
            self.last_time = t

    def add_step(self, t: float, step: int) -> None:
        self.observe(t)
        if self._points and step <= self._points[-1][1]:
            self._points.clear()  # resumed from an earlier step
            self._step_times.clear()
        if self._points and self.tokens_schedule and step == self._points[-1][1] + 1:
            size = tokens_through(self.tokens_schedule, step) - tokens_through(self.tokens_schedule, step - 1)
            self._step_times.setdefault(size, deque(maxlen=20)).append(t - self._points[-1][0])
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
            return schedule_eta(self.tokens_schedule, self._step_times, step, max_steps)
        return max(0, max_steps - step) / rate


def schedule_eta(
    schedule: Sequence[tuple[int, int]],
    step_times: dict[int, Sequence[float]],
    step: int,
    max_steps: int,
) -> float | None:
    """Seconds left for the steps `step`..`max_steps` of a tokens schedule, from the step times
    measured so far by size (tokens a step -> seconds of steps of that size).

    A step's time is not proportional to its tokens (a small model's steps have a fixed cost
    too), so it is modelled as a + b x tokens, fitted to the median time of each size seen; the
    steps ahead of sizes already measured take their own median. None while the steps ahead
    include a size not measured and fewer than two sizes are: no honest estimate yet."""
    measured = {size: sorted(times)[len(times) // 2] for size, times in step_times.items() if times}
    ahead: dict[int, int] = {}  # tokens a step -> steps of that size ahead
    for i, (start, tokens) in enumerate(schedule):
        end = schedule[i + 1][0] if i + 1 < len(schedule) else max_steps
        count = min(end, max_steps) - max(start, step)
        if count > 0:
            ahead[tokens] = ahead.get(tokens, 0) + count
    if not ahead:
        return 0.0
    unknown = [size for size in ahead if size not in measured]
    if not unknown:
        return sum(measured[size] * count for size, count in ahead.items())
    fit = step_time_fit(measured)
    if fit is None:
        return None
    a, b = fit
    return sum((measured[size] if size in measured else a + b * size) * count for size, count in ahead.items())


def step_time_fit(measured: dict[int, float]) -> tuple[float, float] | None:
    """(a, b) of seconds = a + b x tokens, least squares over the sizes measured, neither
    negative; None with fewer than two sizes."""
    if len(measured) < 2:
        return None
    xs, ys = list(measured), list(measured.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    if b < 0:  # bigger steps measured faster (noise): a fixed cost only
        return my, 0.0
    if a < 0:  # proportional through the origin
        return 0.0, sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return a, b


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
