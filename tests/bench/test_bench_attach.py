"""The attach bench (bench/attach.py) runs as a script and prints every figure with its goal:
tiny settings (the `tiny` preset, one round of one-second windows, a short history), real
engine processes, real sockets, real `cockpit attach` apps in tmux where tmux is installed."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import warm_process
from tmux_driver import TMUX_INSTALLED

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "attach.py"
TINY = [
    "--tiny", "--rounds", "1", "--window", "1", "--settle", "0.5", "--counts", "1",
    "--presses", "2", "--history", "1000", "--attaches", "1",
]  # fmt: skip


def test_attach_bench_prints_its_figures_with_verdicts() -> None:
    kinds = "app,bare" if TMUX_INSTALLED else "bare"
    # its runs start warm too (the tests' server named to it); the app viewers in tmux are
    # `cockpit attach` as a person starts it
    done = warm_process.run(
        [sys.executable, str(BENCH), *TINY, "--kinds", kinds],
        capture_output=True, text=True, timeout=180, cwd=ROOT, env=warm_process.sharing_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # 1. tokens/s with no viewer and one of each kind, the ratio and its verdict
    assert re.search(r"round 1: tok/s no viewer [\d,]+ ", out), out
    assert re.search(
        r"1 bare client: median [\d,]+ tok/s .* ratio to no viewer: median [\d.]+ goal >= 0\.97: (PASS|FAIL)",
        out,
    ), out
    if TMUX_INSTALLED:
        assert re.search(r"1 app: median [\d,]+ tok/s .* goal >= 0\.97: (PASS|FAIL)", out), out
    # 2. pause latency against the step time, 3. attach time against 1 s
    assert re.search(
        r"2\. pause key .* 2 presses: p50 [\d.]+ ms  p95 [\d.]+ ms .*: (PASS|FAIL)\)", out
    ), out
    assert re.search(
        r"3\. attach .* 1,000 steps of history .* median of 1 \d+ ms .*goal < 1 s: (PASS|FAIL)", out
    ), out
    assert "Traceback" not in done.stderr


def test_attach_bench_refuses_a_bad_option_in_one_line() -> None:
    done = warm_process.run(
        [sys.executable, str(BENCH), "--kinds", "ghost"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2  # argparse's usage error, after every import worked
    assert "unknown viewer kind ghost" in done.stderr
    assert "Traceback" not in done.stderr
