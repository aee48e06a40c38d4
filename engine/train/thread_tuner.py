"""Threads chosen by measurement: on CPU with `train.threads = 0`, the count the steps are fastest at.

A thread per core trains 1.4-1.9x faster on an idle machine and several times slower as soon as
something else wants a core (bench/threads.py), so no count chosen once is right: the run times a
few steps at each candidate count (they train as any other: nothing is thrown away), keeps the
fastest (`keep_threads`), and measures again when the steps change size (a sequence-length or
batch schedule: the best count for 256 tokens a step is not the best for 1,024; unless the count
is already the most there is and the steps grew, or the fewest and they shrank), when the time
per token drifts (a job started or ended; less often while the count stays the same) and every
few minutes. Between two measurements a step costs an append and, every RECENT steps, the median
of RECENT numbers. Off on a GPU, with `train.threads = N`, with OMP_NUM_THREADS, and under
torchrun (each rank keeps the static default: ranks measuring apart would time each other).
`step_done` must be called on the thread that trains: torch's count is set on the calling thread.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from engine.train.threads import auto_threads, chosen_threads, usable_cores

WARMUP_STEPS = 1  # the first step at a new count is not timed (its threads start, caches fill)
START_WARMUP_STEPS = 2  # a run's first steps are slower still (allocations): not timed either
TIMED_STEPS = 3  # steps timed at each count; their median is its step time
GIVE_UP = 2.0  # a timed step this many times the fastest count's: that count is done (slower)
WARMUP_GIVE_UP = 4.0  # the same for its untimed first step, which may be slower by itself
MARGIN = 0.10  # another count replaces the one in use only when this much faster (noise)
DRIFT = 0.25  # the recent median this far from the one measured at the choice: measure again
RECENT = 8  # steps in that median, taken every RECENT steps
INTERVAL_S = 300.0  # measure again this often even when nothing drifted
# After a measurement that kept the count, a drift is measured again only this long after it,
# doubled each time the count is kept again (up to INTERVAL_S): a load that keeps moving does not
# buy a measurement every few steps. A measurement that changed the count starts over at none.
DRIFT_WAIT_S = 30.0
RESIZE = 1.5  # steps this many times bigger (or smaller) than at the choice: measure again
MAX_CANDIDATES = 4  # every count up to this many cores; past it, this many of them


def keep_threads(step_times: Mapping[int, float], current: int, margin: float = MARGIN) -> int:
    """The count to keep, given each measured count's step time: the fastest (fewer threads on a
    tie), unless `current` was measured and is within `margin` of it: noise must not flip it."""
    fastest = min(step_times, key=lambda n: (step_times[n], n))
    if current in step_times and step_times[current] <= step_times[fastest] * (1 + margin):
        return current
    return fastest


def candidate_counts(cores: int) -> tuple[int, ...]:
    """The counts measured on `cores` cores: each of 1..cores on a few cores, else a spread
    (a quarter, a half, all but one, all): each try trains slower steps, so few of them."""
    if cores <= MAX_CANDIDATES:
        return tuple(range(1, cores + 1))
    return tuple(sorted({max(1, cores // 4), cores // 2, cores - 1, cores}))


@dataclass(frozen=True)
class ThreadChoice:
    """A measurement's outcome: the count kept, each count's median step time, and why it was
    measured (the first steps, a drift, the interval)."""

    threads: int
    previous: int  # the count in use before
    step_times_s: dict[int, float]
    reason: str


class ThreadTuner:
    """The measurement's state machine (see the module), fed each training step's wall time.

    Measuring: WARMUP_STEPS untimed then TIMED_STEPS timed steps at each count (fewer where one
    takes GIVE_UP times the fastest count's, or its first step WARMUP_GIVE_UP times), the count in
    use first (no warm-up: its threads are running; but a run's first START_WARMUP_STEPS are not
    timed). Then settled on `keep_threads`'s choice, watching the median of the last RECENT steps.
    `set_threads` and `clock` are torch's and time.monotonic, injectable for tests."""

    def __init__(
        self,
        counts: tuple[int, ...],
        start: int,
        on_choice: Callable[[ThreadChoice], None],
        *,
        set_threads: Callable[[int], None] = torch.set_num_threads,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.counts = counts
        self.threads = start  # the count in use
        self._on_choice, self._set_threads, self._clock = on_choice, set_threads, clock
        self._recent: deque[float] = deque(maxlen=RECENT)
        self._reference = 0.0  # the chosen count's step time, measured at the choice
        self._size = 0  # tokens a step the times are scaled to (0: not told; times as they are)
        self._measured_at = clock()
        self._drift_wait = 0.0  # see DRIFT_WAIT_S
        self._queue: list[int] = []  # counts still to measure, the one being measured first
        self._results: dict[int, float] = {}
        self._timed: list[float] = []
        self._skip = 0
        self._previous = start
        self._reason = ""
        self._measure("the first steps", warm=False)

    @property
    def measuring(self) -> bool:
        return bool(self._queue)

    def step_done(self, seconds: float, tokens: int = 0) -> None:
        """One training step of `tokens` tokens (0: not told) took `seconds` (wall time, on the
        training thread). Times are compared per token: a step twice the size is not a drift."""
        if tokens:
            if not self._size:  # the measurement's first step sets the size times are scaled to
                self._size = tokens
            elif not self._queue and max(tokens, self._size) >= RESIZE * min(tokens, self._size):
                if self._resize_can_change_the_count(grew=tokens > self._size):
                    self._measure(f"the steps went from {self._size:,} to {tokens:,} tokens")
                else:  # the count stays; its time at the new size is the next reference
                    self._reference = 0.0
                    self._recent.clear()
                self._size = tokens
            seconds *= self._size / tokens
        if self._queue:
            self._measuring_step(seconds)
            return
        recent = self._recent
        recent.append(seconds)
        if len(recent) < RECENT:
            return
        median = statistics.median(recent)
        recent.clear()  # the next look is RECENT steps away: O(1) a step
        if not self._reference:
            self._reference = median
            return
        since = self._clock() - self._measured_at
        if abs(median / max(self._reference, 1e-9) - 1) > DRIFT and since >= self._drift_wait:
            self._measure(
                f"the step time went from {self._reference * 1e3:.0f} ms to {median * 1e3:.0f} ms"
            )
        elif since >= INTERVAL_S:
            self._measure(f"{INTERVAL_S / 60:.0f} minutes since the last measurement")

    def _resize_can_change_the_count(self, grew: bool) -> bool:
        """Bigger steps divide among threads at least as well, smaller ones at most as well: a
        run already at the most threads whose steps grew (or at the fewest, whose steps shrank)
        would only train a few steps at slower counts to see them lose again."""
        return self.threads != (max(self.counts) if grew else min(self.counts))

    def _measure(self, reason: str, warm: bool = True) -> None:
        self._reason, self._previous, self._results = reason, self.threads, {}
        self._size = 0  # set by the next step told its size
        # the count in use first: no switch, so its first step is a fair one (once warm)
        self._queue = [self.threads, *(n for n in self.counts if n != self.threads)]
        self._timed, self._skip = [], 0 if warm else START_WARMUP_STEPS

    def _measuring_step(self, seconds: float) -> None:
        # a count that collapsed (under load a thread per core can be 100x slower) is not
        # given more steps than it takes to see that it is slower
        best = min(self._results.values(), default=math.inf)
        if self._skip:
            self._skip -= 1
            if seconds < WARMUP_GIVE_UP * best:
                return
            self._skip = 0
        self._timed.append(seconds)
        if len(self._timed) < TIMED_STEPS and seconds < GIVE_UP * best:
            return
        self._results[self._queue.pop(0)] = statistics.median(self._timed)
        self._timed = []
        if self._queue:
            self._switch(self._queue[0])
            self._skip = WARMUP_STEPS
            return
        chosen = keep_threads(self._results, self._previous)
        kept = DRIFT_WAIT_S if self._drift_wait == 0 else 2 * self._drift_wait
        self._drift_wait = 0.0 if chosen != self._previous else min(INTERVAL_S, kept)
        self._switch(chosen)
        self._reference = self._results[chosen]
        self._measured_at = self._clock()
        self._recent.clear()
        self._on_choice(ThreadChoice(chosen, self._previous, dict(self._results), self._reason))

    def _switch(self, threads: int) -> None:
        if threads != self.threads:
            self._set_threads(threads)
            self.threads = threads


class FixedThreads:
    """The thread count of a run that does not measure it (see `thread_tuner`): kept as set."""

    def step_done(self, seconds: float, tokens: int = 0) -> None:
        """A step's time changes nothing here."""


def thread_tuner(
    setting: int,
    device_type: str,
    distributed: bool,
    on_choice: Callable[[ThreadChoice], None],
) -> ThreadTuner | FixedThreads:
    """The tuner of a run with `train.threads = setting` on `device_type`, or FixedThreads where
    the count is not measured (see the module). Built where the count was set (`apply_threads`):
    it starts from the count in use."""
    if distributed or chosen_threads(setting, device_type) is None or setting > 0:
        return FixedThreads()
    cores = usable_cores()
    counts = candidate_counts(cores)
    if len(counts) < 2:
        return FixedThreads()  # one core: nothing to choose
    return ThreadTuner(counts, auto_threads(cores), on_choice)
