"""The overlay bench (bench/compare.py) runs as a script in its smallest mode and prints its
figures: one round of two 1-second windows on the `tiny` preset (torch on one thread), 5 overlays
of 500 steps."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import warm_process

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "compare.py"
NUMBER = r"[\d,.]+"


def some_text(tmp_path: Path) -> str:
    """A corpus every machine has (Python's own argparse source, ~100 KB): the bench only needs
    some text to train `tiny` on, not Tiny Shakespeare beside the checkout."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(Path(argparse.__file__).read_text(encoding="utf-8"), encoding="utf-8")
    return str(corpus)


def test_compare_bench_prints_its_figures(tmp_path: Path) -> None:
    args = [
        sys.executable,
        str(BENCH),
        "--data",
        some_text(tmp_path),
        "--rounds",
        "1",
        "--window",
        "1",
        "--steps",
        "500",
        "--preset",
        "tiny",
        "--torch-threads",
        "1",
    ]
    done = warm_process.run(args, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(r"wrote 5 runs of 500 steps in [\d.]+ s", out), out
    assert (
        "tiny live in the app at 160x48 (torch on 1 thread): 1 rounds of 2 windows of 1 s "
        "(alone, 5 overlaid), alternating" in out
    )
    round_line = rf"round 1: alone {NUMBER} tok/s \(\d+ steps\)   5 overlaid {NUMBER} tok/s \(\d+ steps\)   ratio {NUMBER}"
    assert re.search(round_line, out), out
    assert re.search(rf"the run's median step: {NUMBER} ms", out), out
    ratio = rf"median of 1 rounds {NUMBER} \(goal >= 0.99: (PASS|FAIL)\); rounds: {NUMBER}"
    assert re.search(r"tokens/s with 5 runs overlaid / the cockpit alone: " + ratio, out), out
    assert re.search(
        rf"UI thread CPU s per s \(medians\): alone {NUMBER}  overlaid {NUMBER}; the overlays add",
        out,
    ), out
    # a window may hold no redraw of the loss panel (at most one a second): then it says so
    draw = r"(\d+ draws, median UI-thread CPU [\d.]+ ms, wall [\d.]+ ms|no draw in the windows)"
    assert re.search(r"loss panel draw, alone: " + draw, out), out
    assert re.search(r"loss panel draw, 5 overlaid: " + draw, out), out


def test_compare_bench_refuses_a_bad_option_in_one_line(tmp_path: Path) -> None:
    done = warm_process.run(
        [sys.executable, str(BENCH), "--data", some_text(tmp_path), "--preset", "no-such-preset"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("compare: --preset no-such-preset: "), (
        done.stderr
    )
    done = warm_process.run(
        [sys.executable, str(BENCH), "--window", "0"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "compare: --window must be a positive number of seconds"
    missing = tmp_path / "nowhere.txt"
    done = warm_process.run(
        [sys.executable, str(BENCH), "--data", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"compare: no corpus at {missing}: pass --data PATH (a text file)"
