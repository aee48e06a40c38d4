"""The throughput window: tokens/s and step time over the steps read back together.

The trainer reads losses back only every few steps; the steps in between form a window whose
wall time, less what was not training (evaluations, samples, pauses, commands), gives the
throughput and step time of every Step event read back at its end. Kept apart so that the
arithmetic can be tested with a fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class ThroughputWindow:
    """Wall time since the window started, minus the time excluded from it."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.restart()

    def restart(self) -> None:
        """Start a new, empty window now."""
        self._start = self._clock()
        self._excluded = 0.0

    def exclude(self, since: float, has_steps: bool) -> None:
        """Leave the time from `since` to now out of the window; with no step in the window
        yet (`has_steps` False), the window simply starts now."""
        if has_steps:
            self._excluded += self._clock() - since
        else:
            self.restart()

    def rates(self, steps: int, tokens_per_step: int) -> tuple[float, float]:
        """(tokens per second, seconds per step) for `steps` steps trained in the window."""
        window = max(self._clock() - self._start - self._excluded, 1e-9)
        return steps * tokens_per_step / window, window / steps
