"""Where `cockpit export` writes (issue 35, items 3 and 14): never through a link someone planted
(RUN_DIR/export, --out, even with --force), never into a folder other users can write in, and a
full disk is one line that leaves nothing half-made, so the retry needs no --force. Real
directories, a second user (uid 65534) planting the links, a real full filesystem (a 1 MiB
tmpfs); runs as root, as CI does, and skips what needs root elsewhere."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import test_private_run_dir as private_run_dir
from run_copies import copy_run, train_here
from test_disk_full import fill

from cockpit.cli import main as cockpit_main

OTHER = private_run_dir.OTHER  # the other local user (nobody)
as_other_user = private_run_dir.as_other_user
area = private_run_dir.area  # a folder of ours in /tmp that the other user can reach
FORMATS = ("safetensors", "hf", "nanogpt", "csv", "tensorboard")
WRITES_A_FILE = {"safetensors"}
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a second user and mounts need root")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]) -> Path:
    sets = ["train.max_steps=4", "eval.interval=2", "eval.batches=1", "checkpoint.interval=2"]
    return train_here(tmp_path_factory.mktemp("export") / "run", sets, isolated_env)


def export(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """`cockpit export ARGV` run here: its exit status and what it said on stderr."""
    code = cockpit_main(["export", *argv])
    return code, capsys.readouterr().err


def one_line(err: str) -> bool:
    return err.startswith("cockpit: ") and err.count("\n") == 1 and "Traceback" not in err


# ---------------------------------------------------------------- links and others' folders


@needs_root
@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_link_another_user_planted_is_refused(
    trained: Path, area: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    """The issue's run dir: sticky and world-writable (1777), where another uid made
    RUN_DIR/export a link to a folder of ours before the first export."""
    run = copy_run(trained, area / "run")
    run.chmod(0o1777)
    victim = area / "victim"
    victim.mkdir()
    as_other_user(lambda: os.symlink(victim, run / "export"))
    for force in ([], ["--force"]):
        code, err = export(capsys, str(run), "--format", fmt, *force)
        assert code == 2 and one_line(err), err
        assert f"{run / 'export'} is a symbolic link" in err and "even with --force" in err
    assert list(victim.iterdir()) == []  # nothing written where the link leads
    assert (run / "export").is_symlink()


@pytest.mark.parametrize("fmt", ["csv", "safetensors"])
def test_an_out_that_is_a_link_is_refused_even_with_force(
    trained: Path, area: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    victim = area / ("victim.txt" if fmt in WRITES_A_FILE else "victim")
    if fmt in WRITES_A_FILE:
        victim.write_text("root's own file\n")
    else:
        victim.mkdir()
    link = area / "out"
    link.symlink_to(victim)
    code, err = export(capsys, str(trained), "--format", fmt, "--out", str(link), "--force")
    assert code == 2 and one_line(err), err
    assert f"{link} is a symbolic link" in err
    if fmt in WRITES_A_FILE:
        assert victim.read_text() == "root's own file\n"
    else:
        assert list(victim.iterdir()) == []
    assert link.is_symlink() and link.resolve() == victim


@pytest.mark.parametrize("fmt", ["csv", "safetensors"])
def test_a_folder_other_users_can_write_in_is_refused(
    trained: Path, area: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    shared = area / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # another user could plant a link there, or swap the export
    out = shared / ("model.safetensors" if fmt in WRITES_A_FILE else "csv")
    code, err = export(capsys, str(trained), "--format", fmt, "--out", str(out))
    assert code == 2 and one_line(err), err
    assert "can be written by other users (mode 0777)" in err and f"chmod go-w {shared}" in err
    assert list(shared.iterdir()) == []
    code, err = export(capsys, str(trained), "--format", "csv", "--out", str(shared), "--force")
    assert code == 2 and one_line(err) and "can be written by other users" in err, err


@needs_root
def test_a_folder_of_another_user_is_refused_even_with_force(
    trained: Path, area: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    theirs = area / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER, OTHER)
    code, err = export(capsys, str(trained), "--format", "csv", "--out", str(theirs), "--force")
    assert code == 2 and one_line(err) and f"belongs to uid {OTHER}" in err, err
    assert list(theirs.iterdir()) == []


def test_the_folders_an_export_makes_are_real_folders_of_ours(
    trained: Path, area: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = copy_run(trained, area / "run")
    code, err = export(capsys, str(run), "--format", "csv")
    assert code == 0, err
    for folder in (run / "export", run / "export" / "csv"):
        assert folder.is_dir() and not folder.is_symlink()
        assert folder.stat().st_uid == os.geteuid() and not folder.stat().st_mode & 0o022
    assert not [p for p in (run / "export").rglob(".*")]  # no staging folder left behind


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def tiny_disk(tmpfs: Callable[[str], Path]) -> Path:
    """A real 1 MiB filesystem, ours and 0755 (mounting needs root)."""
    return tmpfs("size=1m,mode=0755")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_full_disk_is_one_line_and_leaves_nothing_half_made(
    trained: Path, tiny_disk: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    # the weights (~120 kB) start and fail part of the way; the metrics are smaller: none left
    filler = fill(tiny_disk, leave_bytes=40_000 if fmt in ("safetensors", "hf", "nanogpt") else 0)
    out = tiny_disk / "deep" / "folder" / ("model.safetensors" if fmt in WRITES_A_FILE else fmt)
    code, err = export(capsys, str(trained), "--format", fmt, "--out", str(out))
    assert code == 2 and one_line(err), err
    assert "the disk is full" in err and "free some space" in err and "--out" in err
    assert sorted(os.listdir(tiny_disk)) == ["filler"]  # no file, temporary or folder left
    filler.unlink()
    code, err = export(capsys, str(trained), "--format", fmt, "--out", str(out))  # no --force
    assert code == 0, err
    assert out.exists()


def test_a_full_disk_keeps_the_earlier_export_whole(
    trained: Path, tiny_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tiny_disk / "hf"
    assert export(capsys, str(trained), "--format", "hf", "--out", str(out))[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    fill(tiny_disk, leave_bytes=40_000)
    code, err = export(capsys, str(trained), "--format", "hf", "--out", str(out), "--force")
    assert code == 2 and one_line(err) and "the disk is full" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
