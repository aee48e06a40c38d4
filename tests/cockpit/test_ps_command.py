"""`cockpit ps` as a user runs it (`python -m cockpit ps DIR`) against a real headless run with
two real viewers attached, beside stale and silent sockets; its refusals; its table's width."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import warm_process
from live_process import REPO, LiveRun

from cockpit.cli.ps import table
from cockpit.figures.run_table import fmt_uptime
from engine.control import wire
from engine.control.client import RemoteEngine
from engine.control.live_runs import LiveRun as Found
from engine.control.live_runs import probe
from engine.control.unix_socket import bind_unix

TIMEOUT = 30.0
ALICE = "alice@gpu1 (pts/3)"
BOB = "bob@gpu2 (pts/7)"


def ps(*args: str, cwd: Path = REPO, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """`cockpit ps` piped, as a script reads it: 80 columns (no COLUMNS, no terminal); a process
    of its own, forked warm (test_ps_imports_neither_torch_nor_the_app starts a fresh one)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return warm_process.run([sys.executable, "-m", "cockpit", "ps", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=timeout, env=env)  # fmt: skip


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRun]:
    """A live tiny run under DIR/tiny-live, alice attached, bob attached read-only; next to it a
    socket left by a dead process and a socket that never greets (a stopped process)."""
    root = tmp_path_factory.mktemp("ps") / "runs"
    with pytest.MonkeyPatch.context() as env:  # as tests/conftest.py's autouse fixture does
        env.setenv("COCKPIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cockpit-cache"))
        run = LiveRun(root / "tiny-live", "checkpoint.interval=1000000")  # saving is a state too
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        viewers: list[RemoteEngine] = []
        try:
            run.start()
            viewers.append(RemoteEngine(run.run_dir, who=ALICE))
            viewers.append(RemoteEngine(run.run_dir, who=BOB, read_only=True))
            wait_for_viewers(run.run_dir, 2)
            dead = root / "old" / "dead"
            dead.mkdir(parents=True)
            code = "import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])"
            warm_process.run([sys.executable, "-c", code, wire.SOCKET_NAME], cwd=dead, check=True,
                           timeout=TIMEOUT)  # fmt: skip
            (root / "stopped").mkdir()
            bind_unix(silent, root / "stopped" / wire.SOCKET_NAME)
            silent.listen(4)  # accepts nothing, says nothing
            yield run
        finally:
            for viewer in viewers:
                viewer.close()
            silent.close()
            run.close()


def wait_for_viewers(run_dir: Path, count: int) -> None:
    """Until the run knows both viewers by name (each says who it is just after connecting)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        live = probe(run_dir)
        if live is not None and sum(1 for v in live.viewers if v.get("who")) == count:
            return
        assert time.monotonic() < deadline, f"viewers never named: {live}"
        time.sleep(0.02)


def test_ps_lists_the_live_run_and_who_watches_it(watched: LiveRun) -> None:
    root = watched.run_dir.parent
    started = time.monotonic()
    result = ps("runs", cwd=root.parent)  # as from a project's folder: runs/tiny-live
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["RUN", "PRESET", "STATE", "STEP", "LOSS", "TOK/S", "UP", "WHO"]
    rows = [line for line in lines[1:] if not line.startswith(" ")]
    assert len(rows) == 1, result.stdout  # the dead and the silent sockets are not runs
    run_name, preset, state, steps, loss, tokens_per_s, *up, viewers = rows[0].split()
    assert run_name == "runs/tiny-live"
    # the run checkpoints on its interval, so ps may catch it saving: both are a live run
    assert (preset, viewers) == ("tiny", "2") and state in ("running", "saving"), rows[0]
    step, max_steps = steps.split("/")
    assert int(step.replace(",", "")) > 0 and max_steps == "1M"
    assert float(loss) > 0 and tokens_per_s != "-"
    assert up and up[-1].endswith("s")  # seconds into the session, e.g. "12s" or "1m 05s"
    assert lines[lines.index(rows[0]) + 1 :] == [f"  - {ALICE}", f"  - {BOB}, read-only"]
    assert max(len(line) for line in lines) <= 80
    # the silent socket costs one probe timeout at most (2 s), and nothing waits on the dead one
    assert elapsed < 15.0


def test_a_run_directory_is_never_cut_piped_at_80_columns(watched: LiveRun) -> None:
    """From elsewhere the run's directory is its absolute path, too long for 80 columns with
    every figure: the figures give way, and what is printed is what `cockpit attach` takes."""
    result = ps(str(watched.run_dir.parent), cwd=REPO)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header, run_row = lines[0].split(), lines[1]
    assert header[0] == "RUN" and {"STATE", "STEP", "LOSS"} <= set(header), header
    assert len(header) < 8, result.stdout  # an optional column gave way to the directory
    shown = run_row.split()[0]
    assert shown == str(watched.run_dir.absolute()), result.stdout
    assert Path(shown).is_dir() and (Path(shown) / wire.SOCKET_NAME).exists()
    assert len(run_row) <= 80 or header == ["RUN", "STATE", "STEP", "LOSS"], result.stdout
    assert lines[2:] == [f"  - {ALICE}", f"  - {BOB}, read-only"]


def test_ps_json_agrees_with_the_run(watched: LiveRun) -> None:
    result = ps(str(watched.run_dir.parent), "--json")
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)
    assert len(runs) == 1
    run = runs[0]
    assert run["run_dir"] == os.path.abspath(watched.run_dir)
    assert run["pid"] == watched.pid
    assert (run["preset"], run["max_steps"]) == ("tiny", 1_000_000)
    assert run["state"] in ("running", "saving"), run  # as in the table
    assert isinstance(run["step"], int) and 0 < run["step"] <= watched.step() + 1000
    assert isinstance(run["loss"], float) and run["loss"] > 0
    assert isinstance(run["tokens_per_s"], float) and run["tokens_per_s"] > 0
    assert isinstance(run["step_time_s"], float) and run["step_time_s"] > 0
    assert isinstance(run["started"], float) and 0 < run["uptime_s"] < 600
    assert run["uptime_s"] == pytest.approx(time.time() - run["started"], abs=30)
    named = [(v["who"], v["read_only"]) for v in run["viewers"]]
    assert named == [(ALICE, False), (BOB, True)]
    assert all(isinstance(v["viewer"], int) for v in run["viewers"])


def test_a_stale_socket_alone_is_no_live_run(tmp_path: Path) -> None:
    """A socket whose process is gone (bound in a process that exited) and one bound and
    closed here: refused at once, so `ps` says there is no live run."""
    for name in ("gone", "closed"):
        (tmp_path / name).mkdir()
    code = "import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])"
    warm_process.run([sys.executable, "-c", code, wire.SOCKET_NAME], cwd=tmp_path / "gone",
                   check=True, timeout=TIMEOUT)  # fmt: skip
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bind_unix(sock, tmp_path / "closed" / wire.SOCKET_NAME)
    sock.close()
    result = ps(str(tmp_path), timeout=10)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == f"no live runs under {tmp_path} (start one with `cockpit start`)\n"
    assert json.loads(ps(str(tmp_path), "--json", timeout=10).stdout) == []


def test_an_empty_directory_has_no_live_runs(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    result = ps(cwd=tmp_path)  # DIR defaults to runs
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == "no live runs under runs (start one with `cockpit start`)\n"


@pytest.mark.parametrize("make", ["missing", "file"])
def test_a_directory_that_is_not_there_is_one_line_exit_2(tmp_path: Path, make: str) -> None:
    target = tmp_path / "nowhere"
    if make == "file":
        target.write_text("")
    result = ps(str(target), cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(f"cockpit ps: {target}") and "cockpit ps DIR" in result.stderr
    assert "Traceback" not in result.stderr


def test_ps_imports_neither_torch_nor_the_app(tmp_path: Path) -> None:
    code = (
        "import sys; from cockpit.cli import main; code = main(['ps', sys.argv[1]]);"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'textual')];"
        "print(bad); sys.exit(code or (1 if bad else 0))"
    )
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, text=True,
                            capture_output=True, timeout=TIMEOUT)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------------------- the table alone


def found(
    run_dir: str, *, started: float | None = 1000.0, viewers: int = 0, preset: str = "tiny"
) -> Found:
    return Found(
        run_dir=Path(run_dir), pid=1, state="running", preset=preset, started=started,
        step=123_456, max_steps=2_000_000, loss=2.3456, tokens_per_s=123_456.0,
        step_time_s=0.01,
        viewers=[{"viewer": i + 1, "who": "", "read_only": i % 2 == 1} for i in range(viewers)],
    )  # fmt: skip


LONG = "/data/experiments/2026/november/sweeps/learning-rate/speedrun-cpu-20261130-151500"


def test_at_80_columns_the_optional_columns_give_way_before_a_directory_is_cut() -> None:
    short = "runs/sweep/lr-3e-4-wd-0.1"
    lines = table([found(short, viewers=2, preset="speedrun-cpu"), found("runs/b")], 1000.0 + 3725)
    # the viewers' count goes first (they are named below), then the session's age
    assert lines[0].split() == ["RUN", "PRESET", "STATE", "STEP", "LOSS", "TOK/S"]
    assert max(len(line) for line in lines) <= 80
    assert lines[1].split() == [short, "speedrun-cpu", "running", "123,456/2M", "2.3456", "123k"]
    assert lines[2:4] == ["  - viewer 1", "  - viewer 2, read-only"]  # who watches, named
    assert lines[4].split()[0] == "runs/b"


def test_a_directory_too_long_for_80_columns_is_whole_and_the_row_wider() -> None:
    lines = table([found(LONG, viewers=2, preset="speedrun-cpu"), found("runs/b")], 1000.0 + 3725)
    assert lines[0].split() == ["RUN", "STATE", "STEP", "LOSS"]
    assert lines[1].split() == [LONG, "running", "123,456/2M", "2.3456"]
    assert lines[4].split()[0] == "runs/b"


def test_a_wider_terminal_shows_every_column() -> None:
    lines = table([found(LONG)], 1000.0, width=200)
    assert lines[0].split() == ["RUN", "PRESET", "STATE", "STEP", "LOSS", "TOK/S", "UP", "WHO"]
    assert lines[1].startswith(LONG + " ")


def test_how_long_reads_like_a_clock_of_two_units() -> None:
    assert [fmt_uptime(s) for s in (None, 42, 65, 3725, 2 * 86400 + 3 * 3600)] == [
        "-",
        "42s",
        "1m 05s",
        "1h 02m",
        "2d 03h",
    ]
    assert table([found("r", started=None)], 0.0)[1].split()[6] == "-"  # still starting


def test_a_viewer_name_cannot_break_the_table_or_the_terminal() -> None:
    run = found("runs/a")
    odd = {"viewer": 9, "who": "eve\n\x1b[2Jx", "read_only": True}
    lines = table([Found(**{**run.__dict__, "viewers": [odd]})], 1000.0)
    assert lines[2:] == ["  - eve??[2Jx, read-only"]
