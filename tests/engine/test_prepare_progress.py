"""The corpus preparation as a phase of the run: its progress reaches the UI queue and the sinks,
the metrics file keeps only its final record, and a stop during it ends the run at once with
nothing on disk.

The preparation is a fake slow one (the seam: `engine.train.setup.prepare`) that emits progress
events as the streaming prepare does, honours `should_stop`, then hands over to the real one.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from slow_prepare import slow_prepare
from tiny import tiny_overrides

import engine.data.preparation
import engine.train.setup
from engine.config.presets import load_preset
from engine.events import Event, RunState
from engine.train.trainer import Trainer

TINY = tiny_overrides(quiet=True)
TOTAL = 1_000_000  # the fake corpus's size in bytes


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: str) -> list[Any]:
        return [e for e in list(self.events) if e.kind == kind]


def trainer(tmp_path: Path, *extra: str, sinks: list[Any] = ()) -> Trainer:
    cfg = load_preset("tiny", [*TINY, *extra])
    return Trainer(cfg, run_dir=tmp_path / "run", sinks=sinks, telemetry=False)


def test_progress_reaches_the_queue_and_sinks_and_the_file_keeps_the_final_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine.train.setup, "prepare", slow_prepare(chunks=5, delay_s=0.0))
    sink = Recorder()
    run = trainer(tmp_path, "train.max_steps=3", sinks=[sink])
    assert run.run() == RunState.FINISHED

    seen = sink.of("data_progress")
    assert [e.done for e in seen] == [False] * 5 + [True]
    assert [e.bytes_read for e in seen] == [i * TOTAL // 5 for i in range(6)]
    queued = [e for e in run.drain_events() if e.kind == "data_progress"]
    assert len(queued) == 6
    # before the run started: the preparation is the run's first phase
    kinds = [e.kind for e in sink.events]
    assert kinds.index("data_progress") < kinds.index("run_started")

    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    progress = [r for r in records if r["kind"] == "data_progress"]
    assert len(progress) == 1 and progress[0]["done"] is True
    assert progress[0]["bytes_read"] == TOTAL
    assert Event.from_record(progress[0]) == seen[-1]


def run_in_thread(run: Trainer, should_stop: Any = None) -> tuple[threading.Thread, list[str]]:
    result: list[str] = []
    thread = threading.Thread(target=lambda: result.append(run.run(should_stop)), daemon=True)
    thread.start()
    return thread, result


def wait_for_progress(sink: Recorder, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not sink.of("data_progress"):
        assert time.monotonic() < deadline, "no progress event"
        time.sleep(0.01)


@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_stop_during_preparation_ends_the_run_stopped_at_once_with_nothing_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine.train.setup, "prepare", slow_prepare(chunks=100_000))
    sink = Recorder()
    run = trainer(tmp_path, "train.max_steps=3", sinks=[sink])
    thread, result = run_in_thread(run)
    wait_for_progress(sink)

    asked = time.monotonic()
    run.stop(checkpoint=True, reason="SIGTERM")
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert time.monotonic() - asked < 1.0
    assert result == [RunState.STOPPED] and run.state == RunState.STOPPED
    final = sink.of("state")[-1]
    assert final.state == RunState.STOPPED
    assert final.reason == "SIGTERM while preparing the corpus"
    assert not any(e.kind == "alert" and e.level == "error" for e in sink.events)
    assert not (tmp_path / "run").exists()  # no run directory, no metrics file, no checkpoint


def test_the_app_closing_during_preparation_stops_it_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine.train.setup, "prepare", slow_prepare(chunks=100_000))
    sink = Recorder()
    closing = threading.Event()
    run = trainer(tmp_path, "train.max_steps=3", sinks=[sink])
    thread, result = run_in_thread(run, should_stop=closing.is_set)
    wait_for_progress(sink)
    closing.set()  # the worker was cancelled: the app is quitting
    thread.join(timeout=5)
    assert result == [RunState.STOPPED]
    assert sink.of("state")[-1].reason == "quit while preparing the corpus"
    assert not (tmp_path / "run").exists()


def test_a_stop_asked_before_the_run_starts_preparing_stops_it_before_any_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a signal caught while torch was imported is handed to the run before run() (StopSignals)
    monkeypatch.setattr(engine.train.setup, "prepare", slow_prepare(chunks=100_000))
    sink = Recorder()
    run = trainer(tmp_path, "train.max_steps=3", sinks=[sink])
    run.stop(reason="SIGINT (ctrl+c)")
    assert run.run() == RunState.STOPPED
    assert sink.of("data_progress") == []
    assert not (tmp_path / "run").exists()


def test_a_real_run_records_exactly_one_final_preparation_record(tmp_path: Path) -> None:
    run = trainer(tmp_path, "train.max_steps=2")
    assert run.run() == RunState.FINISHED
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    progress = [r for r in records if r["kind"] == "data_progress"]
    assert len(progress) == 1 and progress[0]["done"] is True
