"""How often the UI thread may redraw, so that drawing stays within a share of one core.

The UI thread shares the GIL with training: `RedrawGovernor` paces one expensive widget by its
measured drawing time, `LoadGovernor` slows every periodic redraw when the UI thread as a whole
uses more CPU than its target. Time is passed in, so both stay pure and testable.
"""

from __future__ import annotations


class RedrawGovernor:
    """How long an expensive widget waits between redraws.

    It measures the drawing time and keeps `draw time / interval` under `budget` (a fraction of
    one core), never redrawing more often than `min_interval` nor less often than
    `max_interval` seconds. Time is passed in, so this stays pure and testable.
    """

    def __init__(
        self, min_interval: float = 1.0, max_interval: float = 10.0, budget: float = 0.02
    ) -> None:
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.budget = budget
        self._avg_cost = 0.0
        self._last_draw: float | None = None

    @property
    def interval(self) -> float:
        want = self._avg_cost / self.budget if self.budget > 0 else self.min_interval
        return max(self.min_interval, min(self.max_interval, want))

    def due(self, now: float) -> bool:
        return self._last_draw is None or now - self._last_draw >= self.interval

    def record(self, now: float, cost_s: float) -> None:
        """A redraw happened at `now` and took `cost_s` seconds."""
        self._last_draw = now
        a = 0.3
        self._avg_cost = cost_s if self._avg_cost == 0.0 else (1 - a) * self._avg_cost + a * cost_s


class LoadGovernor:
    """Keeps the UI thread's CPU share near `target` by slowing every periodic redraw: every
    `window` seconds `factor` (1 to max_factor, the redraw intervals' multiplier) goes up 1.5x
    when over target, down 1.25x when under half of it. Fed `time.thread_time()` of the UI
    thread, it counts Textual's own rendering too."""

    def __init__(self, target: float = 0.02, window: float = 5.0, max_factor: float = 8.0) -> None:
        self.target = target
        self.window = window
        self.max_factor = max_factor
        self.factor = 1.0
        self.share: float | None = None
        self._start: tuple[float, float] | None = None

    def sample(self, wall: float, cpu: float) -> float:
        """Record a reading; returns the current factor."""
        if self._start is None:
            self._start = (wall, cpu)
            return self.factor
        w0, c0 = self._start
        if wall - w0 < self.window:
            return self.factor
        self.share = (cpu - c0) / (wall - w0)
        self._start = (wall, cpu)
        if self.share > self.target:
            self.factor = min(self.max_factor, self.factor * 1.5)
        elif self.share < self.target / 2:
            self.factor = max(1.0, self.factor / 1.25)
        return self.factor
