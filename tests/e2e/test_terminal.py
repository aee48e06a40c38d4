"""`cockpit` in a real terminal (tmux): start it, press keys, read the screen."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import psutil
import pytest
from command_here import cockpit_here
from tiny import set_args, tiny_overrides
from tmux_driver import TMUX_INSTALLED, Tmux
from warm_pane import pane_command

pytestmark = pytest.mark.skipif(not TMUX_INSTALLED, reason="tmux is not installed")

TINY = " ".join(
    set_args(
        tiny_overrides(
            "train.max_steps=1000000",
            "eval.interval=200",
            "sample.interval=200",
            "sample.max_new_tokens=16",
        )
    )
)


def cockpit(run_dir: Path) -> str:
    """The shell command of `cockpit` on a tiny run in `run_dir`, started warm (tests/warm_pane.py)."""
    return pane_command(
        ["-m", "cockpit", "--preset", "tiny", "--run-dir", str(run_dir), *TINY.split()]
    )


def test_cockpit_in_a_real_terminal(tmp_path):
    run_dir = tmp_path / "run"
    marker = tmp_path / "exited"
    command = (
        f"{cockpit(run_dir)}; "
        f"echo $? > {shlex.quote(str(marker))}; sleep 60"  # the pane stays to be read
    )
    term = Tmux(command)
    try:
        screen = term.wait_for("RUNNING")
        screen = term.wait_for("LR")
        assert "Loss" in screen and "Device" in screen
        term.wait_for("val ")  # an evaluation reached the loss panel's legend
        term.send("space")
        term.wait_for("PAUSED")
        term.send("space")
        term.wait_for("RUNNING")
        term.send("?")
        term.wait_for("checkpoint")  # the help screen lists every key
        term.send("Escape")
        time.sleep(0.5)  # a key right after ESC would read as alt+key
        deadline = time.monotonic() + 10
        while "this help" in term.screen() and time.monotonic() < deadline:
            time.sleep(0.2)
        term.send("q")
        term.wait_for("Quit (y)")
        term.send("y")
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), term.screen()
        assert marker.read_text().strip() == "0"
        saved = sorted(run_dir.glob("ckpt-*.pt"))
        assert saved, "quitting must leave a checkpoint"
        # Once the terminal is restored: where the run is and how to resume it.
        screen = term.wait_for("resume: cockpit --resume")
        flat = "".join(screen.split())  # long paths wrap at the pane's width
        step = int(saved[-1].stem.split("-")[1])
        assert f"rundir:{run_dir}" in flat, screen
        assert f"lastcheckpoint:{saved[-1]}(step{step})" in flat, screen
        assert f"resume:cockpit--resume{run_dir}" in flat, screen
    finally:
        term.kill()


def test_dropped_terminal_checkpoints_and_resume_continues(tmp_path):
    """SIGHUP, as when an SSH connection drops: the run is saved, then resumes where it stopped."""
    run_dir = tmp_path / "run"
    metrics = run_dir / "metrics.jsonl"
    term = Tmux(cockpit(run_dir))
    try:
        term.wait_for("RUNNING")
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline
            and metrics.exists()
            and metrics.read_text().count('"kind":"step"') < 20
        ):
            time.sleep(0.2)
    finally:
        term.kill()  # the pty closes: the process gets SIGHUP

    # The hang-up save is at the last step run (a periodic checkpoint may already exist from
    # earlier in the run, and the metrics file is written in batches): wait for the exit.
    def last_step() -> int:
        steps = [json.loads(x)["step"] for x in metrics.read_text().splitlines() if '"step"' in x]
        return max(steps, default=0)

    def newest() -> int:
        saved = sorted(run_dir.glob("ckpt-*.pt"))
        return int(saved[-1].stem.split("-")[1]) if saved else -1

    def still_running() -> bool:  # the cockpit process, which saves on SIGHUP, then exits
        for proc in psutil.process_iter(["cmdline"]):
            if str(run_dir) in " ".join(proc.info["cmdline"] or ()):
                return True
        return False

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and still_running():
        time.sleep(0.2)
    step = newest()
    assert step >= 0, "a dropped terminal must leave a checkpoint"
    assert step == last_step(), "the checkpoint must be at the last step run: none lost"
    resumed = cockpit_here(
        "train", "--headless", "--resume", str(run_dir), "--set", f"train.max_steps={step + 3}"
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"finished at step {step + 3}" in resumed.stdout
