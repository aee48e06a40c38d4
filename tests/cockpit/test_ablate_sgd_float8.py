"""`cockpit ablate` takes the speedrun's last techniques as change rows: SGD with Nesterov
momentum and emulated float8, each a finished run with its row in the table; float8 on a machine
without a float8 GPU is refused up front, one line, nothing trained."""

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
    assert [r["run"] for r in rows] == [
        "baseline",
        "optim.name=sgd optim.lr=0.3",
        "train.float8=emulate",
    ]
    assert all(r["status"] == "finished" and r["steps"] == "3" for r in rows)
    configs = [json.loads((runs / "s" / name / "config.json").read_text()) for name in (
        "01-optim.name=sgd+optim.lr=0.3", "02-train.float8=emulate")]  # fmt: skip
    assert configs[0]["optim"]["name"] == "sgd" and configs[1]["train"]["float8"] == "emulate"


def test_float8_on_without_a_float8_gpu_is_refused_before_anything_trains(
    capsys, tmp_path, monkeypatch
):
    import torch

    from cockpit.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    runs = tmp_path / "runs"
    code = main(["ablate", "--headless", "--no-telemetry", "--preset", "tiny", "--steps", "2",
                 "--runs", str(runs), "--change", "train.float8=on", "--change", "optim.name=sgd"])  # fmt: skip
    lines = capsys.readouterr().err.splitlines()
    assert code == 2
    assert lines == [
        "cockpit ablate: ablate 2/3: train.float8=on: train.float8 = on needs a CUDA GPU of compute "
        "capability 8.9 or higher (this run is on cpu); train.float8 = emulate runs its numerics, "
        "no faster"
    ]
    assert not runs.exists() or not any(runs.rglob("metrics.jsonl"))
