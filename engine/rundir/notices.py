"""What deserves a notice, decided from a run's events and times (pure, tested alone): the run
finished, failed, reached its eval target, paused or ended on a fault (NaN, loss spike, OOM,
full disk, a rank lost), stalled, or an autopilot or agent acted. The app's terminal
notifications, headless runs and webhooks all say these same things."""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.events import Alert, Event, RunState, StateChanged, Step

STALL_FACTOR = 10.0  # no step for this many times the usual step time: a stall
STALL_MIN_S = 30.0  # ... and never sooner than this (a checkpoint or an eval is no stall)
FAULT_CODES = ("nan", "spike", "oom", "disk", "rank")  # faults that pause or end a run
# every kind of notice, as an endpoint's `events` names them ("fault": any of FAULT_CODES)
KINDS = (RunState.FINISHED, RunState.FAILED, *FAULT_CODES, "stall", "target", "action")
# how a run that finished on train.stop_at_val says why (engine.train.cadence.val_target_note)
_TARGET_WORDS = "reached train.stop_at_val"


def _same(message: str) -> str:
    return message


@dataclass(frozen=True)
class Notice:
    """One notice: its title and body; `kind` (one of KINDS) and `step` are what a webhook's
    JSON also carries and an endpoint filters on."""

    title: str
    body: str
    kind: str = field(default="", compare=False)
    step: int = field(default=0, compare=False)


def notice_for(event: Event, preset: str, words: Callable[[str], str] = _same) -> Notice | None:
    """The notice an event deserves, or None: the run finished (or reached its eval target) or
    failed, or a fault paused it (the fault's alert; the pause that follows says nothing more).
    `words` rewrites an alert's message for where it is shown (the app adds its keys)."""
    if isinstance(event, StateChanged):
        if event.state == RunState.FINISHED and _TARGET_WORDS in event.reason:
            return Notice(
                f"cockpit: {preset} reached its target",
                f"{preset} finished at step {event.step}: {event.reason}",
                "target",
                event.step,
            )
        if event.state == RunState.FINISHED:
            return Notice(
                f"cockpit: {preset} finished",
                f"{preset} finished at step {event.step}",
                RunState.FINISHED,
                event.step,
            )
        if event.state == RunState.FAILED:
            why = f": {event.reason}" if event.reason else ""
            return Notice(
                f"cockpit: {preset} failed",
                f"{preset} failed at step {event.step}{why}",
                RunState.FAILED,
                event.step,
            )
    if isinstance(event, Alert) and event.level == "error" and event.code in FAULT_CODES:
        return Notice(
            f"cockpit: {preset} needs you",
            f"step {event.step}: {words(event.message)}",
            event.code,
            event.step,
        )
    return None


def action_notice(preset: str, step: int, by: str, what: str) -> Notice:
    """The notice for an action taken on the run by an autopilot or an agent (`by` names it):
    what such a part hands to Notifications.notify when it acts."""
    return Notice(f"cockpit: {by} acted on {preset}", f"step {step}: {what}", "action", step)


class StallWatch:
    """No step for `factor` times the usual step time (and at least `min_s`) while the run is
    running: one notice per stall, armed again by the next step."""

    def __init__(self, factor: float = STALL_FACTOR, min_s: float = STALL_MIN_S) -> None:
        self.factor = factor
        self.min_s = min_s
        self._step_times: deque[float] = deque(maxlen=50)
        self._last_step_at: float | None = None
        self._last_step = 0
        self._told = False

    def step(self, event: Step, now: float) -> None:
        if event.step_time_s > 0:
            self._step_times.append(event.step_time_s)
        self._last_step_at = now
        self._last_step = event.step
        self._told = False

    def reset(self, now: float) -> None:
        """Paused, resumed, a new run: the wait starts again from now."""
        self._last_step_at = now
        self._told = False

    def check(self, now: float, state: str, preset: str) -> Notice | None:
        if state != RunState.RUNNING or self._last_step_at is None or self._told:
            return None
        if not self._step_times:
            return None
        usual = statistics.median(self._step_times)
        waited = now - self._last_step_at
        if waited < max(self.min_s, self.factor * usual):
            return None
        self._told = True
        return Notice(
            f"cockpit: {preset} stalled",
            f"no step for {waited:.0f} s (a step usually takes {usual:.2g} s)",
            "stall",
            self._last_step,
        )
