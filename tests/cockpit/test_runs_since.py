"""`cockpit runs RUN --since 8h`: the digest of a real tiny run's last hours (its records moved
10 hours back, then records of the last hours appended), as text and JSON; bad values refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from command_here import cockpit_here
from run_copies import copy_run, train_here
from tiny import tiny_overrides

HOUR = 3600.0


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    run_dir = tmp_path_factory.mktemp("since") / "tiny-run"
    sets = tiny_overrides(
        "train.max_steps=12", "eval.interval=6", "checkpoint.interval=6", quiet=True
    )
    return train_here(run_dir, sets, isolated_env)


@pytest.fixture
def away_run(trained: Path, tmp_path: Path) -> Path:
    """The run, its records 10 hours old, then what the last hours added."""
    run = copy_run(trained, tmp_path / "tiny-run")
    metrics = run / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    for r in records:
        r["time"] -= 10 * HOUR
    last = [r for r in records if r["kind"] == "step"][-1]
    now = time.time()
    later = [
        {**last, "time": now - 3 * HOUR, "step": last["step"] + 100, "tokens": last["tokens"] * 2},
        {"kind": "alert", "time": now - 2 * HOUR, "step": last["step"] + 100, "level": "error",
         "code": "nan", "message": "loss is nan at step 112"},
        {"kind": "state", "time": now - 2 * HOUR + 1, "step": last["step"] + 100, "state": "paused",
         "reason": "paused on nan: r rolls back"},
        {"kind": "command", "time": now - HOUR, "step": last["step"] + 100, "name": "set",
         "args": {"settings": {"optim.weight_decay": 0.05}}, "viewer": 3, "who": "bob@gpu1 (pts/2)"},
        {"kind": "settings_changed", "time": now - HOUR + 1, "step": last["step"] + 100,
         "changes": {"optim.weight_decay": [0.1, 0.05]}, "by": "viewer 3 bob@gpu1 (pts/2)"},
        {"kind": "checkpoint", "time": now - HOUR + 2, "step": last["step"] + 100,
         "path": str(run / "ckpt-00000112.pt"), "reason": "manual"},
    ]  # fmt: skip
    metrics.write_text("".join(json.dumps(r) + "\n" for r in [*records, *later]))
    return run


def test_since_prints_what_the_run_did_in_that_time(away_run: Path) -> None:
    done = cockpit_here("runs", str(away_run), "--since", "8h")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == str(away_run)
    assert lines[1].startswith("Since ") and lines[1].endswith("(8h 0m ago):")
    assert lines[2].startswith("trained 100 steps (step 12 -> 112), ")
    assert "evaluations: none" in lines  # the run's evals are 10 hours old
    assert "alerts: 1" in lines and any(
        "step 112  error nan (loss is nan at step 112)" in x for x in lines
    )
    assert any("engine: paused (paused on nan: r rolls back)" in x for x in lines)  # what was done
    assert any("viewer 3 bob@gpu1 (pts/2): set optim.weight_decay 0.1 -> 0.05" in x for x in lines)
    assert lines[-1] == "checkpoints: 1, the last ckpt-00000112.pt at step 112 (manual)"
    # over the whole run: its own evaluations and checkpoints too
    whole = cockpit_here("runs", str(away_run), "--since", "2d", "--json")
    assert whole.returncode == 0, whole.stderr
    facts = json.loads(whole.stdout)
    assert facts["steps"] == 112 and facts["evals"] == 2 and facts["best_val_step"] in (6, 12)
    assert [c["step"] for c in facts["checkpoints"]] == [6, 12, 112]
    assert facts["settings"][0]["who"] == "viewer 3 bob@gpu1 (pts/2)"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["--since", "8x"],
            "cockpit runs: --since '8x' is not a duration; write a number and a unit: 90s, 30m, 8h or 2d",
        ),
        (["--since=-2h"], "is not a duration"),
    ],
)
def test_a_bad_since_is_one_line(away_run: Path, argv: list[str], says: str) -> None:
    done = cockpit_here("runs", str(away_run), *argv)
    assert done.returncode == 2 and says in done.stderr and len(done.stderr.splitlines()) == 1


def test_since_on_a_folder_of_runs_names_what_it_takes(away_run: Path) -> None:
    done = cockpit_here("runs", str(away_run.parent), "--since", "8h")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"cockpit runs: {away_run.parent} holds no run (metrics.jsonl missing); --since takes one "
        "run's directory: cockpit runs RUN_DIR --since 8h"
    )
