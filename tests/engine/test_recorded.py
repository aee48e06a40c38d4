"""engine/rundir/recorded.py: a finished run as an EngineHandle: its replay drained once, its state at
once, every command answered with a read_only warning; a live run refused."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from live_process import LiveRun
from run_copies import train_here

from engine.contract import EngineHandle
from engine.events import Alert, RunStarted, StateChanged
from engine.rundir.metrics_scan import RunHistoryError
from engine.rundir.recorded import RecordedRun


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    return train_here(tmp_path_factory.mktemp("recorded") / "done", ["train.max_steps=120"], isolated_env)


def test_a_finished_run_is_an_engine_handle_that_replays_once(finished_run: Path) -> None:
    run = RecordedRun(finished_run)
    assert isinstance(run, EngineHandle)
    assert (run.state, run.read_only, run.outlives_viewer, run.dropped_events) == ("finished", True, False, 0)
    assert run.run_dir == finished_run and run.run(lambda: False) == "finished"
    events = run.drain_events()
    first = events[0]
    assert isinstance(first, RunStarted) and first.max_steps == 120
    assert all(e.time < first.time for e in events[1:])  # all of it history to the app
    assert first.time == pytest.approx(max(e.time for e in events[1:]) + 0.001)
    final = events[-1]
    assert isinstance(final, StateChanged) and final.state == "finished" and final.step == 120
    assert [e.kind for e in events].count("step") == 120
    assert run.drain_events() == []


def test_every_command_gets_a_read_only_warning(finished_run: Path) -> None:
    run = RecordedRun(finished_run)
    run.drain_events()
    commands = [run.pause, run.resume, run.checkpoint, run.sample, run.evaluate, run.stop, run.rollback]
    threads = [threading.Thread(target=c) for c in commands]  # commands may come from any thread
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.set_lr(1e-3)
    run.scale_lr(0.5)
    alerts = run.drain_events()
    assert len(alerts) == 9 and run.drain_events() == []
    message = "done is finished: nothing to steer (r resumes it, n starts a new run from its config)"
    for alert in alerts:
        assert isinstance(alert, Alert)
        assert (alert.level, alert.code, alert.message) == ("warning", "read_only", message)
    assert run.state == "finished"


def test_no_run_and_a_live_run_are_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RunHistoryError, match=r"no metrics.jsonl: not a run directory$"):
        RecordedRun(tmp_path / "missing")
    live = LiveRun(tmp_path / "live")
    try:
        live.start()
        with pytest.raises(RunHistoryError) as refused:
            RecordedRun(live.run_dir)
        assert str(refused.value) == f"{live.run_dir} is live: attach to it (cockpit attach {live.run_dir})"
    finally:
        live.close()
    stopped = RecordedRun(live.run_dir)  # SIGTERM: it checkpointed and stopped
    assert stopped.state == "stopped" and stopped.drain_events()[-1].state == "stopped"  # type: ignore[attr-defined]
