"""train.time_budget: a run finishes once its training time (steps alone) reaches the budget,
with its final evaluation and checkpoint after it and not counted in it; a resume counts what
the run trained before. Real tiny runs on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.config import load_preset
from engine.events import RunState
from engine.train.cadence import time_budget_note
from engine.train.trainer import Trainer
from tests.tiny import tiny_overrides

# far more steps than a second trains: the budget ends the run
LONG = tiny_overrides("train.max_steps=100000", "eval.interval=20", quiet=True)


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_run_finishes_when_its_training_time_reaches_the_budget(tmp_path):
    trainer = Trainer(
        load_preset("tiny", [*LONG, "train.time_budget=1.0"]),
        run_dir=tmp_path / "r",
        telemetry=False,
    )
    trainer.run()
    written = records(tmp_path / "r")
    final = written[-1]
    assert final["kind"] == "state" and final["state"] == RunState.FINISHED
    assert "train.time_budget 1 s" in final["reason"]
    steps = [r for r in written if r["kind"] == "step"]
    assert 0 < final["step"] < 100000
    # at the budget, past it by at most the step that crossed it (and a little bookkeeping)
    assert 1.0 <= final["train_time_s"] <= 1.0 + max(s["step_time_s"] for s in steps) + 0.1
    # evaluations on the way (every 20 steps) and the final one are not in the training time
    evals = [r for r in written if r["kind"] == "eval"]
    assert len(evals) >= 2 and evals[-1]["step"] == final["step"]
    assert evals[-1]["train_time_s"] == final["train_time_s"]
    assert evals[-1]["val_bpb"] is not None
    saved = [r for r in written if r["kind"] == "checkpoint" and r["reason"] == "final"]
    assert [r["step"] for r in saved] == [final["step"]]


def test_a_resumed_run_counts_the_training_time_it_had(tmp_path):
    run_dir = tmp_path / "r"
    Trainer(
        load_preset("tiny", [*LONG, "train.time_budget=0.5"]), run_dir=run_dir, telemetry=False
    ).run()
    first = records(run_dir)[-1]
    assert first["train_time_s"] >= 0.5
    # half a second more than the first session trained (its last step may overrun 0.5 s)
    budget = round(first["train_time_s"] + 0.5, 3)
    resumed = Trainer(
        load_preset("tiny"),
        resume=run_dir,
        resume_overrides=[f"train.time_budget={budget}"],
        telemetry=False,
    )
    resumed.run()
    final = records(run_dir)[-1]
    assert final["state"] == RunState.FINISHED and final["step"] > first["step"]
    steps = [r for r in records(run_dir) if r["kind"] == "step"]
    # the budget in all: the second session trained about half a second, not a whole budget
    assert budget <= final["train_time_s"] <= budget + max(s["step_time_s"] for s in steps) + 0.1


def test_the_note_is_none_when_off_or_under_the_budget():
    assert time_budget_note(load_preset("tiny"), 1e9) is None  # 0: off
    cfg = load_preset("tiny", ["train.time_budget=2"])
    assert time_budget_note(cfg, 1.99) is None
    assert time_budget_note(cfg, 2.0) == "training time 2.0 s reached train.time_budget 2 s"
