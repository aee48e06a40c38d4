"""What a run and an export write is written only as their own plain files: a symbolic link
planted in a run directory is replaced or refused (never written through), a directory other
users can write to is refused, and every file gets its mode from its own creation (never from a
process-wide umask change). Real runs of the tiny preset on the real filesystem."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from command_here import cockpit_here

from cockpit.cli import main as cockpit_main
from engine.config.presets import load_preset
from engine.config.run_config import ConfigError
from engine.events import Event
from engine.files import atomic_write, open_for_append
from engine.rundir.layout import write_error_log
from engine.train.trainer import Trainer

VICTIM_TEXT = "ssh-ed25519 AAAA... the victim's own line\n"


def tiny_cfg(*extra: str):
    return load_preset(
        "tiny",
        ["train.max_steps=3", "eval.interval=0", "sample.interval=0", "eval.batches=1", *extra],
    )


class Alerts:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def __call__(self, event: Event) -> None:
        if event.kind == "alert":
            self.messages.append(event.message)


def train(run_dir: Path) -> tuple[str, list[str]]:
    alerts = Alerts()
    state = Trainer(tiny_cfg(), run_dir=run_dir, sinks=[alerts], telemetry=False).run()
    return state, alerts.messages


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the run directory that a planted link points at (authorized_keys)."""
    path = tmp_path / "home" / "authorized_keys"
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    path.chmod(0o600)
    return path


def modes(directory: Path) -> dict[str, int]:
    return {
        p.name: stat.S_IMODE(p.lstat().st_mode)
        for p in directory.iterdir()
        if stat.S_ISREG(p.lstat().st_mode)
    }


# ---------------------------------------------------------------------- planted links
def test_links_to_whole_files_are_replaced_not_written_through(tmp_path: Path, victim: Path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in ("config.json", "config.toml", ".write-test"):
        (run_dir / name).symlink_to(victim)
    state, alerts = train(run_dir)
    assert state == "finished", alerts
    assert victim.read_text() == VICTIM_TEXT and stat.S_IMODE(victim.stat().st_mode) == 0o600
    for name in ("config.json", "config.toml"):
        assert not (run_dir / name).is_symlink() and (run_dir / name).stat().st_nlink == 1
    assert '"model"' in (run_dir / "config.json").read_text()
    assert "[model]" in (run_dir / "config.toml").read_text()


def test_a_link_as_error_log_is_replaced(tmp_path: Path, victim: Path):
    (tmp_path / "error.log").symlink_to(victim)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        path = write_error_log(tmp_path)
    assert path == tmp_path / "error.log" and not path.is_symlink()
    assert "RuntimeError: boom" in path.read_text() and victim.read_text() == VICTIM_TEXT


@pytest.mark.parametrize("name", [".run.lock", "metrics.jsonl"])
def test_a_link_as_a_kept_file_is_refused_in_one_line(tmp_path: Path, victim: Path, name: str):
    """The lock and the metrics log are kept across runs (a resume appends), so a link there is
    not silently replaced: the run refuses it, naming the file and the fix."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / name).symlink_to(victim)
    state, alerts = train(run_dir)
    assert state == "failed"
    assert victim.read_text() == VICTIM_TEXT and stat.S_IMODE(victim.stat().st_mode) == 0o600
    message = alerts[-1]
    assert "\n" not in message and str(run_dir / name) in message
    assert "symbolic link" in message and "remove it" in message
    assert (run_dir / name).is_symlink()  # left as it was, for its owner to look at


def test_a_hard_link_to_another_file_is_refused(tmp_path: Path, victim: Path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.link(victim, run_dir / ".run.lock")  # where protected_hardlinks is off, anyone can
    state, alerts = train(run_dir)
    assert state == "failed" and "other hard links" in alerts[-1]
    assert victim.read_text() == VICTIM_TEXT


def test_append_refuses_a_fifo_instead_of_hanging(tmp_path: Path):
    os.mkfifo(tmp_path / "metrics.jsonl")
    with pytest.raises(ConfigError, match="not a plain file"):
        open_for_append(tmp_path / "metrics.jsonl")


# ---------------------------------------------------------------------- who can write the directory
def test_a_world_writable_run_dir_is_refused_in_one_line(tmp_path: Path):
    run_dir = tmp_path / "shared"
    run_dir.mkdir()
    run_dir.chmod(0o777)
    state, alerts = train(run_dir)
    assert state == "failed"
    message = alerts[-1]
    assert "\n" not in message and str(run_dir) in message
    assert "can be written by other users (mode 0777)" in message
    assert f"chmod go-w {run_dir}" in message
    assert "--run-dir" in message
    assert list(run_dir.iterdir()) == []  # refused before anything was written


def test_a_sticky_run_dir_of_ours_is_refused_too(tmp_path: Path):
    """Sticky (1777) stops others removing the run's files, not planting names it has yet to
    write (a TensorBoard event file, a checkpoint's temporary): a run directory is private."""
    run_dir = tmp_path / "sticky"
    run_dir.mkdir()
    run_dir.chmod(0o1777)
    state, alerts = train(run_dir)
    assert state == "failed"
    assert "can be written by other users (mode 1777)" in alerts[-1]
    assert f"chmod go-w {run_dir}" in alerts[-1]
    assert list(run_dir.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the directory to another user needs root")
def test_a_sticky_run_dir_of_another_user_is_refused(tmp_path: Path):
    run_dir = tmp_path / "their-sticky"
    run_dir.mkdir()
    run_dir.chmod(0o1777)
    os.chown(run_dir, 65534, 65534)
    state, alerts = train(run_dir)
    assert state == "failed" and "belongs to uid 65534, not to you" in alerts[-1]
    assert "--run-dir DIR of your own" in alerts[-1]


# ---------------------------------------------------------------------- modes, never the umask
@pytest.fixture
def umask_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every os.umask call, with the thread that made it (the real call still happens)."""
    calls: list[tuple[str, int]] = []
    real = os.umask

    def recorded(mask: int) -> int:
        calls.append((threading.current_thread().name, mask))
        return real(mask)

    monkeypatch.setattr(os, "umask", recorded)
    return calls


@pytest.fixture
def umask(request: pytest.FixtureRequest):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    ("umask", "ordinary", "private"), [(0o000, 0o644, 0o600), (0o077, 0o600, 0o600)],
    indirect=["umask"],
)  # fmt: skip
def test_run_files_get_their_own_modes_whatever_the_umask(
    tmp_path: Path, umask: int, ordinary: int, private: int, umask_calls: list
):
    """0644 narrowed by the umask for a run's files (never 0666, world-writable, under umask 0),
    0600 for the lock, 0700 for the run directory it makes; no umask change on any thread."""
    run_dir = tmp_path / "new" / "run"
    state, alerts = train(run_dir)
    assert state == "finished", alerts
    found = modes(run_dir)
    assert found.pop(".run.lock") == private
    assert {"config.json", "config.toml", "metrics.jsonl", "summary.json", "best.pt"} <= set(found)
    assert set(found.values()) == {ordinary}, found
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700 & ~umask
    assert umask_calls == []


def test_atomic_write_never_changes_the_umask(tmp_path: Path, umask_calls: list):
    atomic_write(tmp_path / "a.bin", lambda f: f.write(b"x"))
    assert umask_calls == [] and (tmp_path / "a.bin").read_bytes() == b"x"


# ---------------------------------------------------------------------- export
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("exported") / "run"
    with pytest.MonkeyPatch.context() as env:  # conftest's cache is per test, not per module
        env.setenv("COCKPIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cockpit-cache"))
        state, alerts = train(run_dir)
    assert state == "finished", alerts
    return run_dir


def test_hf_export_files_share_one_mode(finished_run: Path, tmp_path: Path, umask_calls: list):
    out = tmp_path / "hf"
    assert cockpit_main(["export", str(finished_run), "--format", "hf", "--out", str(out)]) == 0
    found = modes(out)
    assert "model.safetensors" in found and "config.json" in found
    assert set(found.values()) == {0o644 & ~_current_umask()}, found
    assert umask_calls == []


def _current_umask() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    pytest.skip("no Umask line in /proc/self/status")


@pytest.mark.parametrize("fmt", ["hf", "nanogpt", "csv", "safetensors"])
@pytest.mark.parametrize("inside", ["", "ckpt-00000003.pt", "sub"])
def test_export_into_the_run_itself_is_refused(
    finished_run: Path, capsys: pytest.CaptureFixture, fmt: str, inside: str
):
    out = finished_run / inside if inside else finished_run
    before = {p.name: p.read_bytes() for p in finished_run.iterdir() if p.is_file()}
    argv = ["export", str(finished_run), "--format", fmt, "--out", str(out), "--force"]
    assert cockpit_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"run directory {finished_run}" in err
    assert "export/" in err  # the fix: the default place, or outside the run
    after = {p.name: p.read_bytes() for p in finished_run.iterdir() if p.is_file()}
    assert after == before and not (finished_run / "sub").exists()


def test_export_into_the_runs_export_folder_still_works(finished_run: Path):
    out = finished_run / "export" / "mine"
    assert cockpit_main(["export", str(finished_run), "--format", "csv", "--out", str(out)]) == 0
    assert (out / "step.csv").exists()


def test_a_link_planted_in_an_export_folder_is_replaced(
    finished_run: Path, tmp_path: Path, victim: Path
):
    out = tmp_path / "hf"
    out.mkdir()
    for name in ("config.json", "model.safetensors", "chars.json"):
        (out / name).symlink_to(victim)
    argv = ["export", str(finished_run), "--format", "hf", "--out", str(out), "--force"]
    assert cockpit_main(argv) == 0
    assert victim.read_text() == VICTIM_TEXT
    assert not any((out / name).is_symlink() for name in ("config.json", "model.safetensors"))


def test_best_pt_copy_never_goes_through_a_link_at_its_name(tmp_path: Path, victim: Path):
    """Where a hard link fails, best.pt is a copy: one made at a name someone linked in the
    meantime (a race in a sticky directory) is refused, not written through the link."""
    from engine.checkpoint.store import _link_or_copy

    source = tmp_path / "ckpt-00000001.pt"
    source.write_bytes(b"weights")
    (tmp_path / ".best.pt.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError):
        _link_or_copy(source, tmp_path / ".best.pt.tmp")
    assert victim.read_text() == VICTIM_TEXT


def test_a_fork_under_umask_0_makes_no_world_writable_branch(finished_run: Path, tmp_path: Path):
    """`cockpit fork` made its branch 0777 and its files 0666 under umask 0 (any user could
    then plant links in it); now 0700 and 0644, as a run's."""
    branch = tmp_path / "branch"
    umask = os.umask(0)
    try:
        made = cockpit_here("fork", str(finished_run), "--run-dir", str(branch), "--no-start",
                            "--set", "train.max_steps=6")  # fmt: skip
    finally:
        os.umask(umask)
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(branch.stat().st_mode) == 0o700
    found = modes(branch)
    assert {"metrics.jsonl", "fork.json"} <= set(found)
    assert found["metrics.jsonl"] == found["fork.json"] == 0o644


def test_cockpit_start_refuses_a_link_as_its_engine_log(tmp_path: Path, victim: Path):
    """A detached run's engine.log is appended to: a link there is refused in one line and
    nothing starts (it was opened "ab", writing the engine's output into the link's target)."""
    import signal

    from engine.control.live_runs import find_live_runs

    run_dir = tmp_path / "detached"
    run_dir.mkdir()
    (run_dir / "engine.log").symlink_to(victim)
    result = cockpit_here("start", "--preset", "tiny", "--no-telemetry", "--run-dir", str(run_dir),
                          "--no-attach", cwd=tmp_path)  # fmt: skip
    for live in find_live_runs(tmp_path):  # an engine started anyway must not outlive the test
        os.kill(live.pid, signal.SIGKILL)
    assert result.returncode == 1, result  # as any refusal of `start` once it has begun
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "engine.log is a symbolic link" in lines[0], result.stderr
    assert victim.read_text() == VICTIM_TEXT


def test_a_link_as_the_tensorboard_folder_is_refused(tmp_path: Path):
    pytest.importorskip("tensorboard")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "tensorboard").symlink_to(elsewhere, target_is_directory=True)
    alerts = Alerts()
    cfg = tiny_cfg("log.tensorboard=true")
    state = Trainer(cfg, run_dir=run_dir, sinks=[alerts], telemetry=False).run()
    assert state == "failed" and "tensorboard is a symbolic link" in alerts.messages[-1]
    assert list(elsewhere.iterdir()) == []
