"""A byte that is not UTF-8 in metrics.jsonl (a damaged disk or copy) is read past, with one
warning, by every reader of the file: a resume, `cockpit export --format csv` and `cockpit fork`
(real runs, real CLI processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from run_copies import train_here

REPO = Path(__file__).resolve().parents[2]
DAMAGED_LINE = 6  # a step record's line
LOST: list[int] = []  # the step whose record it was


def cockpit(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cockpit", *argv], capture_output=True, text=True, cwd=cwd,
        timeout=180, env={**os.environ, "PYTHONPATH": str(REPO), "TERM": "dumb"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    where = tmp_path_factory.mktemp("damaged")  # trained here (what reads it: real processes)
    train_here(Path("runs/run"), ["train.max_steps=40", "checkpoint.interval=20"], isolated_env, cwd=where)
    metrics = where / "runs" / "run" / "metrics.jsonl"
    lines = metrics.read_bytes().split(b"\n")
    assert lines[DAMAGED_LINE - 1].startswith(b'{"kind":"step"')
    LOST.append(json.loads(lines[DAMAGED_LINE - 1])["step"])
    lines[DAMAGED_LINE - 1] = lines[DAMAGED_LINE - 1][:30] + b"\xff" + lines[DAMAGED_LINE - 1][31:]
    metrics.write_bytes(b"\n".join(lines))
    return where / "runs" / "run"


WARNING = f"metrics.jsonl: line {DAMAGED_LINE} not UTF-8 text (damaged): read past"


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
