"""The open-run bench (bench/open_run.py) runs as a script and prints its figures: a short run
instead of a million steps."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import warm_process

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "open_run.py"


def test_open_run_bench_prints_its_figures() -> None:
    args = [sys.executable, str(BENCH), "--steps", "20000"]
    done = warm_process.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(r"wrote a run of 20,000 steps \([\d.]+ MB of metrics.jsonl\) in [\d.]+ s", out), out
    # every step and every eval (one each 250 steps)
    assert re.search(r"read_curves: 20,080 points, median of 3 [\d.]+ s", out), out
    assert re.search(r"RecordedRun \+ drain_events: [\d,]+ events, median of 3 [\d.]+ s", out), out
    # the app opened on the run, timed until its loss panel drew every step
    app_line = r"the app opened on it \(160x48, headless\) to a drawn loss curve: median of 3 [\d.]+ s \(each "
    assert re.search(app_line + r"[\d.]+, [\d.]+, [\d.]+ s\) \(the goal, < 2 s, is for 1,000,000 steps\)", out), out


def test_open_run_bench_refuses_a_bad_option_in_one_line() -> None:
    done = warm_process.run([sys.executable, str(BENCH), "--steps", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == "open_run: --steps and --repeats must be at least 1"
