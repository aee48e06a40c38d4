"""A file named on the command line that is not a regular file, or is far too large for what it
claims to be, is refused in one line (exit 2) before it is read: `--preset /dev/zero` read until
the kernel killed it at 24 GB, and a FIFO as `--init-from`, `sample`'s checkpoint or a preset
blocked for ever (past the first SIGTERM). Real processes, each with a memory cap and a timeout:
before the fix they fail by running out of either, not by taking the machine down."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm_process

ROOT = Path(__file__).resolve().parents[2]
MEMORY_CAP = 6 * 1024**3  # far above what these commands need; far below a whole /dev/zero


def cockpit(cwd: Path, *args: str) -> tuple[int, list[str]]:
    """`cockpit ARGS` in `cwd`: its exit status and its output's lines (None: it hung)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = warm_process.run(
            [sys.executable, "-m", "cockpit", *args], cwd=cwd, env=env, capture_output=True,
            text=True, timeout=60, memory_cap=MEMORY_CAP,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AssertionError(f"cockpit {' '.join(args)} hung on its input") from None
    return done.returncode, (done.stdout + done.stderr).splitlines()


def refused(cwd: Path, *args: str) -> str:
    """The one line `cockpit ARGS` is refused with (exit 2, no traceback)."""
    code, lines = cockpit(cwd, *args)
    assert len(lines) == 1 and lines[0].startswith("cockpit"), lines
    assert code == 2, (code, lines)
    return lines[0]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "named.toml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("command", [["presets", "show"], ["train", "--headless", "--preset"]])
def test_dev_zero_as_a_preset_is_refused_unread(tmp_path: Path, command: list[str]) -> None:
    line = refused(tmp_path, *command, "/dev/zero")
    assert line == (
        "cockpit: /dev/zero is not a regular file (a character device); a preset must be one"
    )


def test_a_fifo_as_a_preset_or_series_file_is_refused_unread(tmp_path: Path, fifo: Path) -> None:
    assert "is not a regular file (a FIFO); a preset must be one" in refused(
        tmp_path, "train", "--headless", "--preset", str(fifo)
    )
    assert "is not a regular file (a FIFO); a series file must be one" in refused(
        tmp_path, "ablate", str(fifo)
    )


def test_a_preset_far_too_large_is_refused_by_its_size(tmp_path: Path) -> None:
    huge = tmp_path / "huge.toml"
    with huge.open("wb") as f:
        f.truncate(40 * 1024 * 1024)  # sparse: 40 MiB of nothing, written in no time
    line = refused(tmp_path, "presets", "show", str(huge))
    assert line == f"cockpit: {huge} is 40 MiB: a preset is at most 16 MiB"


def test_a_fifo_as_weights_or_a_checkpoint_is_refused_unread(tmp_path: Path) -> None:
    """--init-from a FIFO hung (and ignored the first SIGTERM); so did `sample`, `fork` and
    `--resume` of one, and of a run directory whose newest checkpoint is one. Nothing is left on
    disk."""
    os.mkfifo(tmp_path / "weights.pt")
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "ckpt-00000005.pt")
    train = ["train", "--headless", "--preset", "tiny", "--no-telemetry", "--run-dir", "new"]
    line = refused(tmp_path, *train, "--init-from", "weights.pt")
    assert line.startswith("cockpit: --init-from weights.pt: ")
    assert line.endswith("weights.pt is not a regular file (a FIFO); a weights file must be one")
    line = refused(tmp_path, *train, "--init-from", "run")
    assert line.endswith(
        "ckpt-00000005.pt is not a regular file (a FIFO); a checkpoint must be one"
    )
    assert not (tmp_path / "new").exists()
    fifo_checkpoint = (
        "run/ckpt-00000005.pt is not a regular file (a FIFO); a checkpoint must be one"
    )
    assert refused(tmp_path, "sample", "run") == f"cockpit: {fifo_checkpoint}"
    assert refused(tmp_path, "sample", "weights.pt") == (
        "cockpit: weights.pt is not a regular file (a FIFO); a checkpoint must be one"
    )
    assert refused(tmp_path, "fork", "run") == f"cockpit fork: {fifo_checkpoint}"
    resumed = ["train", "--headless", "--no-telemetry", "--resume"]
    assert refused(tmp_path, *resumed, "run") == f"cockpit: {fifo_checkpoint}"
    assert refused(tmp_path, *resumed, "weights.pt") == (
        "cockpit: weights.pt is not a regular file (a FIFO); a checkpoint must be one"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "weights.pt"]


def test_a_run_whose_small_files_are_fifos_still_lists(tmp_path: Path, isolated_env) -> None:
    """`cockpit runs` hung on a run directory whose config.json was a FIFO (anyone's, in a
    shared runs/); so would its fork.json and summary.json. Each is read as unreadable."""
    from run_copies import train_here
    from tiny import tiny_overrides

    run = train_here(tmp_path / "runs" / "odd", tiny_overrides("train.max_steps=2"), isolated_env)
    for name in ("config.json", "fork.json", "summary.json"):
        (run / name).unlink(missing_ok=True)
        os.mkfifo(run / name)
    code, lines = cockpit(tmp_path, "runs")
    assert code == 0, lines
    assert any(line.startswith("odd ") for line in lines), lines


def test_a_run_whose_metrics_log_is_a_fifo_is_refused_on_resume(
    tmp_path: Path, isolated_env
) -> None:
    """--resume read the metrics log (for the run's past curves) and waited on a FIFO there for
    ever; `cockpit runs` reads it too. The resume says so in one line; runs does not wait on it."""
    from run_copies import train_here
    from tiny import tiny_overrides

    run = train_here(tmp_path / "runs" / "odd", tiny_overrides("train.max_steps=2"), isolated_env)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    code, lines = cockpit(tmp_path, "train", "--headless", "--no-telemetry", "--resume",
                          "runs/odd", "--set", "train.max_steps=4")  # fmt: skip
    assert code == 2 and not any("Traceback" in line for line in lines), lines
    assert lines[-1] == (
        "cockpit: runs/odd/metrics.jsonl is not a regular file (a FIFO); a metrics log must be one"
    )
    code, lines = cockpit(tmp_path, "runs")  # not a run any more: listed as none, not waited on
    assert code == 0 and not any("Traceback" in line for line in lines), lines
