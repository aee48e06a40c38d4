"""`wait_for_events` of the engine's handles: it returns as soon as an event can be drained (well
before its timeout), and waits the timeout out when none can. The in-process run (its Reporter,
and the Trainer that answers for it), and the client of a run's control socket over a real
AF_UNIX socket (the small server of test_remote)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_remote import FakeRun, step

from engine.config.presets import load_preset
from engine.control.client import RemoteEngine
from engine.events import Alert, EventQueue, RunState, StateChanged
from engine.train.counters import Counters
from engine.train.reporter import Reporter
from engine.train.trainer import Trainer

LONG_S = 5.0  # a wait that must end early: it returns long before this


def later(delay_s: float, do: Callable[[], object]) -> threading.Thread:
    """Run `do()` on another thread after `delay_s`."""
    thread = threading.Thread(target=lambda: (time.sleep(delay_s), do()), daemon=True)
    thread.start()
    return thread


def timed_wait(wait: Callable[[float], bool], timeout: float) -> tuple[bool, float]:
    start = time.monotonic()
    got = wait(timeout)
    return got, time.monotonic() - start


def test_the_reporter_wakes_a_waiting_viewer_at_its_emit() -> None:
    queue = EventQueue(100)
    reporter = Reporter(events=queue, sinks=[], counters=Counters(step=3))
    got, waited = timed_wait(reporter.wait_for_events, 0.1)
    assert got is False and waited >= 0.09  # nothing queued: the timeout passes
    later(0.05, lambda: reporter.set_state(RunState.PAUSED, "user"))
    got, waited = timed_wait(reporter.wait_for_events, LONG_S)
    assert got is True and waited < LONG_S / 2
    assert [e.state for e in queue.drain()] == [RunState.PAUSED]
    assert reporter.wait_for_events(0.01) is False  # drained: nothing waits any more


def test_an_event_queued_before_the_wait_returns_at_once() -> None:
    reporter = Reporter(events=EventQueue(100), sinks=[], counters=Counters())
    reporter.alert("info", "already there")
    got, waited = timed_wait(reporter.wait_for_events, LONG_S)
    assert got is True and waited < 0.5


def test_the_trainer_answers_for_its_reporter(tmp_path: Path) -> None:
    trainer = Trainer(load_preset("tiny"), run_dir=tmp_path / "run", telemetry=False)
    assert trainer.wait_for_events(0.01) is False
    later(0.05, lambda: trainer.emit(Alert(level="info", message="hello", step=0)))
    got, waited = timed_wait(trainer.wait_for_events, LONG_S)
    assert got is True and waited < LONG_S / 2
    assert [e.message for e in trainer.drain_events()] == ["hello"]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


def test_the_socket_client_wakes_for_the_replay_then_each_live_event(run_dir: Path) -> None:
    server = FakeRun(run_dir, [step(1), step(2)])
    engine = RemoteEngine(run_dir)
    try:
        got, waited = timed_wait(engine.wait_for_events, LONG_S)
        assert got is True and waited < LONG_S / 2
        assert len(engine.drain_events()) == 2  # the replay, whole
        assert engine.wait_for_events(0.05) is False  # nothing new on the socket
        paused = StateChanged(state="paused", step=2, time=1234.5)
        later(0.05, lambda: server.send(paused.to_record()))
        got, waited = timed_wait(engine.wait_for_events, LONG_S)
        assert got is True and waited < LONG_S / 2  # woken by the reader thread, not a timer
        assert engine.drain_events() == [paused]
    finally:
        engine.close()


def test_the_socket_client_does_not_wake_for_a_replay_still_coming(run_dir: Path) -> None:
    """A replay is handed over whole (here a resync's, after the viewer fell behind): its
    records alone, before the server's "live", are nothing to drain yet."""
    server = FakeRun(run_dir, [])
    engine = RemoteEngine(run_dir)
    try:
        deadline = time.monotonic() + LONG_S
        while not engine.live:
            assert time.monotonic() < deadline, "the first replay never ended"
            time.sleep(0.01)
        server.send({"kind": "resync", "state": RunState.RUNNING}, step(5).to_record())
        assert engine.wait_for_events(0.3) is False
        later(0.05, lambda: server.send({"kind": "live"}))
        got, waited = timed_wait(engine.wait_for_events, LONG_S)
        assert got is True and waited < LONG_S / 2
        assert engine.drain_events() == [step(5)]
    finally:
        engine.close()


def test_the_socket_client_wakes_when_the_run_is_gone(run_dir: Path) -> None:
    server = FakeRun(run_dir, [])
    engine = RemoteEngine(run_dir)
    try:
        assert engine.wait_for_events(0.05) is False
        later(0.05, server.die)
        got, waited = timed_wait(engine.wait_for_events, LONG_S)
        assert got is True and waited < LONG_S / 2
        time.sleep(0.1)  # the reader queues an Alert, then the final StateChanged
        kinds = [e.kind for e in engine.drain_events()]
        assert "alert" in kinds and kinds[-1] == "state"
    finally:
        engine.close()

