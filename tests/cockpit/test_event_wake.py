"""Acknowledged at once: the app's drain is woken by the events, not by a fast timer.

The parts alone first (the inbox, the waking loop against the scripted engine and a finished
run's view, both real EngineHandles), then the app: a pause is drawn with the feed's tick
stopped (so only the wake can have drawn it), an idle run is not drained at all, and a burst of
steps is drained by the tick in batches, not once per step.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pilot import run_pilot, scripted_app, settle, wait_for
from run_dirs import write_run
from scripted import T0, ScriptedTrainer, step_event
from textual.pilot import Pilot

import cockpit.app.event_feed as event_feed
from cockpit.app.event_feed import COALESCE_S, WAIT_S, EventInbox, EventWake
from engine.events import Alert, StateChanged
from engine.rundir.recorded import RecordedRun

LONG_S = 5.0


def steps(first: int, count: int) -> list[Any]:
    return [step_event(s, 2.0, 1e-3, 0.5, T0 + s) for s in range(first, first + count)]


class CountingDrains:
    """Wraps a handle's drain_events: how often it was called."""

    def __init__(self, handle: Any) -> None:
        self.calls = 0
        drain = handle.drain_events

        def counted() -> list[Any]:
            self.calls += 1
            return drain()

        handle.drain_events = counted


# the inbox ----------------------------------------------------------------------------------------
def test_the_inbox_hands_over_in_order_what_was_moved_in_and_what_came_since() -> None:
    handle, inbox = ScriptedTrainer(), EventInbox()
    first, second = steps(1, 2), steps(3, 2)
    for ev in first:
        handle._emit(ev)
    assert inbox.pull(handle) == first and len(inbox) == 2
    for ev in second:
        handle._emit(ev)
    assert inbox.take(handle) == first + second  # the handle drained too: nothing is missed
    assert len(inbox) == 0 and inbox.take(handle) == []


def test_the_inbox_drops_the_events_of_a_handle_the_app_let_go() -> None:
    old, new, inbox = ScriptedTrainer(), ScriptedTrainer(), EventInbox()
    old._emit(steps(1, 1)[0])
    inbox.pull(old)
    new._emit(steps(7, 1)[0])
    assert [e.step for e in inbox.take(new)] == [7]
    old._emit(steps(2, 1)[0])
    inbox.pull(old)
    assert inbox.take(None) == [] and len(inbox) == 0


# the waking loop, alone -----------------------------------------------------------------------------
class Waking:
    """An EventWake against `handle`, running; counts the drains it asks for."""

    def __init__(self, handle: Any) -> None:
        self.asked: list[float] = []  # time.monotonic() of each drain asked for
        self.wake = EventWake(lambda: handle, lambda: self.asked.append(time.monotonic()))
        self.inbox = self.wake.inbox
        self.wake.start()

    def until(self, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + LONG_S
        while not condition():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.002)

    def close(self) -> None:
        assert self.wake.stop(join_s=2 * WAIT_S + 1.0)  # ended at its next look


def test_an_acknowledgement_asks_for_a_drain_at_once_and_steps_wait_for_the_tick() -> None:
    handle = ScriptedTrainer()
    waking = Waking(handle)
    try:
        for ev in steps(1, 3):
            handle._emit(ev)
        waking.until(lambda: len(waking.inbox) == 3)  # moved in, off the UI thread
        time.sleep(3 * COALESCE_S)
        assert waking.asked == []  # routine readings: the tick draws them
        queued = time.monotonic()
        handle.pause()  # the scripted engine acknowledges at once: StateChanged "paused"
        waking.until(lambda: bool(waking.asked))
        assert waking.asked[0] - queued < WAIT_S  # woken by the event, not its wait's end
        assert [e.kind for e in waking.inbox.take(handle)] == ["step"] * 3 + ["state"]
    finally:
        waking.close()


def test_a_burst_of_steps_is_moved_in_a_few_batches_not_one_per_step() -> None:
    handle = ScriptedTrainer()
    drains = CountingDrains(handle)
    waking = Waking(handle)
    try:
        start = time.monotonic()
        for ev in steps(1, 400):
            handle._emit(ev)
            time.sleep(0.0005)  # about 2,000 steps a second, each waking the loop
        waking.until(lambda: len(waking.inbox) == 400)
        elapsed = time.monotonic() - start
        assert drains.calls <= elapsed / COALESCE_S + 2
        assert waking.asked == []
    finally:
        waking.close()


def test_an_idle_run_is_never_drained() -> None:
    handle = ScriptedTrainer()
    drains = CountingDrains(handle)
    waking = Waking(handle)
    try:
        time.sleep(1.0)
        assert drains.calls == 0 and waking.asked == []
    finally:
        waking.close()


def test_a_handle_whose_wait_returns_at_once_does_not_make_it_spin() -> None:
    handle = ScriptedTrainer()
    waits: list[float] = []

    def no_wait(timeout: float) -> bool:
        waits.append(timeout)
        return False

    handle.wait_for_events = no_wait  # type: ignore[method-assign]
    waking = Waking(handle)
    try:
        time.sleep(2 * WAIT_S)
    finally:
        waking.close()
    assert 1 <= len(waits) <= 5  # about one a WAIT_S, not thousands


def test_a_finished_runs_view_wakes_for_its_replay_then_for_each_refusal(tmp_path: Path) -> None:
    run = RecordedRun(write_run(tmp_path, "over"))
    waking = Waking(run)
    try:
        waking.until(lambda: bool(waking.asked))  # its replay: a RunStarted, a final state
        replay = waking.inbox.take(run)
        assert replay and replay[-1].kind == "state"
        asked = len(waking.asked)
        time.sleep(3 * COALESCE_S)
        assert len(waking.asked) == asked and len(waking.inbox) == 0  # nothing more came
        queued = time.monotonic()
        run.pause()  # refused: a finished run has nothing to steer
        waking.until(lambda: len(waking.asked) > asked)
        assert waking.asked[-1] - queued < WAIT_S  # woken by the refusal, not its wait's end
        assert [type(e) for e in waking.inbox.take(run)] == [Alert]
    finally:
        waking.close()


def test_a_finished_runs_view_waits_until_a_refusal(tmp_path: Path) -> None:
    run = RecordedRun(write_run(tmp_path, "over"))
    assert run.wait_for_events(0.01) is True  # its replay waits from the start
    run.drain_events()
    assert run.wait_for_events(0.05) is False
    threading.Timer(0.05, run.pause).start()
    start = time.monotonic()
    assert run.wait_for_events(LONG_S) is True
    assert time.monotonic() - start < LONG_S / 2


def test_the_scripted_engine_wakes_a_wait_at_its_event() -> None:
    handle = ScriptedTrainer()
    assert handle.wait_for_events(0.01) is False
    threading.Timer(0.05, handle.checkpoint).start()
    start = time.monotonic()
    assert handle.wait_for_events(LONG_S) is True
    assert time.monotonic() - start < LONG_S / 2


# the app ----------------------------------------------------------------------------------------------
def test_a_pause_is_drawn_by_the_wake_with_the_feeds_tick_stopped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the 4 Hz tick stopped, only the wake can drain and draw the engine's acknowledgement
    (the app before it drew nothing at all here); measured from the event being queued."""
    monkeypatch.setattr(event_feed, "TICK_S", 3600.0)
    app, factory = scripted_app()
    queued: list[float] = []

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        trainer = factory.trainer
        ack = trainer._ack_state

        def stamped(state: str, reason: str = "") -> None:
            queued.append(time.monotonic())
            ack(state, reason)

        trainer._ack_state = stamped  # type: ignore[method-assign]
        status = app.main_screen.status_line
        assert status.state == "running"
        await pilot.press("space")
        await wait_for(pilot, lambda: status.state == "paused", timeout=LONG_S)
        drawn = time.monotonic()
        assert str(status.badge.render()) == "PAUSED" and status.badge.has_class("-paused")
        assert queued and drawn - queued[0] < 2.0

    run_pilot(app, scenario)


def test_an_idle_app_drains_nothing_but_its_tick_still_runs() -> None:
    app, factory = scripted_app()
    redraws: list[float] = []

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        await pilot.pause(0.3)  # whatever the settle left
        drains = CountingDrains(factory.trainer)
        pumps: list[float] = []
        feed = app.feed
        pump, redraw = feed.pump, feed.redraw_due
        feed.pump = lambda force=False: (pumps.append(time.monotonic()), pump(force))[1]  # type: ignore[method-assign]
        feed.redraw_due = lambda: (redraws.append(time.monotonic()), redraw())[0]  # type: ignore[method-assign]
        await pilot.pause(6 * event_feed.TICK_S)
        assert drains.calls == 0 and pumps == []
        assert len(redraws) >= 3  # the tick ran: it found nothing to drain

    run_pilot(app, scenario)


def test_the_feed_drains_about_four_times_a_second() -> None:
    app, factory = scripted_app()
    drains: list[float] = []

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        feed = app.feed
        pump, redraw = feed.pump, feed.redraw_due
        feed.pump = lambda force=False: (drains.append(time.monotonic()), pump(force))[1]  # type: ignore[method-assign]
        feed.redraw_due = lambda: (drains.append(time.monotonic()), redraw())[0]  # type: ignore[method-assign]
        before = len(drains)
        await asyncio.sleep(event_feed.TICK_S * 6)
        await pilot.pause()
        assert len(drains) - before >= 3

    run_pilot(app, scenario)


def test_a_burst_of_steps_is_drained_by_the_tick_in_batches() -> None:
    app, factory = scripted_app()

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        trainer = factory.trainer
        pumps: list[int] = []
        pump = app.feed.pump
        app.feed.pump = lambda force=False: (pumps.append(n := pump(force)), n)[1]  # type: ignore[method-assign]
        start = time.monotonic()
        burst = steps(301, 200)

        def train() -> None:
            for ev in burst:
                trainer._emit(ev)
                time.sleep(0.002)

        thread = threading.Thread(target=train)
        thread.start()
        await wait_for(pilot, lambda: app.view.step == burst[-1].step, timeout=LONG_S * 2)
        thread.join()
        elapsed = time.monotonic() - start
        assert sum(pumps) == len(burst)
        assert len(pumps) <= elapsed / event_feed.TICK_S + 2  # the tick's pace, not a step's

    run_pilot(app, scenario)


def test_a_command_answered_while_steps_stream_is_drawn_before_the_next_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Steps keep coming (routine: left for the tick, stopped here) and a StateChanged among them
    is drawn at once, with the steps before it."""
    monkeypatch.setattr(event_feed, "TICK_S", 3600.0)
    app, factory = scripted_app()

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        trainer = factory.trainer
        for ev in steps(301, 5):
            trainer._emit(ev)
        await pilot.pause(5 * COALESCE_S)
        assert app.view.step == 300  # no tick: the steps wait
        trainer._emit(StateChanged(state="paused", step=305, reason="user", time=T0 + 400))
        await wait_for(pilot, lambda: app.main_screen.status_line.state == "paused", timeout=LONG_S)
        assert app.view.step == 305

    run_pilot(app, scenario)
