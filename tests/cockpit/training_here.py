"""Pilot's key presses for the app tests whose engine trains in the test's own process.

After each key Textual's Pilot waits, twice, until the process goes idle (its CPU clock stops
moving), for at most 1 s; so does `pilot.pause()` without a delay. A process training the engine
in a thread is never idle: every key cost 2 s of waiting, the engine training all along. Here the
wait is capped at IDLE_WAIT_S (it still returns as soon as the process is idle, as a paused run
makes it): Pilot's own wait for the screen's pending messages still follows each key, and what a
test needs after a key (the engine's answer, a dialog) it waits for by name.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import textual.app
import textual.pilot

IDLE_WAIT_S = 0.25
wait_for_idle = textual.pilot.wait_for_idle  # Textual's, which both modules call


async def _capped_wait_for_idle(min_sleep: float = 1 / 50, max_sleep: float = 1) -> None:
    await wait_for_idle(min_sleep, min(max_sleep, IDLE_WAIT_S))


@contextmanager
def keys_while_training() -> Iterator[None]:
    """Within it, Pilot's idle waits last at most IDLE_WAIT_S."""
    with pytest.MonkeyPatch.context() as patch:
        for module in (textual.app, textual.pilot):
            patch.setattr(module, "wait_for_idle", _capped_wait_for_idle)
        yield
