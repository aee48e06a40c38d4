"""`cockpit ablate` takes the speedrun's last techniques as change rows: SGD with Nesterov
momentum and emulated float8, each a finished run with its row in the table."""

from __future__ import annotations

import csv
import json
import os

import pytest
from command_here import cockpit_here

QUICK = ["--set", "sample.interval=0", "--set", "eval.batches=2", "--no-telemetry", "--headless"]


@pytest.mark.slow  # each run a real (tiny) one
def test_sgd_and_float8_are_change_rows(tmp_path):
    pytest.importorskip("torchao", reason="torchao is not installed: pip install 'cockpit[float8]'")
    runs = tmp_path / "runs"
    done = cockpit_here(
        "ablate", "--runs", str(runs), "--preset", "tiny",
        "--change", "optim.name=sgd optim.lr=0.3", "--change", "train.float8=emulate",
        "--steps", "3", "--set", "eval.interval=3", "--set", "model.n_layer=1", "--name", "s", *QUICK,
        env={**os.environ, "TERM": "dumb"}, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((runs / "s" / "results.csv").open()))
    assert [r["run"] for r in rows] == ["baseline", "optim.name=sgd optim.lr=0.3", "train.float8=emulate"]
    assert all(r["status"] == "finished" and r["steps"] == "3" for r in rows)
    configs = [json.loads((runs / "s" / name / "config.json").read_text()) for name in (
        "01-optim.name=sgd+optim.lr=0.3", "02-train.float8=emulate")]  # fmt: skip
    assert configs[0]["optim"]["name"] == "sgd" and configs[1]["train"]["float8"] == "emulate"
