"""A damaged line in metrics.jsonl is read past, with one warning, by every reader of the file: a
resume, `cockpit export --format csv|tensorboard` and `cockpit fork` (real runs, the real CLI in
this process); the runs listing, the curves, the replay and the journal read past it too. Damaged:
a byte that is not UTF-8 (a damaged disk or copy), brackets nested thousands deep, a record
without the time or step its kind has."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from command_here import cockpit_here
from run_copies import copy_run, train_here

DAMAGED_LINE = 6  # a step record's line
LOST: list[int] = []  # the step whose record it was


def cockpit(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cockpit_here(*argv, cwd=cwd, env={**os.environ, "TERM": "dumb"})


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    where = tmp_path_factory.mktemp("damaged")  # trained here (what reads it: the CLI)
    train_here(
        Path("runs/run"), ["train.max_steps=40", "checkpoint.interval=20"], isolated_env, cwd=where
    )
    metrics = where / "runs" / "run" / "metrics.jsonl"
    lines = metrics.read_bytes().split(b"\n")
    assert lines[DAMAGED_LINE - 1].startswith(b'{"kind":"step"')
    LOST.append(json.loads(lines[DAMAGED_LINE - 1])["step"])
    lines[DAMAGED_LINE - 1] = lines[DAMAGED_LINE - 1][:30] + b"\xff" + lines[DAMAGED_LINE - 1][31:]
    metrics.write_bytes(b"\n".join(lines))
    return where / "runs" / "run"


WARNING = f"metrics.jsonl: line {DAMAGED_LINE} damaged (not UTF-8 text): read past"


def test_a_fork_reads_past_the_damaged_line_with_one_warning(damaged: Path) -> None:
    branch = damaged.parent / "branch"
    done = cockpit("fork", str(damaged / "ckpt-00000020.pt"), "--run-dir", str(branch), "--no-start",
                   cwd=damaged.parent.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count(WARNING) == 1, done.stderr
    copied = [json.loads(line) for line in (branch / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in copied if r["kind"] == "step"]
    assert steps == [s for s in range(1, 21) if s not in LOST]  # all but the damaged line's step


def test_a_csv_export_reads_past_it_and_says_so(damaged: Path, tmp_path: Path) -> None:
    done = cockpit("export", str(damaged), "--format", "csv", "--out", str(tmp_path / "csv"),
                   cwd=damaged.parent.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "step.csv 39 rows" in done.stdout and done.stdout.count(WARNING) == 1, done.stdout


def test_a_resume_reads_past_it_with_one_warning_and_trains_on(damaged: Path) -> None:
    done = cockpit("--resume", str(damaged), "--set", "train.max_steps=50", "--headless",
                   "--no-telemetry", cwd=damaged.parent.parent)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "finished at step 50" in done.stdout
    assert (done.stdout + done.stderr).count(WARNING) == 1, done.stdout + done.stderr
    tail = (damaged / "metrics.jsonl").read_bytes().split(b"\n")[DAMAGED_LINE:]
    alerts = [r for r in map(json.loads, filter(None, tail)) if r["kind"] == "alert"]
    assert [a["code"] for a in alerts if WARNING in a["message"]] == ["metrics"]


# ------------------------------------------------------------ nested brackets, a record's fields

DEEP = "[" * 2000 + "]" * 2000  # valid JSON that json's parser cannot read (RecursionError)
TIMELESS_VAL_LOSS = 9.875  # the eval record without its time: in no table, no curve


@pytest.fixture(scope="module")
def malformed(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    where = tmp_path_factory.mktemp("malformed")
    train_here(
        Path("runs/run"), ["train.max_steps=20", "eval.interval=10"], isolated_env, cwd=where
    )
    metrics = where / "runs" / "run" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    lines[5:5] = [
        DEEP,
        '{"kind":"state","time":5.0,"step":3,"state":"running","x":' + DEEP + "}",
        json.dumps({"kind": "step", "time": 5.0, "loss": 1.0}),  # no step
    ]
    # the newest eval at step 20 (it would win) but without its time
    lines.append(json.dumps({"kind": "eval", "step": 20, "train_loss": 1.0,
                             "val_loss": TIMELESS_VAL_LOSS, "train_time_s": 1.0}))  # fmt: skip
    metrics.write_text("\n".join(lines) + "\n")
    return where / "runs" / "run"


MALFORMED = (
    "metrics.jsonl: 4 lines damaged, the first line 6 (nested too deeply to read): read past"
)


@pytest.mark.parametrize("fmt", ["csv", "tensorboard"])
def test_an_export_reads_past_nested_brackets_and_a_record_without_its_time(
    malformed: Path, tmp_path: Path, fmt: str
) -> None:
    done = cockpit("export", str(malformed), "--format", fmt, "--out", str(tmp_path / fmt),
                   cwd=malformed.parent.parent)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.count(MALFORMED) == 1, done.stdout
    if fmt == "csv":
        assert "step.csv 20 rows, eval.csv 2 rows" in done.stdout
        assert str(TIMELESS_VAL_LOSS) not in (tmp_path / "csv" / "eval.csv").read_text()


def test_a_resume_reads_past_them_with_one_warning_and_trains_on(malformed: Path) -> None:
    from engine.rundir.history import read_curves

    done = cockpit("--resume", str(malformed), "--set", "train.max_steps=25", "--headless",
                   "--no-telemetry", cwd=malformed.parent.parent)  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "finished at step 25" in done.stdout, said
    assert said.count(MALFORMED) == 1 and "Traceback" not in said, said
    curves = read_curves(malformed)  # what `cockpit compare` and the runs screen draw
    assert curves.step.tolist() == list(range(1, 26))
    assert curves.val_step.tolist() == [10, 20, 25]
    assert TIMELESS_VAL_LOSS not in curves.val_loss.tolist()


def test_the_listing_replay_and_journal_read_past_them(malformed: Path, tmp_path: Path) -> None:
    from engine.rundir.history import run_tokenizer
    from engine.rundir.journal import read_journal
    from engine.rundir.replay_reader import read_replay
    from engine.rundir.summary import read_summary

    run = copy_run(malformed, tmp_path / "run")
    (run / "summary.json").write_text(DEEP)  # damaged too: rebuilt from metrics.jsonl
    assert read_summary(run, write_back=False).facts["step"] >= 20
    for fast in (True, False):
        steps = [e.step for e in read_replay(run, fast=fast).events if e.kind == "step"]
        assert steps[-1] >= 20
    assert any(entry for entry in read_journal(run / "metrics.jsonl"))
    assert run_tokenizer(run) == "char"


def test_runs_lists_a_run_whose_config_json_is_nested_past_jsons_depth(
    malformed: Path, tmp_path: Path
) -> None:
    run = copy_run(malformed, tmp_path / "runs" / "deep")
    (run / "config.json").write_text('{"model": ' + DEEP + "}")
    done = cockpit("runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "deep" in done.stdout
