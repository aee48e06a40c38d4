"""A run started from a config.toml with `[[changes]]` under torchrun (2 ranks, gloo, this
CPU): every rank makes each change at its step, with nothing exchanged for it."""

from __future__ import annotations

import json
from pathlib import Path

from launch import checked, rank_records, records, run

from engine.config import SettingsTimeline, config_to_toml, load_preset


def test_a_replay_makes_its_changes_at_the_same_step_on_every_rank(tmp_path: Path) -> None:
    plan = SettingsTimeline()
    plan.add(3, {"optim.weight_decay": 0.0})
    plan.add(5, {"lr_scale": 0.5})
    cfg = load_preset("tiny", [
        "train.grad_accum=2", "train.batch_size=4", "eval.interval=0", "sample.interval=0",
        "checkpoint.interval=0", "train.max_steps=8",
    ])  # fmt: skip
    path = tmp_path / "config.toml"
    path.write_text(config_to_toml(cfg, changes=plan))
    run_dir = tmp_path / "run"
    checked(run("--preset", str(path), "--no-telemetry", "--run-dir", str(run_dir), GROUPS_CHECK="1"))
    for kind, step in (("settings_changed", 3), ("lr_changed", 5)):
        at = [[r["step"] for r in rank_records(run_dir, rank, kind)] for rank in (0, 1)]
        assert at == [[step], [step]], (kind, at)
    # the optimizer of each rank trains with it from the step after
    decays = [json.loads((run_dir / f"groups-{rank}.json").read_text()) for rank in (0, 1)]
    assert decays[0] == decays[1], decays
    (first, start), (then, after) = decays[0]  # the groups' decays at step 0 and from step 3
    assert (first, then) == (0, 3) and 0.1 in start and set(after) == {0.0}, decays
    (made,) = records(run_dir / "metrics.jsonl", "settings_changed")
    assert made["replayed"] and made["by"] == "app"
    # and the run's own config.toml lists the same changes again
    assert "[[changes]]" in (run_dir / "config.toml").read_text()
