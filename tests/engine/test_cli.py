"""The headless command line, run as a user runs it: a real `cockpit` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm_process
from tiny import set_args, tiny_overrides

TINY = set_args(tiny_overrides("sample.max_new_tokens=8"))


def headless_argv(run_dir: Path, *extra: str) -> list[str]:
    """The command line of a real headless run of the tiny preset in `run_dir`."""
    return [
        sys.executable, "-m", "cockpit", "train", "--headless", "--preset", "tiny",
        "--run-dir", str(run_dir), *extra,
    ]  # fmt: skip


def cockpit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return warm_process.run(
        [sys.executable, "-m", "cockpit", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TERM": "dumb"},
    )


def test_headless_run_end_to_end_then_resume(tmp_path):
    run_dir = tmp_path / "run"
    done = cockpit(
        "train",
        "--headless",
        "--preset",
        "tiny",
        "--run-dir",
        str(run_dir),
        *TINY,
        "--set",
        "train.max_steps=30",
        "--set",
        "eval.interval=10",
        "--set",
        "checkpoint.interval=10",
    )
    assert done.returncode == 0, done.stderr
    assert "step     30/30" in done.stdout
    assert "finished at step 30" in done.stdout
    assert "Traceback" not in done.stderr
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [10, 20, 30]
    assert sorted(p.name for p in run_dir.glob("ckpt-*.pt"))[-1] == "ckpt-00000030.pt"

    # A finished run is not run again: one line saying so and how to extend it, nothing touched.
    before = (run_dir / "metrics.jsonl").read_bytes()
    again = cockpit("train", "--headless", "--resume", str(run_dir))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == (
        f"{run_dir} is finished at step 30/30; extend it with "
        f"--resume {run_dir} --set train.max_steps=60"
    )
    assert (run_dir / "metrics.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    "args, message",
    [
        (["--preset", "nope"], "unknown preset 'nope'"),
        (["--set", "model.n_layers=2"], "unknown key 'n_layers' (did you mean 'n_layer'?)"),
        (["--set", "optim.lr=-1"], "optim.lr: expected a value > 0.0"),
        (["--set", "optim.lr"], "expected KEY=VALUE"),
        (["--set", "model.n_head=3"], "must be divisible by model.n_head"),
        (["--resume", "/no/such/run"], "--resume /no/such/run: no such run directory"),
        (["--preset", "/no/such/preset.toml"], "no such preset file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    result = cockpit("train", "--headless", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_data_fails_cleanly(tmp_path):
    result = cockpit(
        "train",
        "--headless",
        "--preset",
        "tiny",
        "--run-dir",
        str(tmp_path / "r"),
        "--data",
        "/no/such/file.txt",
    )
    # refused before anything starts: one line, exit 2, nothing on disk
    assert result.returncode == 2
    assert result.stderr.startswith("cockpit: --data /no/such/file.txt: no such file or folder")
    assert len(result.stderr.splitlines()) == 1 and not result.stdout
    assert not (tmp_path / "r").exists()


def test_presets_lists_names_origins_and_descriptions():
    result = cockpit("presets")
    assert result.returncode == 0
    line = next(x for x in result.stdout.splitlines() if x.startswith("nanogpt-cpu"))
    assert "built-in" in line and "nanoGPT's CPU recipe" in line


def test_no_terminal_falls_back_to_headless(tmp_path):
    result = cockpit(
        "--preset", "tiny", "--run-dir", str(tmp_path / "r"), *TINY, "--set", "train.max_steps=5"
    )
    assert result.returncode == 0, result.stderr
    assert "no terminal, running headless" in result.stderr
    assert "finished at step 5" in result.stdout


def test_a_terminal_with_no_input_runs_headless_instead_of_waiting_for_keys(tmp_path):
    """stdout a terminal, stdin /dev/null (a job started with `< /dev/null`): the app would wait
    for a q that can never come; the run trains headless and ends."""
    import pty

    primary, secondary = pty.openpty()
    try:
        result = warm_process.run(
            [sys.executable, "-m", "cockpit", "--preset", "tiny", "--run-dir", str(tmp_path / "r"),
             *TINY, "--set", "train.max_steps=5"],
            stdin=subprocess.DEVNULL, stdout=secondary, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(secondary)
        os.close(primary)
    assert result.returncode == 0, result.stderr
    assert "input is not a terminal" in result.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["step"] == 5


def test_sigterm_checkpoints_and_resume_continues(tmp_path):
    run_dir = tmp_path / "run"
    proc = warm_process.Popen(
        headless_argv(
            run_dir,
            *TINY,
            "--set",
            "train.max_steps=100000",
            "--set",
            "eval.interval=0",
            "--set",
            "sample.interval=0",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if metrics.exists() and '"kind":"step"' in metrics.read_text():
            break
        time.sleep(0.2)
    proc.terminate()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "SIGTERM: saving a checkpoint" in err
    ckpts = sorted(Path(run_dir).glob("ckpt-*.pt"))
    assert ckpts, out
    step = int(ckpts[-1].stem.split("-")[1])
    assert step > 0
    # Resume and extend the run by 5 steps: the curve continues where it stopped.
    resumed = cockpit(
        "train", "--headless", "--resume", str(run_dir), "--set", f"train.max_steps={step + 5}"
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"finished at step {step + 5}" in resumed.stdout
    records = [json.loads(x) for x in metrics.read_text().splitlines()]
    after = [
        r["step"] for r in records if r["kind"] == "step" and r["time"] > records[-1]["time"] - 60
    ]
    assert after[-5:] == list(range(step + 1, step + 6))


def test_resume_with_a_different_model_shape_is_refused(tmp_path, capsys):
    from cockpit.cli import main

    run_dir = tmp_path / "run"
    # the run to resume is made in this process (no second interpreter importing torch); the
    # refused resume is the real process under test
    code = main(["train", "--headless", "--preset", "tiny", "--run-dir", str(run_dir), *TINY,
                 "--set", "train.max_steps=3"])  # fmt: skip
    assert code == 0, capsys.readouterr()
    result = cockpit("train", "--headless", "--resume", str(run_dir), "--set", "model.n_embd=32")
    assert result.returncode == 2
    assert "cannot change model.n_embd on resume (16 -> 32)" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_a_reader_that_goes_away_does_not_stop_the_run(tmp_path):
    """`cockpit train --headless | head -1`: the pipe closes, the run trains on to its end."""
    run_dir = tmp_path / "r"
    reader = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    result = warm_process.run(
        headless_argv(run_dir, *TINY, "--set", "train.max_steps=40"),
        stdout=reader.stdin,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        env={**os.environ, "TERM": "dumb"},
    )
    reader.stdin.close()
    first = reader.stdout.read().decode()
    reader.wait(timeout=10)
    assert first.startswith("data ")  # the corpus line comes first; the rest went nowhere
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr
    assert (run_dir / "ckpt-00000040.pt").exists()
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["state"] == "finished"
