"""eval.fine_interval: a run with a target val loss (train.stop_at_val) evaluates every
eval.fine_interval steps once its next periodic evaluation may reach the target, so the step it
finishes at is within the fine cadence of the crossing, not up to eval.interval steps past it
(what `cockpit ablate --target` measures). The rule by hand, then real tiny runs on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.config import ConfigError, load_preset
from engine.train.cadence import eval_interval, near_target, projects_to, work_due
from engine.train.trainer import Trainer


def test_it_may_reach_the_target_when_the_last_val_is_within_3_times_its_fall_over_the_last_interval():
    # fell 0.2 over the last 50 steps: the next 50 may take it 0.6 lower
    assert projects_to([(50, 3.5), (100, 3.3)], 2.7, 50)  # 0.60 above: near
    assert not projects_to([(50, 3.5), (100, 3.31)], 2.7, 50)  # 0.61 above, fell 0.19 (0.57)
    assert projects_to([(50, 3.2), (100, 2.95)], 2.9, 50)
    assert projects_to([(50, 3.0), (100, 2.8)], 2.9, 50)  # at or below already
    # a curve that steepens (as tiny's lion run does: 3.12, 3.05, then 2.87 at step 150)
    assert projects_to([(50, 3.1237), (100, 3.0548)], 2.9, 50)


def test_no_projection_without_a_fall_to_project():
    assert not projects_to([], 2.9, 50)
    assert not projects_to([(50, 2.91)], 2.9, 50)  # one evaluation: no fall measured yet
    assert not projects_to([(50, 3.0), (100, 3.05)], 2.9, 50)  # rose
    assert not projects_to([(50, 3.0), (100, 3.0)], 2.9, 50)  # flat
    assert not projects_to([(50, float("nan")), (100, 3.0)], 2.9, 50)


def test_the_fall_is_measured_over_an_interval_not_between_two_fine_evaluations():
    # the last two (fine) evaluations are level, but from step 50 it fell 0.21 in 60 steps,
    # 0.175 per 50: 0.05 above the target is near
    points = [(50, 3.2), (100, 3.0), (105, 2.99), (110, 2.99)]
    assert projects_to(points, 2.94, 50)
    # the reference is the latest evaluation at least 50 steps back: (50, 3.2), not (100, 3.0)
    assert projects_to(points, 2.99 - 3 * 0.21 * 50 / 60 + 1e-9, 50)
    assert not projects_to(points, 2.99 - 3 * 0.21 * 50 / 60 - 1e-6, 50)


def test_a_span_shorter_than_the_interval_is_scaled_to_it():
    # fell 0.2 in 10 steps: 1.0 per 50, near within 3.0
    assert projects_to([(10, 4.0), (20, 3.8)], 0.81, 50)
    assert not projects_to([(10, 4.0), (20, 3.8)], 0.79, 50)


def test_near_holds_for_an_interval_after_a_projection_so_one_noisy_eval_does_not_end_it():
    # tiny's lion run with 2-batch estimates: 3.12, 3.05 (may reach 2.9), then 3.10 at step 105
    points = [(50, 3.1237), (100, 3.0548), (105, 3.1028)]
    assert not projects_to(points, 2.9, 50)  # from 3.12 at step 50 it barely fell
    assert near_target(points, 2.9, 50)  # but step 100 projected it: fine until step 150
    assert near_target([(50, 3.5), (100, 3.3), (150, 3.4)], 2.7, 50)  # 100 is 50 steps back
    assert not near_target([(50, 3.5), (100, 3.3), (151, 3.4)], 2.7, 50)  # its 50 steps are over
    assert not near_target([], 2.9, 50)


def tiny(*overrides: str):
    return load_preset("tiny", ["eval.interval=50", *overrides])


def test_the_interval_is_the_fine_one_only_near_a_target_and_when_set():
    near = [(50, 3.2), (100, 2.98)]
    assert eval_interval(tiny("train.stop_at_val=2.9", "eval.fine_interval=5"), near) == 5
    assert eval_interval(tiny("train.stop_at_val=2.9", "eval.fine_interval=5"), near[:1]) == 50
    assert eval_interval(tiny("train.stop_at_val=2.9"), near) == 50  # fine_interval 0: off
    assert eval_interval(tiny("eval.fine_interval=5"), near) == 50  # no target
    assert eval_interval(tiny("train.stop_at_val=2.9", "eval.fine_interval=80"), near) == 50
    no_periodic = tiny("eval.interval=0", "train.stop_at_val=2.9", "eval.fine_interval=5")
    assert eval_interval(no_periodic, near) == 0
    cfg = tiny("train.stop_at_val=2.9", "eval.fine_interval=5", "train.max_steps=300")
    assert work_due(105, cfg, near).evaluate and not work_due(105, cfg, near[:1]).evaluate
    assert work_due(150, cfg, near[:1]).evaluate


def test_a_negative_fine_interval_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="eval.fine_interval"):
        tiny("eval.fine_interval=-1")


# one thread: the same losses to the last bit in every run (threads chosen by measurement may
# differ from run to run, and sums over another count of threads round differently)
RUN = ["sample.interval=0", "checkpoint.interval=0", "train.max_steps=300", "train.threads=1"]


def evals(run_dir: Path, *overrides: str) -> list[dict[str, Any]]:
    Trainer(load_preset("tiny", [*RUN, *overrides]), run_dir=run_dir, telemetry=False).run()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["kind"] == "eval"]


TARGET = 2.9
FINE = ["eval.interval=50", "eval.fine_interval=5", f"train.stop_at_val={TARGET}"]


@pytest.fixture(scope="module")
def fine(
    tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]
) -> list[dict[str, Any]]:
    """The evaluations of a run to the target at FINE's cadence, trained once for the module."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in isolated_env.items():
            patch.setenv(name, value)
        return evals(tmp_path_factory.mktemp("fine") / "run", *FINE)


def test_a_tiny_run_to_a_target_finishes_within_the_fine_cadence_of_the_crossing(tmp_path, fine):
    target = TARGET
    # every 5 steps throughout: where the crossing is, at this cadence (same seed, same run)
    every5 = evals(tmp_path / "every5", "eval.interval=5", f"train.stop_at_val={target}")
    crossing = every5[-1]
    assert crossing["val_loss"] <= target < every5[-2]["val_loss"]
    assert crossing["step"] % 50 != 0, "the test needs a crossing between two coarse evaluations"

    coarse = evals(tmp_path / "coarse", "eval.interval=50", f"train.stop_at_val={target}")
    assert all(e["step"] % 50 == 0 for e in coarse)
    assert coarse[-1]["step"] > crossing["step"]  # only seen at the next multiple of 50

    assert fine[-1]["step"] == crossing["step"]  # the same evaluation as every 5 steps finds
    assert fine[-1]["val_loss"] == pytest.approx(crossing["val_loss"], abs=1e-6)
    steps = [e["step"] for e in fine]
    assert len(steps) < len(every5)  # coarse far from the target
    assert steps[0] == 50 and any(s % 50 for s in steps)


def test_a_run_resumed_near_its_target_evaluates_finely_from_its_first_step(tmp_path, fine):
    fine_run = FINE
    whole = [e["step"] for e in fine]
    first_fine = next(s for s in whole if s % 50)
    stop_at = first_fine + 2  # the run is near its target there: every 5 steps

    cfg = load_preset("tiny", [*RUN, *fine_run])
    state: dict[str, Any] = {}

    def sink(event) -> None:
        if event.kind == "step" and event.step == stop_at:
            state["trainer"].stop()

    state["trainer"] = Trainer(cfg, run_dir=tmp_path / "cut", sinks=[sink], telemetry=False)
    assert state["trainer"].run() == "stopped"
    resumed = Trainer(cfg, run_dir=tmp_path / "cut", resume=tmp_path / "cut", telemetry=False)
    resumed.run()
    records = [
        json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()
    ]
    after = [r["step"] for r in records if r["kind"] == "eval" and r["step"] > stop_at]
    assert after[0] == first_fine + 5  # not the next multiple of 50: it forgot it was near
    assert after == [s for s in whole if s > stop_at]
