"""A run's final `state` record is the last record of its metrics.jsonl (a reader takes the
last state for how the run ended): no telemetry reading and no alert from closing a sink
comes after it. Real tiny runs, with the psutil telemetry of this CPU polling fast."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.config.presets import load_preset
from engine.events import RunState
from engine.rundir import sinks as log_sinks
from engine.telemetry import poller as telemetry
from engine.train.trainer import Trainer

TINY = ["eval.interval=0", "sample.interval=0", "checkpoint.interval=0"]


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def tiny_run(run_dir: Path, *overrides: str, stop_at: int | None = None) -> list[dict[str, Any]]:
    trainer = Trainer(
        load_preset("tiny", [*TINY, "train.max_steps=4", *overrides]), run_dir=run_dir
    )
    if stop_at is not None:

        def stop_there(event: Any) -> None:
            if event.kind == "step" and event.step == stop_at:
                trainer.stop()

        trainer.sinks.append(stop_there)
    final = trainer.run()
    written = records(run_dir)
    assert written[-1]["kind"] == "state" and written[-1]["state"] == final, written[-3:]
    return written


def test_no_telemetry_reading_comes_after_the_final_state(tmp_path, monkeypatch):
    monkeypatch.setattr(telemetry, "POLL_INTERVAL_S", 0.0005)  # readings all the time
    readings = 0
    for attempt in range(4):  # finished and stopped runs: each ends its own way
        written = tiny_run(tmp_path / f"run{attempt}", stop_at=2 if attempt % 2 else None)
        readings += sum(r["kind"] == "telemetry" for r in written)
    assert readings > 4  # the poller did poll (psutil on this CPU) while the runs went


def test_a_sinks_closing_problem_is_recorded_before_the_final_state(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    # TensorBoard's writes fail (as on a full disk): closing its sink says so, in an alert

    def disk_full(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(log_sinks, "write_record", disk_full)
    for attempt, stop_at in enumerate((None, 2)):
        written = tiny_run(
            tmp_path / f"run{attempt}", "log.tensorboard=true", stop_at=stop_at
        )
        log_alerts = [i for i, r in enumerate(written) if r["kind"] == "alert" and r.get("code") == "log"]
        assert log_alerts, [r["kind"] for r in written]
        assert "TensorBoard log incomplete" in written[log_alerts[0]]["message"]
        final = max(i for i, r in enumerate(written) if r["kind"] == "state")
        assert final == len(written) - 1 and written[final]["state"] in RunState.ENDED
