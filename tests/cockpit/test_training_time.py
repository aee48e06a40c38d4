"""A run's figures as `cockpit runs` and the views show them: the training time (one definition:
the engine's train_time_s, the wall time of its training steps, pauses excluded, summed across
resumes), exact wherever the run paused, saved or ended; the step it ended at; its newest
checkpoint as an absolute path; its world size now. A real tiny run stopped by SIGTERM (no eval
after its start: the case an estimate got wrong), real CLI processes, and the app's view of it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import warm_process
from command_here import cockpit_here
from pilot import run_pilot, status_text, wait_for
from scripted import ScriptedTrainer, build_script

from cockpit.app.cockpit_app import CockpitApp
from cockpit.figures.durations import fmt_duration
from engine.events import StateChanged, Step
from engine.rundir.recorded import RecordedRun
from engine.rundir.summary import read_summary

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "dumb"}


def cockpit_runs(root: Path, cwd: Path) -> list[dict[str, Any]]:
    done = cockpit_here("runs", str(root), "--json", cwd=cwd, env=ENV)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run started with a relative --run-dir, stopped by SIGTERM after 100 steps (no eval
    since its start: its training time has no eval to anchor it)."""
    where = tmp_path_factory.mktemp("train-time")
    process = warm_process.Popen(
        [sys.executable, "-m", "cockpit", "train", "--headless", "--preset", "tiny", "--no-telemetry",
         "--run-dir", "runs/stopped", "--set", "train.max_steps=100000", "--set", "eval.interval=100000"],
        cwd=where, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    metrics = where / "runs" / "stopped" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not metrics.exists() or metrics.read_text().count('"kind":"step"') < 100:
        assert time.monotonic() < deadline and process.poll() is None, process.stderr
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    return where / "runs" / "stopped"


def test_the_training_time_of_a_stopped_run_is_the_engines_not_an_estimate(stopped: Path) -> None:
    saved = max(stopped.glob("ckpt-*.pt"))  # the stop's, the newest
    state = torch.load(saved, weights_only=True, mmap=True)
    (stopped / "summary.json").unlink()  # rebuilt from metrics.jsonl, as a reader does
    (listed,) = cockpit_runs(stopped.parent, cwd=REPO)
    assert listed["step"] == state["step"] and listed["state"] == "stopped"
    assert listed["train_time_s"] == round(state["train_time_s"], 3)  # was ~1.8x: last step time x steps
    # the newest checkpoint, wherever `cockpit runs` is run from (the run used a relative path)
    assert listed["last_checkpoint"] == str(saved.resolve())


def test_the_finished_view_says_the_same_training_time_as_cockpit_runs(stopped: Path) -> None:
    train_s = read_summary(stopped, write_back=False).train_time_s
    app = CockpitApp(lambda _preset: RecordedRun(stopped), stopped.name)

    async def scenario(pilot: Any) -> None:
        await wait_for(pilot, lambda: app.view.step > 0 and app.state == "stopped", timeout=10)
        await pilot.pause()
        app.pump(force=True)
        await pilot.pause()
        text = status_text(app)
        assert f"trained {fmt_duration(train_s)}" in text, text
        assert "elapsed" not in text

    run_pilot(app, scenario, size=(160, 40))


def write_records(run_dir: Path, records: list[dict[str, Any]]) -> None:
    run_dir.mkdir(parents=True)
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)  # as the engine does
    (run_dir / "metrics.jsonl").write_text(text)


def started(t: float, start_step: int = 0, train_time_s: float = 0.0) -> dict[str, Any]:
    return {"kind": "run_started", "time": t, "preset": "tiny", "start_step": start_step,
            "max_steps": 1000, "tokens_per_step": 10, "resumed_from": None, "train_time_s": train_time_s}  # fmt: skip


def step(t: float, n: int) -> dict[str, Any]:
    return {"kind": "step", "time": t, "step": n, "loss": 2.0, "lr": 1e-3, "grad_norm": 1.0,
            "tokens_per_s": 100.0, "step_time_s": 0.1, "tokens": 10 * n}  # fmt: skip


def test_a_run_rolled_back_and_failed_is_at_its_last_step_not_its_highest(tmp_path: Path) -> None:
    """Records in the order the engine writes them: 120 steps, a rollback to the checkpoint at
    100 (the steps after it trained again), then the failure at step 105."""
    t = time.time() - 600
    records = [started(t)] + [step(t + n, n) for n in range(1, 121)]
    records.append({"kind": "checkpoint", "time": t + 100.5, "step": 100, "path": "ckpt-00000100.pt",
                    "reason": "interval"})  # fmt: skip
    records.append({"kind": "state", "time": t + 121, "state": "running", "step": 100, "reason": "rolled back",
                    "train_time_s": 10.0})  # fmt: skip
    records += [step(t + 121 + n, 100 + n) for n in range(1, 6)]
    records.append({"kind": "state", "time": t + 127, "state": "failed", "step": 105, "reason": "NaN",
                    "train_time_s": 10.5})  # fmt: skip
    write_records(tmp_path / "runs" / "rolled", records)
    (listed,) = cockpit_runs(tmp_path / "runs", cwd=tmp_path)
    assert (listed["state"], listed["step"], listed["tokens"]) == ("failed", 105, 1050)
    assert listed["train_time_s"] == 10.5  # the failure's own record: exact


def test_the_world_size_is_the_newest_sessions(tmp_path: Path) -> None:
    """Two ranks under torchrun, then resumed as one process: world_size 1, not 2."""
    t = time.time() - 600
    records = [started(t), step(t + 1, 1), {"kind": "ranks", "time": t + 1.5, "ranks": [{}, {}]},
               step(t + 2, 2), started(t + 10, start_step=2, train_time_s=0.2), step(t + 11, 3)]  # fmt: skip
    write_records(tmp_path / "runs" / "resized", records)
    (listed,) = cockpit_runs(tmp_path / "runs", cwd=tmp_path)
    assert listed["world_size"] == 1


def test_the_live_status_line_does_not_count_a_pause_as_training() -> None:
    """A live run paused for an hour (telemetry and states still arriving): its training time
    stays where the pause left it, then goes on by each step's time."""
    script = build_script(steps=50)
    trainer = ScriptedTrainer("default", script=script)
    app = CockpitApp(lambda _preset: trainer, "default")

    async def scenario(pilot: Any) -> None:
        await wait_for(pilot, lambda: trainer.loaded.is_set() and app.view.step == 50, timeout=10)
        await pilot.pause()
        before = app.main_screen.loss_panel.clock.trained_s()
        assert before is not None and before > 0
        last = script[-1].time
        trainer._emit(StateChanged(state="paused", step=50, reason="paused by user", train_time_s=before,
                                   time=last + 1))  # fmt: skip
        trainer._emit(StateChanged(state="running", step=50, reason="resumed by user", train_time_s=before,
                                   time=last + 3600))  # fmt: skip
        await pilot.pause(0.3)
        app.pump(force=True)
        await pilot.pause()
        assert f"trained {fmt_duration(before)}" in status_text(app), status_text(app)
        trainer._emit(Step(step=51, loss=2.0, lr=1e-3, grad_norm=1.0, tokens_per_s=1e4, step_time_s=0.5,
                           tokens=51 * 768, time=last + 3601))  # fmt: skip
        await pilot.pause(0.3)
        assert app.main_screen.loss_panel.clock.trained_s() == pytest.approx(before + 0.5)

    run_pilot(app, scenario, size=(160, 40))
