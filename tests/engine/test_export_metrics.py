"""`cockpit export --format csv`: a run's metrics.jsonl as CSV tables, read back with the csv
module as a spreadsheet or pandas would."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from command_here import cockpit_here
from run_copies import train_here

from engine.export import ExportError, csv_metrics
from engine.export.metrics_records import BranchScan


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def records(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def number(cell: str) -> float | None:
    return None if cell == "" else float(cell)


@pytest.fixture(scope="module")
def run20(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    run_dir = tmp_path_factory.mktemp("csv") / "run"
    sets = ["train.max_steps=20", "eval.interval=10"]
    return train_here(run_dir, sets, isolated_env, telemetry=True)


def test_step_and_eval_tables_are_the_metrics_files(run20, tmp_path):
    out = run20 / "export" / "csv"  # where `cockpit export` writes by default
    done = cockpit_here("export", str(run20), "--format", "csv")
    assert done.returncode == 0, done.stderr
    assert f"wrote {out / 'step.csv'}" in done.stdout
    assert "step.csv 20 rows, eval.csv 2 rows" in done.stdout
    assert {p.name for p in out.iterdir()} >= {"step.csv", "eval.csv", "checkpoint.csv"}

    header, rows = read_csv(out / "step.csv")
    assert header[:2] == ["step", "time"]
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "step_time_s", "mfu"} <= set(header)
    steps = records(run20, "step")
    assert len(rows) == len(steps) == 20
    for row, record in zip(rows, steps, strict=True):
        assert int(row["step"]) == record["step"]
        for key in header[1:]:
            assert number(row[key]) == record[key], key  # exact: floats as repr, null empty

    header, rows = read_csv(out / "eval.csv")
    assert header[0] == "step"
    assert [(int(r["step"]), float(r["val_loss"])) for r in rows] == [
        (r["step"], r["val_loss"]) for r in records(run20, "eval")
    ]
    # bits per byte: a real run's evals record them, and the table carries them
    assert [(float(r["train_bpb"]), float(r["val_bpb"])) for r in rows] == [
        (r["train_bpb"], r["val_bpb"]) for r in records(run20, "eval")
    ]
    assert all(0 < float(r["val_bpb"]) < float(r["val_loss"]) * 2 for r in rows)
    _, rows = read_csv(out / "checkpoint.csv")
    assert rows[-1]["path"].endswith("ckpt-00000020.pt") and rows[-1]["reason"] == "final"
    # a sample's text with quotes, commas and newlines survives the round trip
    _, rows = read_csv(out / "sample.csv")
    assert [r["text"] for r in rows] == [r["text"] for r in records(run20, "sample")]


def write_metrics(path: Path, lines: list[dict | str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = [line if isinstance(line, str) else json.dumps(line) for line in lines]
    path.write_text("\n".join(text) + "\n")


def step(n: int, loss: float | None, **extra) -> dict:
    return {"kind": "step", "time": 100.0 + n, "step": n, "loss": loss, "lr": 0.1, **extra}


def test_a_resumed_run_is_exported_on_the_branch_it_ended_on(tmp_path):
    """Steps 1..4 with an eval at 4, a crash; a resume from step 2 trains 3..5."""
    write_metrics(
        tmp_path / "run" / "metrics.jsonl",
        [
            {"kind": "run_started", "time": 99.0, "start_step": 0, "planned_lr": [[0, 0.1]]},
            *[step(n, 5.0 - n) for n in range(1, 5)],
            {"kind": "eval", "time": 104.5, "step": 4, "train_loss": 1.0, "val_loss": 1.5},
            '{"kind":"step","time":105.0,"st',  # cut short by the crash
            {"kind": "run_started", "time": 200.0, "start_step": 2, "planned_lr": []},
            *[step(n, 50.0 - n) for n in (3, 4)],
            step(5, None, update_ratio=0.25),  # a NaN loss is null, a new key appears
            {"kind": "telemetry", "time": 205.0, "source": "psutil", "gpus": [],
             "cpu_per_core": [10.0, 20.0], "ram_used": 5},
        ],
    )  # fmt: skip
    out = tmp_path / "csv"
    result = csv_metrics.export(tmp_path / "run", out)
    header, rows = read_csv(out / "step.csv")
    assert header == ["step", "time", "loss", "lr", "update_ratio"]
    assert [(r["step"], r["loss"], r["update_ratio"]) for r in rows] == [
        ("1", "4.0", ""), ("2", "3.0", ""), ("3", "47.0", ""), ("4", "46.0", ""), ("5", "", "0.25"),
    ]  # fmt: skip
    assert not (out / "eval.csv").exists()  # step 4's eval belonged to the abandoned branch
    assert not (out / "run_started.csv").exists()
    header, rows = read_csv(out / "telemetry.csv")
    assert header == ["time", "source", "cpu_per_core.0", "cpu_per_core.1", "ram_used"]
    assert rows == [
        {"time": "205.0", "source": "psutil", "cpu_per_core.0": "10.0", "cpu_per_core.1": "20.0",
         "ram_used": "5"},
    ]  # fmt: skip
    assert "3 records of abandoned branches" in " ".join(result.notes)
    # exporting again replaces the tables
    csv_metrics.export(tmp_path / "run", out)
    assert len(read_csv(out / "step.csv")[1]) == 5


def test_an_in_session_rollback_keeps_the_second_branch(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(
        metrics,
        [
            *[step(n, 1.0) for n in range(1, 6)],
            {"kind": "alert", "time": 106.0, "step": 2, "level": "info", "message": "rolled back"},
            *[step(n, 2.0) for n in range(3, 7)],
        ],
    )
    scan = BranchScan(metrics)
    kept = [(r["kind"], r["step"], r.get("loss")) for r in scan.records()]
    assert kept == [
        ("step", 1, 1.0), ("step", 2, 1.0), ("alert", 2, None),
        ("step", 3, 2.0), ("step", 4, 2.0), ("step", 5, 2.0), ("step", 6, 2.0),
    ]  # fmt: skip
    assert scan.abandoned == 3


def test_export_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(ExportError, match="no such run directory"):
        csv_metrics.export(tmp_path / "nope", tmp_path / "out")
    with pytest.raises(ExportError, match="metrics.jsonl does not exist"):
        csv_metrics.export(tmp_path, tmp_path / "out")
    write_metrics(tmp_path / "metrics.jsonl", [{"kind": "run_started", "time": 1.0}])
    with pytest.raises(ExportError, match="holds no metrics yet"):
        csv_metrics.export(tmp_path, tmp_path / "out")
    write_metrics(tmp_path / "metrics.jsonl", [step(1, 1.0)])
    (tmp_path / "taken").write_text("")
    with pytest.raises(ExportError, match="is a file"):
        csv_metrics.export(tmp_path, tmp_path / "taken")


def test_nested_values_become_columns():
    assert csv_metrics.flatten({"gpus": [{"util": 1.0}], "throttle": ["hw", "power"]}) == {
        "gpus.0.util": 1.0,
        "throttle": "hw; power",
    }
