"""The runs bench (bench/runs.py) runs as a script and prints every figure with its goal: a few
short runs instead of 200 long ones."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "runs.py"


def test_runs_bench_prints_its_figures_with_verdicts(tmp_path: Path) -> None:
    where = tmp_path / "runs"
    args = [sys.executable, str(BENCH), "--runs", "7", "--steps", "3000", "--repeats", "1", "--dir", str(where)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(r"built 7 runs of 3,000 steps \([\d.]+ GB of metrics.jsonl\) in [\d.]+ s", out), out
    assert re.search(r"1\. no summaries .*: best of 1 [\d.]+ s", out), out
    assert re.search(r"2\. with summaries: 7 runs listed, best of 1 [\d.]+ s .*\(goal < 1 s: (PASS|FAIL)\)", out), out
    assert re.search(r"3\. for scale: an interpreter importing the CLI: [\d.]+ s", out), out
    assert len(list(where.glob("*/summary.json"))) == 7  # the listing wrote them back
    again = subprocess.run(args, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert again.returncode == 0 and "reusing 7 runs of 3,000 steps" in again.stdout


def test_runs_bench_refuses_a_bad_option_in_one_line() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--runs", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--runs, --steps and --repeats must be at least 1" in done.stderr
    assert "Traceback" not in done.stderr
