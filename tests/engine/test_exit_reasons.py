"""How a run ends, and what it says about it: exit status, the final `state` record's reason,
and nothing on disk when the run never started."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import warm_process
from test_cli import headless_argv
from tiny import set_args, tiny_overrides
from tmux_driver import TMUX_INSTALLED, Tmux

from cockpit.cli import main
from engine.config.presets import load_preset
from engine.model.gpt import GPT
from engine.train.trainer import Trainer

SMALL = tiny_overrides("eval.interval=0", "sample.interval=0")
TINY_ARGS = [*set_args(SMALL), "--no-telemetry"]


def records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def final_state(run_dir: Path) -> dict:
    return [r for r in records(run_dir) if r["kind"] == "state"][-1]


def catches_sigterm(proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Wait until `proc` has a handler for SIGTERM (Linux: the SigCgt mask in /proc)."""
    deadline = time.monotonic() + timeout
    bit = 1 << (signal.SIGTERM - 1)
    while time.monotonic() < deadline:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        if int(caught.split()[1], 16) & bit:
            return
        time.sleep(0.01)
    raise AssertionError("the process never caught SIGTERM")


def poison_forward(monkeypatch: pytest.MonkeyPatch, from_call: int) -> None:
    """Make every training loss from the `from_call`-th forward on NaN (as a diverged run)."""
    real = GPT.forward
    calls = [0]

    def forward(self, idx, targets=None):
        logits, loss = real(self, idx, targets)
        if self.training:
            calls[0] += 1
            if calls[0] >= from_call and loss is not None:
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(GPT, "forward", forward)


# ---------------------------------------------------------------------- giving up on a NaN
def test_nan_with_no_checkpoint_to_roll_back_to_fails_with_the_reason(tmp_path):
    cfg = load_preset("default", [*SMALL, "train.max_steps=40", "checkpoint.interval=0"])
    trainer = Trainer(cfg, run_dir=tmp_path, telemetry=False, interactive=False)
    trainer.set_up()
    step_parts = trainer.built.instruments.step
    inner, calls = step_parts.forward, [0]

    def forward(x, y=None):
        calls[0] += 1
        logits, loss = inner(x, y)
        return logits, loss * (float("nan") if calls[0] == 8 else 1.0)

    step_parts.forward = forward
    assert trainer.run() == "failed"
    state = final_state(tmp_path)
    assert state["state"] == "failed"
    assert "no checkpoint to roll back to" in state["reason"]
    assert "stopped by user" not in json.dumps(records(tmp_path))
    # what there was is kept: the weights before the refused step
    assert (tmp_path / "ckpt-00000007.pt").exists()


def test_headless_gives_up_after_max_rollbacks_with_exit_1(tmp_path, capsys, monkeypatch):
    poison_forward(monkeypatch, from_call=12)
    run_dir = tmp_path / "run"
    code = main(
        [
            "train",
            "--headless",
            "--preset",
            "tiny",
            "--run-dir",
            str(run_dir),
            *TINY_ARGS,
            "--set",
            "train.max_steps=60",
            "--set",
            "checkpoint.interval=5",
            "--set",
            "train.max_rollbacks=2",
        ]
    )
    out = capsys.readouterr()
    assert code == 1
    assert "rollbacks did not help" in out.out
    assert "stopped by user" not in out.out + out.err
    state = final_state(run_dir)
    assert state["state"] == "failed" and "2 rollbacks did not help" in state["reason"]


# ---------------------------------------------------------------------- signals
def cli_process(run_dir: Path, *extra: str, warm: bool = False) -> subprocess.Popen:
    """A headless run in its own process; `warm`: forked from tests/warm_process.py's server
    (torch imported already), where the signal comes once the run trains, not while it starts."""
    popen = warm_process.Popen if warm else subprocess.Popen
    return popen(
        headless_argv(run_dir, *TINY_ARGS, "--set", "train.max_steps=100000", *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TERM": "dumb"},
    )


def test_sigterm_during_startup_stops_cleanly_and_says_why(tmp_path):
    run_dir = tmp_path / "run"
    proc = cli_process(run_dir)
    # as soon as cockpit catches SIGTERM (importing torch, preparing data: the trainer loop has
    # not started); a fixed sleep could land before the handler on a loaded machine
    catches_sigterm(proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Traceback" not in out + err
    assert "stopped at step 0: SIGTERM" in out
    # Stopped while the corpus was prepared (or before): nothing was accepted, so nothing is on
    # disk. Stopped later in the setup: the run directory records the reason, and no checkpoint.
    if run_dir.exists():
        state = final_state(run_dir)
        assert (state["state"], state["reason"], state["step"]) == ("stopped", "SIGTERM", 0)
        assert not list(run_dir.glob("ckpt-*.pt"))  # step 0: nothing trained, nothing to save


@pytest.mark.parametrize("sig, reason", [(signal.SIGHUP, "SIGHUP"), (signal.SIGTERM, "SIGTERM")])
def test_signal_mid_run_is_recorded_as_the_reason(tmp_path, sig, reason):
    run_dir = tmp_path / "run"
    proc = cli_process(run_dir, warm=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if metrics.exists() and '"kind":"step"' in metrics.read_text():
            break
        time.sleep(0.02)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    state = final_state(run_dir)
    assert (state["state"], state["reason"]) == ("stopped", reason)
    assert state["step"] > 0 and (run_dir / f"ckpt-{state['step']:08d}.pt").exists()
    assert f": {reason}" in out


@pytest.mark.skipif(not TMUX_INSTALLED, reason="tmux is not installed")
@pytest.mark.parametrize("sig", ["SIGHUP", "SIGTERM"])
def test_app_records_the_signal_as_the_reason(tmp_path, sig):
    run_dir = tmp_path / "run"
    metrics = run_dir / "metrics.jsonl"
    command = (
        f"{shlex.quote(sys.executable)} -m cockpit --preset tiny --run-dir "
        f"{shlex.quote(str(run_dir))} {' '.join(TINY_ARGS)} --set train.max_steps=1000000"
    )
    term = Tmux(command, prefix="cockpit-reason", term=None)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if metrics.exists() and metrics.read_text().count('"kind":"step"') >= 5:
                break
            time.sleep(0.2)
        if sig == "SIGTERM":  # a scheduler, with the terminal still there
            for proc in psutil.process_iter(["cmdline"]):
                cmdline = proc.info["cmdline"] or ()
                if cmdline[:1] == [sys.executable] and str(run_dir) in " ".join(cmdline):
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if '"state":"stopped"' in metrics.read_text():
                    break
                time.sleep(0.2)
    finally:
        term.kill()  # SIGHUP
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if metrics.exists() and '"state":"stopped"' in metrics.read_text():
            break
        time.sleep(0.2)
    state = final_state(run_dir)
    assert (state["state"], state["reason"]) == ("stopped", sig)


# ---------------------------------------------------------------------- nothing on disk
def test_data_error_leaves_nothing_on_disk(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["train", "--headless", "--preset", "tiny", "--data", "/no/such/corpus.txt"])
    out = capsys.readouterr()
    assert code == 2  # refused before the run starts
    assert "/no/such/corpus.txt" in out.out + out.err
    assert not (tmp_path / "runs").exists()
    code = main(
        ["train", "--headless", "--preset", "tiny", "--run-dir", "r", "--data", "/no/such/x.txt"]
    )
    assert code == 2
    assert not (tmp_path / "r").exists()
