"""`cockpit fork`: a branch from a checkpoint, with changed settings, that continues the
parent's curves and leaves the parent untouched (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import warm_process
from run_copies import train_here
from tiny import tiny_overrides

REPO = Path(__file__).resolve().parents[2]


def cockpit(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return warm_process.run(
        [sys.executable, "-m", "cockpit", *argv], capture_output=True, text=True, cwd=cwd,
        timeout=180, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    where = tmp_path_factory.mktemp("fork")  # trained here (the forks are real processes)
    # the smallest model (the branches inherit it): what is tested is steps, files and settings
    sets = tiny_overrides("train.max_steps=60", "checkpoint.interval=20")
    train_here(Path("runs/parent"), sets, isolated_env, cwd=where)
    return where / "runs" / "parent"


def test_a_branch_starts_at_the_checkpoint_with_the_new_settings_and_the_parents_curve(
    parent: Path,
) -> None:
    before = sorted(p.name for p in parent.iterdir())
    size = (parent / "metrics.jsonl").stat().st_size
    done = cockpit("fork", str(parent / "ckpt-00000040.pt"), "--set", "optim.lr=1e-3",
                   "--headless", "--no-telemetry", cwd=parent.parent.parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (branch,) = parent.parent.glob("parent-fork-40-*")
    fork = json.loads((branch / "fork.json").read_text())
    assert fork["parent"] == str(parent.resolve()) and fork["step"] == 40
    assert (branch / "ckpt-00000040.pt").samefile(parent / "ckpt-00000040.pt")  # the weights
    assert json.loads((branch / "config.json").read_text())["optim"]["lr"] == 1e-3
    events = records(branch / "metrics.jsonl")
    steps = [e["step"] for e in events if e["kind"] == "step"]
    assert steps[:40] == list(range(1, 41))  # the parent's curve up to the branch point
    assert steps[40:] == list(range(41, 61))  # then the branch's own steps
    started = [e for e in events if e["kind"] == "run_started"][-1]
    assert started["start_step"] == 40 and str(branch) in started["resumed_from"]
    assert sorted(p.name for p in parent.iterdir()) == before  # the parent is untouched
    assert (parent / "metrics.jsonl").stat().st_size == size


def test_a_fork_refused_is_one_line_and_makes_nothing(parent: Path) -> None:
    here = parent.parent.parent
    for argv, expected in [
        (["fork", "nowhere"], "no such run directory or checkpoint"),
        (["fork", str(parent), "--set", "model.n_layer=8"], "model.n_layer"),
        (
            ["fork", str(parent), "--set", "train.max_steps=120", "--run-dir", str(parent)],
            "exists already",
        ),
        # its newest checkpoint is at its max_steps: a branch would train nothing
        (
            ["fork", str(parent)],
            "the branch would train nothing; raise it too, e.g. --set train.max_steps=120",
        ),
    ]:
        done = cockpit(*argv, "--no-start", cwd=here)
        assert done.returncode == 2, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "Traceback" not in done.stderr
    assert not list(parent.parent.glob("parent-fork-60-*"))


def test_cockpit_runs_shows_a_branch_under_its_parent(parent: Path) -> None:
    here = parent.parent.parent
    branch = parent.parent / "branch-b"
    done = cockpit(
        "fork", str(parent / "ckpt-00000040.pt"), "--run-dir", str(branch), "--no-start", cwd=here
    )
    assert done.returncode == 0, done.stderr
    listed = cockpit("runs", str(parent.parent), "--json", cwd=here)
    assert listed.returncode == 0, listed.stderr
    runs = {r["name"]: r for r in json.loads(listed.stdout)}
    fork = json.loads((branch / "fork.json").read_text())
    assert runs["branch-b"]["parent"] == {
        "run": str(parent.resolve()),
        "step": 40,
        "time": fork["time"],
    }
    assert runs["branch-b"]["started"] == fork["time"]  # it began when it was made
    table = cockpit("runs", str(parent.parent), cwd=here)
    assert "branch-b <- parent@40" in table.stdout


def test_a_branch_made_with_no_start_trains_with_its_settings_by_the_printed_command(
    parent: Path,
) -> None:
    here = parent.parent.parent
    branch = parent.parent / "branch-later"
    made = cockpit("fork", str(parent / "ckpt-00000040.pt"), "--set", "optim.lr=1e-3",
                   "--set", "train.max_steps=70", "--run-dir", str(branch), "--no-start", cwd=here)  # fmt: skip
    assert made.returncode == 0, made.stderr
    printed = made.stdout.strip().splitlines()[-1]
    assert printed == f"train it: cockpit --resume {branch}"
    argv = printed.removeprefix("train it: cockpit ").split()
    done = cockpit(*argv, "--headless", "--no-telemetry", cwd=here)  # the command, as printed
    assert done.returncode == 0, done.stderr
    assert "finished at step 70" in done.stdout  # the fork's max_steps, not the parent's 60
    assert json.loads((branch / "config.json").read_text())["optim"]["lr"] == 1e-3
    started = [e for e in records(branch / "metrics.jsonl") if e["kind"] == "run_started"][-1]
    assert any("optim.lr" in note for note in started["notes"])
    # once the branch has checkpoints of its own, their config rules: a resume adds nothing
    again = cockpit("--resume", str(branch), "--set", "train.max_steps=80", "--headless",
                    "--no-telemetry", cwd=here)  # fmt: skip
    assert again.returncode == 0, again.stderr
    started = [e for e in records(branch / "metrics.jsonl") if e["kind"] == "run_started"][-1]
    assert not any("optim.lr" in note for note in started["notes"])


def test_a_fork_into_a_read_only_place_is_one_line_and_leaves_nothing(
    parent: Path, tmpfs: Callable[[str], Path]
) -> None:
    place = tmpfs("ro,size=1m")
    done = cockpit("fork", str(parent / "ckpt-00000040.pt"), "--run-dir", str(place / "b"),
                   "--no-start", cwd=parent.parent.parent)  # fmt: skip
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"run directory {place / 'b'} is not writable (Read-only file system)" in lines[0]
    assert list(place.iterdir()) == []


def test_the_exit_reports_train_on_command_for_a_finished_branch_is_accepted(parent: Path) -> None:
    """A branch from step 40 finished at 100; the app's exit report said 'to train on: cockpit
    --resume BRANCH --set train.max_steps=80' (its start step doubled), which the resume refused
    ('finished at step 100/80'). The suggestion doubles the step the resume starts from, the
    newest checkpoint's, whatever step the app's view drew last: run as printed, it trains."""
    from cockpit.app.session_runs import SessionRun, format_exit_report

    here = parent.parent.parent
    branch = parent.parent / "branch-finished"
    made = cockpit("fork", str(parent / "ckpt-00000040.pt"), "--set", "train.max_steps=100",
                   "--run-dir", str(branch), "--headless", "--no-telemetry", cwd=here)  # fmt: skip
    assert made.returncode == 0, made.stderr
    final = (100, str(branch / "ckpt-00000100.pt"))
    for drawn in (40, 100):  # the branch's start step (as reported), and its end
        run = SessionRun("tiny", str(branch), "finished", drawn, 40, final)
        hint = format_exit_report([run]).splitlines()[-1]
        assert hint == f"finished; to train on: cockpit --resume {branch} --set train.max_steps=200"
    argv = hint.removeprefix("finished; to train on: cockpit ").split()
    done = cockpit(*argv, "--headless", "--no-telemetry", cwd=here)  # the command, as printed
    assert done.returncode == 0, done.stdout + done.stderr
    assert "finished at step 200" in done.stdout
