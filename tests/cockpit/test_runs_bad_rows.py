"""`cockpit runs` when some runs are bad: a summary.json of the wrong types, records of the wrong
types, a run directory another user may not read. Each bad run is one row saying what is wrong
(or, where its metrics.jsonl is sound, listed as it is: the summary is rebuilt from it); the
others list; exit 0, no traceback. A real tiny run, copied and damaged; the commands as the CLI
runs them (`cockpit_here`)."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from command_here import cockpit_here
from run_copies import train_here

import cockpit.cli.ps  # noqa: F401

# everything the listing imports, loaded before a child gives up root (it may not read the
# interpreter's own library afterwards)
import cockpit.figures.numbers  # noqa: F401
import engine.control.live_runs  # noqa: F401
import engine.rundir.lock  # noqa: F401
from cockpit.cli import runs as runs_command

REPO = Path(__file__).resolve().parents[2]


def cockpit(*argv: str, cwd: Path, columns: int = 80) -> subprocess.CompletedProcess[str]:
    return cockpit_here(*argv, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": str(columns)})


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    where = tmp_path_factory.mktemp("bad-rows")
    train_here(Path("runs/good"), ["train.max_steps=30", "checkpoint.interval=10"], isolated_env, cwd=where)
    return where / "runs" / "good"


def copy_of(good: Path, root: Path, name: str) -> Path:
    return Path(shutil.copytree(good, root / name))


def edit_summary(run_dir: Path, text: str | None = None, **changes: object) -> None:
    path = run_dir / "summary.json"
    path.write_text(text if text is not None else json.dumps({**json.loads(path.read_text()), **changes}))


def test_summaries_of_the_wrong_types_are_rebuilt_and_every_run_lists(good: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    edit_summary(copy_of(good, root, "step-lots"), step="lots")
    edit_summary(copy_of(good, root, "best-garbage"), best_vals="garbage")
    overflow = copy_of(good, root, "overflow")
    edit_summary(overflow, (overflow / "summary.json").read_text().replace('"step_time_s":', '"step_time_s":1e999,"_":'))
    edit_summary(copy_of(good, root, "negative-offset"), offset=-5)
    edit_summary(copy_of(good, root, "state-number"), last_state=7, world_size=0)
    copy_of(good, root, "good")
    done = cockpit("runs", str(root), "--json", cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    listed = {r["name"]: r for r in json.loads(done.stdout)}
    assert len(listed) == 6
    reference = listed.pop("good")
    for name, run in listed.items():
        same = {k: v for k, v in run.items() if k not in ("run_dir", "name", "last_checkpoint", "size_bytes")}
        assert same == {k: v for k, v in reference.items() if k in same}, name
        assert run["problem"] is None and run["step"] == 30 and run["state"] == "finished"
        assert json.loads((root / name / "summary.json").read_text())["step"] == 30  # sound again
    table = cockpit("runs", str(root), cwd=tmp_path)
    assert table.returncode == 0 and len(table.stdout.splitlines()) == 7, table.stdout + table.stderr


def test_records_of_the_wrong_types_do_not_break_the_listing(good: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    odd = copy_of(good, root, "odd-records")
    (odd / "summary.json").unlink()
    with (odd / "metrics.jsonl").open("a") as f:
        for record in (
            {"kind": "run_started", "time": 1e999, "preset": 5, "start_step": 30, "max_steps": "lots"},
            {"kind": "step", "time": "now", "step": "lots", "tokens": -1},
            {"kind": "eval", "step": 31, "val_loss": "low", "train_time_s": []},
            {"kind": "checkpoint", "step": [], "path": 3},
            {"kind": "state", "state": None, "step": 31},
        ):
            f.write(json.dumps(record, separators=(",", ":")) + "\n")  # as the engine writes
    done = cockpit("runs", str(root), cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.splitlines()[1].startswith("odd-records")


def test_a_run_another_user_may_not_read_is_one_row_saying_so(
    good: Path, request: pytest.FixtureRequest
) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to list the runs as a second user (uid 65534)")
    # under /tmp itself: pytest's own temporary folders are root's alone
    place = Path(tempfile.mkdtemp(prefix="cockpit-runs-"))
    request.addfinalizer(lambda: shutil.rmtree(place, ignore_errors=True))
    root = place / "runs"
    copy_of(good, root, "theirs").chmod(0o700)  # root's own: not for uid 65534
    copy_of(good, root, "shared")
    for path in (place, root, *root.joinpath("shared").rglob("*"), root / "shared"):
        path.chmod(0o777 if path.is_dir() else 0o666)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: uid 65534 lists the runs, its table into the pipe
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            out = io.StringIO()
            sys.stdout = out
            code = runs_command.run(argparse.Namespace(root=str(root), json=False, since=None))
            os.write(write, out.getvalue().encode())
        except BaseException as e:  # noqa: BLE001 - said in the pipe, for the assertion
            os.write(write, f"{type(e).__name__}: {e}".encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        table = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, table
    lines = table.splitlines()
    assert lines[1].startswith("shared") and "finished" in lines[1] and "30/30" in lines[1]
    assert lines[2].split() == ["theirs", "-", "unreadable", "cannot", "read", "it", "(Permission", "denied)"]


def test_a_branch_keeps_its_fork_marker_at_80_columns(good: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    parent = copy_of(good, root, "a-parent-run-with-a-long-name-20260101-120000")
    branch = root / "its-branch-with-a-lower-learning-rate-20260101-130000"
    made = cockpit("fork", str(parent / "ckpt-00000020.pt"), "--run-dir", str(branch), "--no-start",
                   cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    for columns in (80, 60):
        done = cockpit("runs", str(root), cwd=tmp_path, columns=columns)
        assert done.returncode == 0, done.stderr
        row = next(line for line in done.stdout.splitlines() if line.startswith("its"))
        # both names whole (each is another command's argument), the row as wide as they need
        assert row.startswith(f"{branch.name} <- {parent.name}@20 "), done.stdout
        assert " forked " in row  # made by --no-start, not trained yet: not "crashed"


def test_summary_temporaries_left_by_a_kill_are_cleared_when_it_is_next_written(good: Path, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    run_dir = copy_of(good, root, "killed-mid-write")
    old, fresh = run_dir / ".summary.json.0badf00d.tmp", run_dir / ".summary.json.5eed5eed.tmp"
    old.write_bytes(b'{"version":1,"st')  # what a kill mid-write leaves
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    fresh.write_bytes(b'{"version":1')  # a writer at work now: not a leftover
    (run_dir / "summary.json").unlink()  # the next read rebuilds and writes it
    done = cockpit("runs", str(root), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "summary.json").is_file()
    assert not old.exists() and fresh.exists()
