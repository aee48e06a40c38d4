"""A run directory is a private place (issue 35, items 1, 2, 5, 6): cockpit makes a new one
itself with mkdir, never through a name already taken; it refuses, in one line naming the fix,
a run directory another user owns or can write to, new or resumed, and one below directories
others could swap (OpenSSH's rule for ~/.ssh); a directory that holds a run never receives
another; checkpoint temporaries have random names. Real directories on the real filesystem,
with a second user (uid 65534) doing what an attacker would; runs as root, as CI does."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import warm_process
from command_here import cockpit_here
from tiny import set_args, tiny_overrides

from engine.checkpoint.store import mark_best, remove_partial_saves
from engine.config.presets import load_preset
from engine.config.run_config import ConfigError
from engine.events import Event, Step
from engine.rundir.layout import check_run_dir, create_default_run_dir, create_run_dir
from engine.rundir.sinks import TensorBoardSink, open_event_file
from engine.train.trainer import Trainer

OTHER = 65534  # nobody: the other local user
VICTIM_TEXT = "root's own file\n"
SMALL = tiny_overrides("train.max_steps=3", quiet=True)
REPO = Path(__file__).resolve().parents[2]

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a second user needs root")


def as_other_user(action: Callable[[], object]) -> None:
    """Run `action` in a child process as uid/gid 65534 with no groups (what another local
    user can do); a failure there fails the test with its traceback."""
    pid = os.fork()
    if pid == 0:  # the child: only os calls, then _exit (never back into pytest)
        code = 0
        try:
            os.setgroups([])
            os.setgid(OTHER)
            os.setuid(OTHER)
            action()
        except BaseException:
            traceback.print_exc()
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the other user's action failed"


def plant_stamped_links(prefix: Path, target: Path) -> None:
    """As the other user: a link PREFIX-<stamp> to `target` for each second of the next two
    minutes (the names cockpit generates for a default run or a fork's branch)."""

    def plant() -> None:
        now = time.time()
        for s in range(120):
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now + s))
            prefix.with_name(f"{prefix.name}-{stamp}").symlink_to(target)

    as_other_user(plant)


@pytest.fixture
def area() -> Iterator[Path]:
    """A directory of ours directly in /tmp (sticky), 0755: the other user can reach what is
    inside (pytest's tmp_path is 0700), and it passes the parents rule as a user's would."""
    place = Path(tempfile.mkdtemp(prefix="cockpit-private-", dir="/tmp"))
    place.chmod(0o755)
    try:
        yield place
    finally:
        shutil.rmtree(place, ignore_errors=True)


@pytest.fixture
def victim(area: Path) -> Path:
    """A file of ours outside any run that a planted link points at."""
    path = area / "authorized_keys"
    path.write_text(VICTIM_TEXT)
    path.chmod(0o600)
    return path


class Alerts:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def __call__(self, event: Event) -> None:
        if event.kind == "alert":
            self.messages.append(event.message)


def train(run_dir: Path | None, *extra: str) -> tuple[Trainer, str, list[str]]:
    alerts = Alerts()
    trainer = Trainer(
        load_preset("tiny", [*SMALL, *extra]), run_dir=run_dir, sinks=[alerts], telemetry=False
    )
    state = trainer.run()
    return trainer, state, alerts.messages


def cockpit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return cockpit_here(*args, cwd=cwd)


def listing(directory: Path) -> dict[str, bytes | None]:
    """Every entry under `directory` and its bytes (None for a directory or a link)."""
    return {
        str(p.relative_to(directory)): (
            p.read_bytes() if p.is_file() and not p.is_symlink() else None
        )
        for p in sorted(directory.rglob("*"))
    }


def a_step(step: int) -> Step:
    return Step(
        step=step, loss=1.0, lr=1e-3, grad_norm=1.0, tokens_per_s=1.0, step_time_s=0.1,
        tokens=step, time=1000.0 + step,
    )  # fmt: skip


def event_names(pid: int, seconds: int = 120) -> list[str]:
    """The event file names torch's SummaryWriter would use in the next `seconds`: its name
    is the time, the host, the pid and a counter, all known in advance."""
    now = int(time.time())
    host = socket.gethostname()
    return [f"events.out.tfevents.{now + s:010d}.{host}.{pid}.0" for s in range(seconds)]


# ---------------------------------------------------------------------- item 1: TensorBoard
@needs_root
def test_another_users_tensorboard_folder_in_a_sticky_run_dir_is_refused_before_writing(
    area: Path, victim: Path
):
    """In a sticky 1777 run directory of ours, the other user made tensorboard/ and planted
    links at the event file names to come: the run is refused before it writes anything."""
    pytest.importorskip("tensorboard")
    run_dir = area / "run"
    run_dir.mkdir()
    run_dir.chmod(0o1777)
    pid = os.getpid()

    def plant() -> None:
        (run_dir / "tensorboard").mkdir(mode=0o777)
        for name in event_names(pid):
            (run_dir / "tensorboard" / name).symlink_to(victim)

    as_other_user(plant)
    before = listing(run_dir)
    _, state, alerts = train(run_dir, "log.tensorboard=true")
    assert state == "failed"
    assert alerts[-1] == (
        f"run directory {run_dir} can be written by other users (mode 1777); "
        f"chmod go-w {run_dir}, or pass --run-dir DIR of your own"
    )
    assert victim.read_text() == VICTIM_TEXT
    assert listing(run_dir) == before  # nothing written, nothing removed


@needs_root
def test_another_users_tensorboard_folder_in_a_private_run_dir_is_refused(area: Path):
    """A tensorboard/ that is not ours (given away by root, or left from a copy) is refused
    in one line before the run writes an event there."""
    pytest.importorskip("tensorboard")
    run_dir = area / "run"
    run_dir.mkdir(mode=0o700)
    (run_dir / "tensorboard").mkdir()
    os.chown(run_dir / "tensorboard", OTHER, OTHER)
    with pytest.raises(ConfigError) as refused:
        open_event_file(run_dir / "tensorboard")
    assert str(refused.value) == (
        f"{run_dir / 'tensorboard'} belongs to uid {OTHER}, not to you (uid 0); remove it and "
        "start again"
    )
    assert list((run_dir / "tensorboard").iterdir()) == []


def test_the_event_file_is_a_new_file_at_a_name_no_one_can_plant(tmp_path: Path, victim: Path):
    """Links at every name SummaryWriter would pick in the next two minutes: the run's event
    file is another, new file, and every link is left as it was."""
    pytest.importorskip("tensorboard")
    log_dir = tmp_path / "tensorboard"
    log_dir.mkdir()
    planted = event_names(os.getpid())
    for name in planted:
        (log_dir / name).symlink_to(victim)
    sink = TensorBoardSink(open_event_file(log_dir))
    for step in range(1, 11):
        sink(a_step(step))
    assert sink.close() is None
    written = [p for p in log_dir.iterdir() if not p.is_symlink()]
    assert len(written) == 1 and written[0].name not in planted and written[0].stat().st_size > 0
    assert victim.read_text() == VICTIM_TEXT
    assert sorted(p.name for p in log_dir.iterdir() if p.is_symlink()) == sorted(planted)


def test_a_full_disk_under_the_tensorboard_writer_is_one_line_at_the_end(
    tmpfs: Callable[[str], Path], capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    """A real full filesystem: the events the writer could not write are said in one line
    when the log closes, and no thread prints a traceback (it went to engine.log)."""
    pytest.importorskip("tensorboard")
    disk = tmpfs("size=64k")
    uncaught: list[str] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: uncaught.append(args.thread.name))
    sink = TensorBoardSink(open_event_file(disk / "tensorboard"))
    with open(disk / "filler", "wb", buffering=0) as filler:  # the rest of the disk
        try:
            while filler.write(b"\0" * 4096):
                pass
        except OSError:
            pass
    for step in range(1, 2001):
        sink(a_step(step))
    problem = sink.close()
    assert uncaught == []  # torch's SummaryWriter's own thread raised here
    assert problem is not None and "\n" not in problem
    assert problem.startswith("TensorBoard log incomplete: ")
    assert "(OSError: No space left on device)" in problem and "--format tensorboard" in problem
    assert "Traceback" not in "".join(capfd.readouterr())


# ---------------------------------------------------------------------- item 2: default names
@needs_root
def test_planted_default_names_in_a_sticky_runs_root_never_receive_the_run(
    area: Path, monkeypatch: pytest.MonkeyPatch
):
    """runs/ at 1777; the other user links runs/tiny-<each second of the next two minutes> to a
    directory of theirs: the run makes a directory of its own under another name, and writes
    nothing through the links."""
    runs = area / "runs"
    runs.mkdir()
    runs.chmod(0o1777)
    theirs = area / "theirs"  # the other user's, open to all
    theirs.mkdir()
    theirs.chmod(0o777)
    os.chown(theirs, OTHER, OTHER)

    plant_stamped_links(runs / "tiny", theirs)
    monkeypatch.chdir(area)
    trainer, state, alerts = train(None)
    assert state == "finished", alerts
    run_dir = area / trainer.run_dir
    assert not run_dir.is_symlink() and run_dir.parent == runs
    assert run_dir.name.startswith("tiny-") and run_dir.name.rsplit(".", 1)[-1].isdigit()
    assert (run_dir / "metrics.jsonl").exists() and (run_dir / "ckpt-00000003.pt").exists()
    assert os.stat(run_dir).st_uid == 0 and (os.stat(run_dir).st_mode & 0o777) == 0o700
    assert list(theirs.iterdir()) == []


def test_two_runs_in_the_same_second_get_a_directory_each(tmp_path: Path):
    cfg = load_preset("tiny", SMALL)
    made = {create_default_run_dir(cfg, tmp_path / "runs") for _ in range(3)}
    assert len(made) == 3 and all(p.is_dir() and p.parent == tmp_path / "runs" for p in made)


# ---------------------------------------------------------------------- whose directory it is
@needs_root
def test_a_run_dir_of_another_user_is_refused_for_a_new_run(area: Path):
    run_dir = area / "theirs"
    run_dir.mkdir(mode=0o755)
    os.chown(run_dir, OTHER, OTHER)
    _, state, alerts = train(run_dir)
    assert state == "failed"
    assert alerts[-1] == (
        f"run directory {run_dir} belongs to uid {OTHER}, not to you (uid 0); "
        "pass --run-dir DIR of your own"
    )
    assert list(run_dir.iterdir()) == []


@needs_root
def test_a_run_dir_of_another_user_is_refused_for_a_resume(area: Path):
    """A finished run given to the other user (or made by them, 0755): `--resume` is refused in
    one line, exit 2, and nothing in it changes (no checkpoint moved, no record appended)."""
    run_dir = area / "run"
    _, state, alerts = train(run_dir)
    assert state == "finished", alerts
    for path in [run_dir, *run_dir.rglob("*")]:
        os.chown(path, OTHER, OTHER, follow_symlinks=False)
    run_dir.chmod(0o755)
    before = listing(run_dir)
    done = cockpit("train", "--headless", "--resume", str(run_dir), "--no-telemetry",
                   "--set", "train.max_steps=6")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"cockpit: run directory {run_dir} belongs to uid {OTHER}, not to you (uid 0); copy the "
        "run into a directory of your own and resume the copy\n"
    )
    assert listing(run_dir) == before


def test_an_empty_directory_of_ours_is_a_new_run_dir(tmp_path: Path):
    """`mkdir myrun; cockpit train --run-dir myrun`: an empty directory of ours is fine."""
    run_dir = tmp_path / "myrun"
    run_dir.mkdir()
    _, state, alerts = train(run_dir)
    assert state == "finished", alerts


# ---------------------------------------------------------------------- the directories above
def test_a_run_dir_below_a_world_writable_directory_is_refused(area: Path):
    """0777 without the sticky bit: anyone could rename the run directory away and put a link
    in its place. Refused before anything is made."""
    open_dir = area / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    run_dir = open_dir / "run"
    _, state, alerts = train(run_dir)
    assert state == "failed"
    assert alerts[-1] == (
        f"run directory {run_dir} is below {open_dir}, which can be written by other users "
        f"(mode 0777): another user could swap what the run writes; chmod go-w {open_dir}, or "
        "pass --run-dir DIR of your own"
    )
    assert list(open_dir.iterdir()) == []


@needs_root
def test_a_run_dir_below_another_users_directory_is_refused(area: Path):
    theirs = area / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, OTHER, OTHER)
    with pytest.raises(ConfigError, match=f"is below {theirs}, which belongs to uid {OTHER}"):
        create_run_dir(theirs / "run")
    assert list(theirs.iterdir()) == []


def test_a_run_dir_of_ours_in_tmp_is_accepted(area: Path):
    """/tmp is sticky and world-writable: fine right above a directory that is ours."""
    run_dir = area / "run"
    create_run_dir(run_dir)
    check_run_dir(run_dir)
    assert (run_dir.stat().st_mode & 0o777) == 0o700


@needs_root
def test_a_link_the_other_user_planted_in_a_sticky_directory_is_refused(area: Path):
    """--run-dir /sticky/NAME where the other user put a link at NAME to a directory of ours:
    the link is theirs, in a directory where only its owner decides what it points to."""
    sticky = area / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    ours = area / "ours"
    ours.mkdir(mode=0o700)
    as_other_user(lambda: (sticky / "run").symlink_to(ours))
    with pytest.raises(ConfigError) as refused:
        create_run_dir(sticky / "run")
    assert f"is below {sticky}, which can be written by other users (mode 1777)" in str(
        refused.value
    )
    assert list(ours.iterdir()) == []


# ---------------------------------------------------------------------- item 6: one run per directory
def test_a_new_run_in_a_run_directory_is_refused_and_its_checkpoints_kept(tmp_path: Path):
    old = tmp_path / "old"
    _, state, alerts = train(old, "checkpoint.interval=1", "checkpoint.keep_last=5")
    assert state == "finished", alerts
    before = listing(old)
    assert {"ckpt-00000001.pt", "ckpt-00000002.pt", "ckpt-00000003.pt", "best.pt"} <= set(before)
    done = cockpit("train", "--headless", "--preset", "tiny", "--run-dir", str(old),
                   "--no-telemetry", *set_args(SMALL))  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"cockpit: {old} already holds a run (metrics.jsonl, config.toml, config.json, "
        f"summary.json, best.pt, 3 checkpoints): resume it with --resume {old}, fork it with "
        f"cockpit fork {old}, or pass another --run-dir\n"
    )
    assert listing(old) == before
    _, state, alerts = train(old)  # the engine itself refuses it too (the app, a script)
    assert state == "failed" and "already holds a run" in alerts[-1]
    assert listing(old) == before


# ---------------------------------------------------------------------- item 5: temporary names
def test_planted_temporary_names_do_not_break_a_checkpoint(tmp_path: Path, victim: Path):
    """The fixed names a save used to write through: a link at `.best.pt.tmp` and a directory
    there (which a plain unlink cannot remove), links at `.best.dcp.tmp` and at a sharded
    checkpoint's `.ckpt-00000003.dcp.tmp`: every save goes on at names of its own."""
    import warnings

    from engine.distributed.sharded import save_sharded
    from engine.distributed.world import World

    run_dir = tmp_path / "run"
    trainer, state, alerts = train(run_dir)
    assert state == "finished", alerts
    (run_dir / ".best.pt.tmp").mkdir()
    (run_dir / ".best.pt.tmp" / "x").write_text("theirs")
    (run_dir / ".best.dcp.tmp").symlink_to(victim.parent)
    (run_dir / ".ckpt-00000003.dcp.tmp").symlink_to(victim.parent)
    before = listing(victim.parent)
    best = mark_best(run_dir, run_dir / "ckpt-00000003.pt")
    assert best.samefile(run_dir / "ckpt-00000003.pt")
    meta = trainer.built.checkpointer.state(weights=False)
    parts = trainer.built.parts
    with warnings.catch_warnings():  # DCP in one process says so
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        sharded = run_dir / "ckpt-00000003.dcp"
        assert save_sharded(sharded, meta, parts.model, parts.optimizer, World(), None) is None
    assert (sharded / "meta.pt").exists()
    assert mark_best(run_dir, sharded) == run_dir / "best.dcp"
    assert (run_dir / "best.dcp" / "meta.pt").samefile(sharded / "meta.pt")
    planted = {".best.pt.tmp", ".best.dcp.tmp", ".ckpt-00000003.dcp.tmp"}
    assert {p.name for p in run_dir.glob(".*.tmp")} == planted  # none of its own left behind
    assert listing(victim.parent) == before  # nothing written through a link
    # the next start clears what a killed save leaves, random names included; links go, their
    # targets stay
    (run_dir / ".ckpt-00000004.dcp.a1b2c3d4.tmp").mkdir()
    (run_dir / ".ckpt-00000004.dcp.a1b2c3d4.tmp" / "shard").write_text("partial")
    (run_dir / ".best.pt.5eed5eed.tmp").write_text("partial")
    assert remove_partial_saves(run_dir) == 5
    assert not list(run_dir.glob(".*.tmp"))
    assert listing(victim.parent) == before


# ---------------------------------------------------------------------- a fork's branch
@pytest.fixture
def sticky_parent(area: Path) -> Path:
    """A finished run of ours (step 3, one checkpoint) in a sticky 1777 runs root."""
    runs = area / "runs"
    runs.mkdir()
    runs.chmod(0o1777)
    parent = runs / "parent"
    _, state, alerts = train(parent)
    assert state == "finished", alerts
    return parent


@needs_root
def test_planted_branch_names_give_way_to_a_private_branch(sticky_parent: Path, area: Path):
    """`cockpit fork RUN` names its branch RUN-fork-STEP-<time>, known in advance: the other
    user links each such name of the next two minutes to a folder of theirs. The fork gives
    way to NAME.2 (0700, ours) and writes nothing through the links; it used to stop with
    'cannot make ...: File exists'."""
    theirs = area / "theirs"
    theirs.mkdir(mode=0o777)
    theirs.chmod(0o777)
    os.chown(theirs, OTHER, OTHER)

    plant_stamped_links(sticky_parent.parent / "parent-fork-3", theirs)
    done = cockpit("fork", str(sticky_parent), "--no-start", "--set", "train.max_steps=5")
    assert done.returncode == 0, done.stderr
    branch = Path(done.stdout.strip().rsplit(" ", 1)[-1])
    assert branch.name.startswith("parent-fork-3-") and branch.name.endswith(".2")
    assert not branch.is_symlink() and branch.parent == sticky_parent.parent
    assert os.stat(branch).st_uid == 0 and (os.stat(branch).st_mode & 0o777) == 0o700
    assert {p.name for p in branch.iterdir()} == {"ckpt-00000003.pt", "metrics.jsonl", "fork.json"}
    assert list(theirs.iterdir()) == []


@needs_root
def test_a_branch_below_a_world_writable_directory_is_refused(sticky_parent: Path, area: Path):
    """`cockpit fork RUN --run-dir /open/branch` with /open at 0777: refused in one line
    before anything is made (the branch was made 0755 there, for anyone to swap)."""
    open_dir = area / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    branch = open_dir / "branch"
    done = cockpit("fork", str(sticky_parent), "--no-start", "--run-dir", str(branch),
                   "--set", "train.max_steps=5")  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        f"cockpit fork: run directory {branch} is below {open_dir}, which can be written by "
        f"other users (mode 0777): another user could swap what the run writes; chmod go-w "
        f"{open_dir}, or pass --run-dir DIR of your own\n"
    )
    assert list(open_dir.iterdir()) == []


# ---------------------------------------------------------------------- the app's later runs
@needs_root
def test_planted_names_in_the_apps_runs_root_never_receive_a_picked_run(
    area: Path, monkeypatch: pytest.MonkeyPatch
):
    """A preset picked in the app (p, n) trains under the app's runs root (`cockpit ablate
    --runs DIR`): with DIR at 1777 and the other user's links at DIR/tiny-<each second of the
    next two minutes>, the run makes DIR/tiny-<stamp>.2 of its own. The app used to name the
    directory itself and hand it over as a --run-dir: the link was refused ('belongs to uid
    65534') and the run failed, where a default name gives way."""
    from cockpit.cli.launch import run_app, train_arguments

    runs = area / "series"
    runs.mkdir()
    runs.chmod(0o1777)
    theirs = area / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)
    os.chown(theirs, OTHER, OTHER)

    plant_stamped_links(runs / "tiny", theirs)
    monkeypatch.chdir(area)

    class Built(Exception):  # the trainer factory the app is given (the app is not run)
        pass

    def app_class(factory: Callable[[str], Trainer], *_args: object, **_kwargs: object) -> None:
        raise Built(factory)

    with pytest.raises(Built) as built:
        args = train_arguments(preset="tiny", no_telemetry=True)
        run_app(args, runs_root=str(runs), app_class=app_class)
    factory = built.value.args[0]
    factory("tiny")  # the run named on the command line
    picked = factory("tiny")  # one picked later in the app
    alerts = Alerts()
    picked.sinks.append(alerts)
    assert picked.run() == "finished", alerts.messages
    run_dir = Path(picked.run_dir)
    assert run_dir.parent == runs and not run_dir.is_symlink() and run_dir.name.endswith(".2")
    assert (run_dir / "metrics.jsonl").exists()
    assert os.stat(run_dir).st_uid == 0 and (os.stat(run_dir).st_mode & 0o777) == 0o700
    assert list(theirs.iterdir()) == []


# ---------------------------------------------------------------------- an ablation series
def ablate(runs: Path, *extra: str) -> subprocess.CompletedProcess:
    """`cockpit ablate` of two tiny runs (the baseline and one change), headless, as --name s."""
    overrides = [o for o in SMALL if not o.startswith("train.max_steps")]
    return cockpit("ablate", "--preset", "tiny", "--steps", "3", "--change", "optim.lr=0.002",
                   "--name", "s", "--runs", str(runs), "--headless", "--no-telemetry",
                   *set_args(overrides), *extra)  # fmt: skip


@pytest.fixture
def finished_series(area: Path) -> Path:
    """A finished series of ours (runs/s: series.json, two runs, results), in a private runs."""
    done = ablate(area / "mine")
    assert done.returncode == 0, done.stderr
    return area / "mine" / "s"


@needs_root
def test_another_users_series_directory_is_refused_and_nothing_written_through_it(
    finished_series: Path, area: Path, victim: Path
):
    """`cockpit ablate --runs SHARED` (1777): the other user made SHARED/s first (its name is
    --name's, or a hash of the command) with a series.json naming our finished runs elsewhere
    and results.csv linked to a file of ours. The series used to take their folder and record
    as its own, report our other runs as its results and write the table through the link."""
    import json

    shared = area / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    record = json.loads((finished_series / "series.json").read_text())
    for run in record["runs"]:
        run["run_dir"] = str(finished_series / run["run_dir"])  # our runs, out of the series
    planted = area / "planted.json"
    planted.write_text(json.dumps(record))
    planted.chmod(0o644)

    def plant() -> None:
        (shared / "s").mkdir(mode=0o777)
        (shared / "s").chmod(0o777)
        (shared / "s" / "series.json").write_text(planted.read_text())
        (shared / "s" / "results.csv").symlink_to(victim)

    as_other_user(plant)
    done = ablate(shared)
    assert done.returncode == 2
    assert done.stderr == (
        f"cockpit ablate: series directory {shared / 's'} belongs to uid {OTHER}, not to you "
        "(uid 0); pass another --name, or --runs DIR of your own\n"
    )
    assert victim.read_text() == VICTIM_TEXT
    assert {p.name for p in (shared / "s").iterdir()} == {"series.json", "results.csv"}


def test_a_series_record_naming_a_run_outside_the_series_is_refused(finished_series: Path):
    """A series.json whose run_dir leads out of the series (another run of ours, which a rerun
    would then resume with the series' settings) is refused in one line."""
    import json

    record_path = finished_series / "series.json"
    record = json.loads(record_path.read_text())
    outside = finished_series.parent / "elsewhere"
    shutil.copytree(finished_series / record["runs"][0]["run_dir"], outside)
    record["runs"][0]["run_dir"] = "../elsewhere"
    record_path.write_text(json.dumps(record))
    done = ablate(finished_series.parent)
    assert done.returncode == 2
    assert done.stderr == (
        f"cockpit ablate: {record_path}: run_dir '../elsewhere' is not a folder of the series; "
        "move it away to start the series afresh\n"
    )


# ---------------------------------------------------------------------- the data cache
@pytest.fixture
def prepared(area: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny preset's corpus, prepared in a cache of ours; COCKPIT_CACHE_DIR is then
    area/shared, a 1777 folder (a cache on a shared disk)."""
    own = area / "own-cache"
    monkeypatch.setenv("COCKPIT_CACHE_DIR", str(own))
    _, state, alerts = train(area / "first")
    assert state == "finished", alerts
    (corpus,) = own.iterdir()
    shared = area / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setenv("COCKPIT_CACHE_DIR", str(shared))
    return corpus


@needs_root
def test_a_corpus_link_planted_in_a_shared_cache_is_refused_and_nothing_written(
    prepared: Path, area: Path
):
    """The corpus' folder name is known in advance (the source, the tokenizer and a hash of
    the settings): the other user links it, in a 1777 cache, to a folder of ours. The run
    wrote its token file and meta.json there, over ours."""
    ours = area / "ours"
    ours.mkdir()
    (ours / "meta.json").write_text(VICTIM_TEXT)
    as_other_user(lambda: (area / "shared" / prepared.name).symlink_to(ours))
    done = cockpit("train", "--headless", "--preset", "tiny", "--run-dir", str(area / "run"),
                   "--no-telemetry", *set_args(SMALL))  # fmt: skip
    assert done.returncode == 2
    shared = area / "shared"
    assert done.stderr == (
        f"cockpit: the data cache {shared} can be written by other users (mode 1777); "
        f"chmod go-w {shared}, or set COCKPIT_CACHE_DIR to a folder of your own\n"
    )
    assert listing(ours) == {"meta.json": VICTIM_TEXT.encode()}


@needs_root
def test_a_corpus_another_user_prepared_is_not_trained_on(prepared: Path, area: Path):
    """The other user puts a prepared corpus of theirs (tokens of their choosing) at the name
    in the shared cache: it was reused as is. Refused, and nothing is trained."""
    planted = area / "shared" / prepared.name
    shutil.copytree(prepared, planted)
    for path in [planted, *planted.rglob("*")]:
        os.chown(path, OTHER, OTHER)
    _, state, alerts = train(area / "run")
    assert state == "failed"
    assert alerts[-1].startswith(f"the data cache {area / 'shared'} can be written by other users")
    assert not (area / "run" / "metrics.jsonl").exists()


# ---------------------------------------------------------------------- what was planted before
@needs_root
def test_a_checkpoint_planted_before_chmod_go_w_is_not_resumed(area: Path):
    """A run directory that others could write in (1777, as the docs once allowed) is refused
    with 'chmod go-w DIR': the other user had put ckpt-00000100.pt (a checkpoint of theirs) in
    it first. After the chmod, the resume trained from their checkpoint, as if it were the
    run's newest. Now refused in one line, nothing changed."""
    run_dir = area / "run"
    _, state, alerts = train(run_dir)
    assert state == "finished", alerts
    theirs = area / "theirs.pt"
    shutil.copy(run_dir / "ckpt-00000003.pt", theirs)
    theirs.chmod(0o644)
    run_dir.chmod(0o1777)
    as_other_user(lambda: shutil.copyfile(theirs, run_dir / "ckpt-00000100.pt"))
    run_dir.chmod(0o755)  # what the refusal says to do
    before = listing(run_dir)
    done = cockpit("train", "--headless", "--resume", str(run_dir), "--no-telemetry",
                   "--set", "train.max_steps=105")  # fmt: skip
    assert done.returncode == 2, done.stdout
    assert done.stderr == (
        f"cockpit: run directory {run_dir} holds ckpt-00000100.pt, which belongs to uid {OTHER}: "
        "another user put it there while they could write in the directory; remove it, and "
        "look over the run's other files before using it\n"
    )
    assert listing(run_dir) == before


@needs_root
def test_a_fork_of_another_users_run_copies_their_checkpoint(area: Path):
    """Root forks a run another user shares (0755, theirs): the branch's checkpoint was a hard
    link to their file, which they could rewrite in place under the branch before it trained
    (and which the branch's run directory then held as theirs). Now a copy of ours; the
    branch trains."""
    theirs = area / "theirs"
    _, state, alerts = train(theirs)
    assert state == "finished", alerts
    for path in [theirs, *theirs.rglob("*")]:
        os.chown(path, OTHER, OTHER, follow_symlinks=False)
    theirs.chmod(0o755)
    branch = area / "branch"
    done = cockpit("fork", str(theirs), "--headless", "--no-telemetry", "--run-dir", str(branch),
                   "--set", "train.max_steps=5")  # fmt: skip
    assert done.returncode == 0, done.stderr
    copied = branch / "ckpt-00000003.pt"
    assert os.lstat(copied).st_uid == 0 and not copied.samefile(theirs / "ckpt-00000003.pt")
    assert (branch / "ckpt-00000005.pt").exists()


# ---------------------------------------------------------------------- tiktoken's cache
@needs_root
def test_a_fifo_planted_in_tiktokens_default_cache_does_not_hang_a_run(
    area: Path, tiktoken_cache: Path
):
    """tiktoken keeps its encoding files in $TMPDIR/data-gym-cache unless TIKTOKEN_CACHE_DIR
    says otherwise: the other user makes that folder first (TMPDIR is world-writable) and puts
    a FIFO at r50k_base's name. Loading the encoding opened it and hung for ever, deaf to
    SIGTERM. Now tiktoken is pointed at the data cache's tiktoken/ (filled here from the
    test's copy of the files, as a first download would)."""
    import hashlib

    tmpdir = area / "tmp"
    tmpdir.mkdir()
    tmpdir.chmod(0o1777)
    url = b"https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"
    key = hashlib.sha1(url).hexdigest()

    def plant() -> None:
        (tmpdir / "data-gym-cache").mkdir(mode=0o755)
        os.mkfifo(tmpdir / "data-gym-cache" / key)

    as_other_user(plant)
    cache = area / "cache"
    cache.mkdir()
    shutil.copytree(tiktoken_cache, cache / "tiktoken")
    unset = ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(TMPDIR=str(tmpdir), COCKPIT_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    code = "from engine.data.tokenizers import check_tokenizer_loads; check_tokenizer_loads"
    code += "('r50k_base'); print('ok')"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=30, env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("loading r50k_base hung on the FIFO another user planted")
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr


# ---------------------------------------------------------------------- torch.compile's cache
@needs_root
def test_compiled_code_is_not_imported_from_a_folder_another_user_made(area: Path):
    """torch.compile (train.compile) writes the code it generates to $TMPDIR/torchinductor_USER
    and imports it back from there on the next run. The other user made that folder first
    (0777): after a run had filled it, they replaced its modules, and the next compiled run
    ran their code as root. Now a compiled run's inductor cache is the data cache's
    torchinductor/ (what inductor would import from is asked of inductor itself)."""
    tmpdir = area / "tmp"
    tmpdir.mkdir()
    tmpdir.chmod(0o1777)
    theirs = tmpdir / "torchinductor_root"
    as_other_user(lambda: (theirs.mkdir(), theirs.chmod(0o777)))
    cache = area / "cache"
    cache.mkdir()
    code = "\n".join([
        "import torch",
        "from engine.distributed.parallel import ParallelPlan, wrap_for_training",
        "wrap_for_training(torch.nn.Linear(2, 2), ParallelPlan('single', 1), torch.device('cpu'), True)",
        "from torch._inductor.runtime.cache_dir_utils import cache_dir",
        "print(cache_dir())",
    ])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env.update(TMPDIR=str(tmpdir), COCKPIT_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    # a new process (forked warm, torch imported: it reads TMPDIR and the cache's place afresh)
    done = warm_process.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{cache / 'torchinductor'}\n"
    assert list(theirs.iterdir()) == []
