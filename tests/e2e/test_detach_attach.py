"""A run that outlives its terminal: `cockpit start` in tmux, the terminal killed (as an SSH
link drops), `cockpit attach` from a new one, and the keys still steer the run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_process
from tmux_driver import TMUX_INSTALLED, Tmux
from warm_pane import pane_command

from engine.control.client import RemoteEngine
from engine.control.live_runs import find_live_runs, probe

pytestmark = pytest.mark.skipif(not TMUX_INSTALLED, reason="tmux is not installed")

LONG = "--preset tiny --set train.max_steps=1000000 --no-telemetry"
REPO = Path(__file__).resolve().parents[2]


def cockpit(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`cockpit ARGV` in `tmp_path`, a real process started warm (tests/warm_process.py)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return warm_process.run(
        [sys.executable, "-m", "cockpit", *argv],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env,
    )  # fmt: skip


def end(pid: int | None) -> None:
    """The background engine must not outlive the test."""
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait(condition, timeout_s: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_start_kill_the_terminal_attach_from_another_and_steer(tmp_path: Path) -> None:
    pid = None
    try:
        start = pane_command(["-m", "cockpit", "start", *LONG.split()])
        with Tmux(f"cd {tmp_path} && {start}; sleep 60", 120, 36) as first:
            first.wait_for("RUNNING", timeout=90)
            runs = find_live_runs(tmp_path / "runs")
            assert len(runs) == 1
            pid, run_dir = runs[0].pid, runs[0].run_dir
            assert pid is not None and os.getsid(pid) == pid  # its own session: no SIGHUP
            wait(lambda: len(probe(run_dir).viewers) == 1)  # the app's viewer, besides us
        # the session (and its terminal) is gone: the viewer detached, the run went on
        wait(lambda: (live := probe(run_dir)) is not None and not live.viewers, 30)
        before = probe(run_dir).step
        wait(lambda: probe(run_dir).step > before + 20, 30)
        attach = pane_command(["-m", "cockpit", "attach"])
        with Tmux(f"cd {tmp_path} && {attach}; sleep 60", 120, 36) as second:
            second.wait_for("RUNNING", timeout=60)
            second.send("space")
            second.wait_for("PAUSED", timeout=30)
            assert probe(run_dir).state == "paused"
            second.send("q")
            second.wait_for("Detach (d)", timeout=10)
            second.send("s")  # stop the run: it checkpoints and ends, the app reports it
            screen = second.wait_for("resume: cockpit --resume", timeout=60)
            assert "last checkpoint" in screen
        wait(lambda: probe(run_dir) is None, 30)
        metrics = (run_dir / "metrics.jsonl").read_text()
        assert '"state": "stopped"' in metrics or '"state":"stopped"' in metrics
    finally:
        end(pid)


def test_start_without_attach_prints_the_run_and_detach_is_its_alias(tmp_path: Path) -> None:
    result = cockpit(tmp_path, "--detach", *LONG.split(), "--no-attach")
    pids = []
    try:
        assert result.returncode == 0, result.stderr
        assert "started in the background" in result.stdout
        runs = find_live_runs(tmp_path / "runs")
        assert len(runs) == 1 and runs[0].preset == "tiny"
        pids.append(runs[0].pid)
        assert str(runs[0].run_dir.relative_to(tmp_path)) in result.stdout
        assert (runs[0].run_dir / "engine.log").is_file()
        engine = RemoteEngine(runs[0].run_dir)
        engine.stop(checkpoint=True, reason="test over")
        assert engine.run() == "stopped"
    finally:
        for pid in pids:
            end(pid)


def test_a_start_refused_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    for argv, expected in [
        (["start", "--preset", "no-such-preset"], "no-such-preset"),
        (["start", "--preset", "tiny", "--set", "train.max_steps=-1"], "max_steps"),
        (["start", "--resume", "nowhere"], "no such run directory"),
    ]:
        result = cockpit(tmp_path, *argv)
        assert result.returncode == 2, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()
