"""The one listing of a run directory's checkpoints, and everyone who uses it: the store, a viewer,
`cockpit serve` and the runs screen name the same newest checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.checkpoint.names import checkpoint_path, latest_checkpoint, list_checkpoints, step_of


def _run_dir(root: Path) -> Path:
    """A run directory with every kind of name a real one can hold."""
    run = root / "run"
    run.mkdir()
    for name in ("ckpt-00000010.pt", "ckpt-7.pt", "ckpt-100000000.pt"):  # ckpt-7: another tool's
        (run / name).write_bytes(b"weights")
    (run / "ckpt-00000020.dcp").mkdir()  # a sharded checkpoint: a directory
    (run / "ckpt-00000020.dcp" / "meta.pt").write_bytes(b"meta")
    os.link(run / "ckpt-00000010.pt", run / "best.pt")  # best: a link, not a checkpoint of its own
    (run / "best.dcp").mkdir()
    for junk in (
        ".ckpt-00000030.pt.a1b2.tmp",  # a save killed mid-write
        ".best.pt.tmp",
        "ckpt-00000040.pt.tmp",
        "ckpt-abc.pt",
        "ckpt-.pt",
        "ckpt-00000050.pth",
        "ckpt-00000060",
        "CKPT-00000070.pt",
        "xckpt-00000080.pt",
        "metrics.jsonl",
        "config.toml",
    ):
        (run / junk).write_bytes(b"")
    (run / "abandoned-20260101-000000").mkdir()  # a set-aside branch: its checkpoints are not the run's
    (run / "abandoned-20260101-000000" / "ckpt-00000099.pt").write_bytes(b"")
    return run


def test_the_listing_holds_the_checkpoints_oldest_step_first_and_nothing_else(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    assert list_checkpoints(run) == [
        (7, run / "ckpt-7.pt"),  # by step, not by name ("ckpt-7" sorts after "ckpt-0...")
        (10, run / "ckpt-00000010.pt"),
        (20, run / "ckpt-00000020.dcp"),
        (100_000_000, run / "ckpt-100000000.pt"),  # a 9-digit step is still one
    ]
    assert latest_checkpoint(run) == run / "ckpt-100000000.pt"
    assert latest_checkpoint(str(run)) == run / "ckpt-100000000.pt"  # a str works as a Path


def test_no_directory_no_checkpoints(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    for where in (tmp_path / "missing", tmp_path / "a-file", tmp_path):
        assert list_checkpoints(where) == []
        assert latest_checkpoint(where) is None


def test_a_name_says_its_step_and_the_engine_writes_names_it_reads(tmp_path: Path) -> None:
    assert checkpoint_path(tmp_path, 10) == tmp_path / "ckpt-00000010.pt"  # the names on disk
    assert checkpoint_path(tmp_path, 10, sharded=True) == tmp_path / "ckpt-00000010.dcp"
    assert checkpoint_path(tmp_path, 123_456_789).name == "ckpt-123456789.pt"
    for step in (0, 10, 99_999_999, 123_456_789):
        assert step_of(checkpoint_path(tmp_path, step).name) == step
        assert step_of(checkpoint_path(tmp_path, step, sharded=True).name) == step
    for name in ("best.pt", "best.dcp", ".ckpt-00000010.pt.x.tmp", "ckpt-00000010.pt.tmp", "ckpt-x.pt", ""):
        assert step_of(name) is None, name


def test_the_store_a_viewer_the_runs_screen_and_serve_see_the_same_newest(tmp_path: Path) -> None:
    from cockpit.cli.serve import how_to_start
    from engine.checkpoint import store
    from engine.control.carry_on import carry_on, engine_gone_message

    run = _run_dir(tmp_path)
    assert store.latest_checkpoint(run) == run / "ckpt-100000000.pt"
    assert "last checkpoint ckpt-100000000.pt;" in engine_gone_message(run)
    assert carry_on(run).startswith("resume it with: cockpit --resume ")
    assert how_to_start(run).startswith("resume it with `cockpit start --resume ")


def test_a_run_with_only_a_sharded_checkpoint_or_only_junk(tmp_path: Path) -> None:
    from cockpit.cli.serve import how_to_start
    from engine.control.carry_on import carry_on

    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "ckpt-00000020.dcp").mkdir()
    assert latest_checkpoint(sharded) == sharded / "ckpt-00000020.dcp"
    assert carry_on(sharded).startswith("resume it with:")
    assert how_to_start(sharded).startswith("resume it with")  # --resume takes a .dcp too

    junk = tmp_path / "junk"
    junk.mkdir()
    for name in ("ckpt-abc.pt", ".ckpt-00000010.pt.x.tmp", "best.pt"):
        (junk / name).write_bytes(b"")
    assert latest_checkpoint(junk) is None
    assert carry_on(junk) == "start a new run: cockpit --preset NAME"
    assert how_to_start(junk).startswith("start a run there with")


@pytest.mark.parametrize("module", ["engine.checkpoint.names", "engine.control.carry_on"])
def test_the_names_need_no_torch(module: str) -> None:
    # a viewer, `cockpit ps` and `cockpit runs` list checkpoints; torch alone takes seconds to import
    code = (
        f"import sys, {module};"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
