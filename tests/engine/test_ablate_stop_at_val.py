"""train.stop_at_val: a run finishes at the first periodic evaluation at or below the target
(what `cockpit ablate --target` measures), with its final checkpoint there and no second
evaluation of that step; at 0 (off) a run is the same as before. Real tiny runs on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.config import load_preset
from engine.events import Eval, RunState, Step
from engine.train.cadence import val_target_note
from engine.train.trainer import Trainer

TINY = ["eval.interval=5", "sample.interval=0", "checkpoint.interval=0", "train.max_steps=40"]


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def run(run_dir: Path, *overrides: str) -> list[dict[str, Any]]:
    trainer = Trainer(load_preset("tiny", [*TINY, *overrides]), run_dir=run_dir, telemetry=False)
    trainer.run()
    return records(run_dir)


def test_a_run_finishes_at_the_first_eval_at_or_below_its_target(tmp_path):
    full = run(tmp_path / "full")
    evals = [r for r in full if r["kind"] == "eval"]
    assert [e["step"] for e in evals] == [5, 10, 15, 20, 25, 30, 35, 40]  # off: every eval
    target = evals[3]["val_loss"]  # reached at step 20 at the latest
    first = next(e for e in evals if e["val_loss"] <= target)
    assert first["step"] < 40

    stopped = run(tmp_path / "target", f"train.stop_at_val={target!r}")
    stopped_evals = [r for r in stopped if r["kind"] == "eval"]
    # the same run up to there (same seed), and no evaluation after it, nor a second one of it
    assert [e["step"] for e in stopped_evals] == [e["step"] for e in evals if e["step"] <= first["step"]]
    assert stopped_evals[-1]["val_loss"] == first["val_loss"]
    final = stopped[-1]
    assert final["kind"] == "state" and final["state"] == RunState.FINISHED
    assert final["step"] == first["step"]
    assert "train.stop_at_val" in final["reason"]
    saved = [r for r in stopped if r["kind"] == "checkpoint" and r["reason"] == "final"]
    assert [r["step"] for r in saved] == [first["step"]]
    assert (tmp_path / "target" / Path(saved[0]["path"]).name).is_file()


def test_a_target_never_reached_leaves_the_run_as_it_was(tmp_path):
    written = run(tmp_path / "run", "train.stop_at_val=0.01")
    assert [r["step"] for r in written if r["kind"] == "eval"][-1] == 40
    assert written[-1]["state"] == RunState.FINISHED and written[-1]["reason"] == ""


def test_the_note_needs_the_eval_of_this_step_at_or_below_a_set_target():
    cfg = load_preset("tiny", ["train.stop_at_val=2.0"])
    at = Eval(step=10, train_loss=2.1, val_loss=2.0, train_time_s=1.0)
    assert val_target_note(at, cfg, 10) == "val loss 2.0000 reached train.stop_at_val 2 at step 10"
    assert val_target_note(at, cfg, 11) is None  # an older evaluation
    assert val_target_note(Eval(step=10, train_loss=2.1, val_loss=2.01, train_time_s=1.0), cfg, 10) is None
    assert val_target_note(Eval(step=10, train_loss=2.1, val_loss=float("nan"), train_time_s=1.0), cfg, 10) is None
    assert val_target_note(None, cfg, 10) is None
    assert val_target_note(at, load_preset("tiny"), 10) is None  # 0: off


def test_a_target_set_mid_run_finishes_the_run_at_the_next_eval_at_or_below_it(tmp_path):
    """train.stop_at_val is a live setting: set at step 3, it stops the run at the first eval
    from then on at or below it, as if the run had started with it."""
    evals = [r for r in run(tmp_path / "full") if r["kind"] == "eval"]
    target = evals[3]["val_loss"]
    first = next(e for e in evals if e["val_loss"] <= target)

    trainers: list[Trainer] = []

    def set_at_step_3(event: Any) -> None:
        if isinstance(event, Step) and event.step == 3:
            trainers[0].set_settings({"train.stop_at_val": target})

    trainer = Trainer(
        load_preset("tiny", TINY), run_dir=tmp_path / "live", telemetry=False, sinks=[set_at_step_3]
    )
    trainers.append(trainer)
    trainer.run()
    written = records(tmp_path / "live")
    assert [r["kind"] for r in written].count("settings_changed") == 1
    assert written[-1]["state"] == RunState.FINISHED and written[-1]["step"] == first["step"]
    assert "train.stop_at_val" in written[-1]["reason"]
