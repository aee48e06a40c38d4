"""The live run's training time at each step, for the loss panel's time axis: no Textual.

`TrainingClock` knows the training time exactly at some steps (anchors: RunStarted's start_step
and train_time_s; every Eval's step and train_time_s) and counts on from there with each step's
`step_time_s`: a step's time is the newest known point's plus the steps since times its step
time (a replay's thinned steps count their gaps). Steps given without a step time have none.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from cockpit.figures.series import BoundedSeries


class TrainingClock:
    """Training time (s) by step: exact anchors, sorted, and every timed step's estimate."""

    def __init__(self) -> None:
        self._anchors: list[tuple[int, float]] = [(0, 0.0)]  # a run starts at 0 s
        self._last_timed: tuple[int, float] | None = None
        self.step_times = BoundedSeries()  # x: step, y: training time (s)

    def set_anchor(self, step: int, train_time_s: float) -> None:
        """The training time at `step`, known exactly: steps after it count from it."""
        if not math.isfinite(train_time_s):
            return
        at = bisect.bisect_left(self._anchors, (step, -math.inf))
        if at < len(self._anchors) and self._anchors[at][0] == step:
            self._anchors[at] = (step, train_time_s)
        else:
            self._anchors.insert(at, (step, train_time_s))

    def step(self, step: int, step_time_s: float | None) -> float | None:
        """The training time at `step` (recorded): from the newest exact anchor at or before it,
        or from the step before it where that is newer, plus the steps between times
        `step_time_s`. None without a usable step time."""
        if step_time_s is None or not math.isfinite(step_time_s) or step_time_s < 0:
            return None
        at = bisect.bisect_right(self._anchors, (step, math.inf)) - 1
        base_step, base_s = self._anchors[max(at, 0)]
        last = self._last_timed
        # an exact anchor at the step before wins over that step's estimate
        forward = last is not None and base_step < last[0] < step
        if forward and last is not None:
            base_step, base_s = last
        train_s = max(0.0, base_s + (step - base_step) * step_time_s)
        if forward and last is not None:
            train_s = max(train_s, last[1])  # the clock never runs back while steps go on
        self._last_timed = (step, train_s)
        self.step_times.append(step, train_s)
        return train_s

    def drop_from(self, step: int) -> None:
        """Forget what is known from `step` on (a rollback retrains from before it): the
        anchors and timed steps there, so the retrained steps count from what came before."""
        self._anchors = [a for a in self._anchors if a[0] < step] or [(0, 0.0)]
        self.step_times.drop_from(step)
        last = self.step_times.last
        self._last_timed = None if last is None else (int(last[0]), last[1])

    def trained_s(self) -> float | None:
        """The run's training time now, the one figure the status line shows live and in a
        finished run's view alike (as `cockpit runs` does from the same records): exact at an
        anchor at or after the newest timed step (a state: paused, saved, ended), else the
        newest timed step's. None before the run has started (no anchor but the 0 s one)."""
        anchor_step, anchor_s = self._anchors[-1]
        last = self.step_times.last
        if last is not None and last[0] > anchor_step:
            return last[1]
        if last is None and len(self._anchors) == 1:
            return None
        return anchor_s

    def time_at(self, step: float) -> float | None:
        """The training time at `step`, between the timed steps (None before any)."""
        if not self.step_times:
            return None
        return float(np.interp(step, self.step_times.xs, self.step_times.ys))

    def seconds_per_step(self) -> float | None:
        """The mean training time a step over the timed steps (None under two of them, or
        none between); 0.0 stays 0.0."""
        if len(self.step_times) < 2:
            return None
        steps, times = self.step_times.xs, self.step_times.ys
        if steps[-1] <= steps[0]:
            return None
        return float((times[-1] - times[0]) / (steps[-1] - steps[0]))
