"""`cockpit compare RUN RUN ...` as a person uses it: two real finished runs, the app in tmux with
the second overlaid on the first, the legend, the x axis, the runs screen, quitting; and its
refusals, one line each."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import warm_process
from run_copies import train_here
from tmux_driver import TMUX_INSTALLED, Tmux
from warm_pane import pane_command

REPO = Path(__file__).resolve().parents[2]


def cockpit(cwd: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`cockpit ARGV` in `cwd`, a real process started warm (tests/warm_process.py)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return warm_process.run(
        [sys.executable, "-m", "cockpit", *argv],
        capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    """runs/base and runs/hot (a higher LR): 60 steps of `tiny` each, finished (trained in this
    process: what is under test, `cockpit compare`, runs as a real process)."""
    root = tmp_path_factory.mktemp("compare")
    for name, lr in (("base", "3e-3"), ("hot", "6e-3")):
        train_here(
            Path("runs") / name, ["train.max_steps=60", f"optim.lr={lr}"], isolated_env, cwd=root
        )
    return root


def test_refusals_are_one_line(two_runs: Path) -> None:
    cases = {
        ("runs/nope",): "runs/nope: no such run directory",
        ("runs",): "runs: not a run directory (no metrics.jsonl)",
        ("runs/base", "runs/base"): "a run is named twice",
        ("runs/base", *["runs/hot"] * 9): "10 runs: compare at most 9 at once",
        ("runs/base", "runs/hot"): "no terminal: cannot open the app here",  # not a tty here
    }
    for argv, expected in cases.items():
        if len(set(argv)) < len(argv) and len(argv) > 2:
            expected = "a run is named twice"
        done = cockpit(two_runs, "compare", *argv, timeout=60)
        assert done.returncode == 2, (argv, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (argv, done.stderr)
        assert "Traceback" not in done.stderr


@pytest.mark.skipif(not TMUX_INSTALLED, reason="tmux is not installed")
def test_compare_two_runs_in_a_terminal(two_runs: Path) -> None:
    compare = pane_command(["-m", "cockpit", "compare", "runs/base", "runs/hot"])
    command = f"cd {shlex.quote(str(two_runs))} && {compare}; sleep 30"
    with Tmux(
        f"env PYTHONPATH={shlex.quote(str(REPO))} sh -c {shlex.quote(command)}", 100, 30
    ) as term:
        term.wait_for("FINISHED", timeout=90)  # the runs open in a worker: STARTING until then
        screen = term.wait_for("hot ")  # the legend names the overlaid run
        assert "now " in screen
        term.send("t")
        term.wait_for("x:tokens")
        term.send("t")
        term.wait_for("x:time")
        term.send("space")  # nothing runs: it says why
        term.wait_for("Run is over")  # the toast saying why
        term.send("h")
        screen = term.wait_for("Runs under runs: 2")
        assert "✓" in screen and "●" in screen  # hot overlaid (selected), base on screen
        term.send("Escape")
        term.wait_for("x:time")
        term.send("q")
        term.wait_for("Quit")
        term.send("y")
        screen = term.wait_for("to train on: cockpit --resume")
        assert "runs/base" in screen
