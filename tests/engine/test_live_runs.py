"""engine/control/live_runs.py on real sockets: which directories are looked at, what a stale or silent
socket gives (nothing, quickly), the order of several live runs, and that the hello's summary
and viewers are true for a real run."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.control import wire
from engine.control.client import RemoteEngine
from engine.control.live_runs import LiveRun, find_live_runs, probe, socket_dirs
from engine.control.server import ControlServer, serve_run
from engine.control.unix_socket import bind_unix
from engine.events import RunStarted, Step

TIMEOUT = 30.0


def bound_and_closed(run_dir: Path) -> Path:
    """A stale socket file: bound, then closed without unlinking (as a killed run leaves it)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bind_unix(sock, run_dir / wire.SOCKET_NAME)
    sock.close()
    return run_dir


def bound_by_a_process_now_gone(run_dir: Path) -> Path:
    """A stale socket file left by another process that bound and listened, then exited."""
    run_dir.mkdir(parents=True, exist_ok=True)
    code = "import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)"
    subprocess.run([sys.executable, "-c", code, wire.SOCKET_NAME], cwd=run_dir, check=True,
                   timeout=TIMEOUT)  # fmt: skip
    assert (run_dir / wire.SOCKET_NAME).is_socket()
    return run_dir


def run_started(when: float, preset: str = "tiny", max_steps: int = 500) -> RunStarted:
    return RunStarted(
        run_dir="x", preset=preset, description="", config={}, device="cpu", dtype="float32",
        n_params=1, n_params_non_embedding=1, vocab_size=65, tokenizer="char", train_tokens=1,
        val_tokens=1, start_step=0, max_steps=max_steps, tokens_per_step=1, planned_lr=(),
        time=when,
    )  # fmt: skip


@pytest.fixture
def servers() -> Iterator[list[ControlServer]]:
    """Real control servers over stand-in handles; closed at the end whatever happens."""
    made: list[ControlServer] = []
    try:
        yield made
    finally:
        for server in made:
            server.close()


# ---------------------------------------------------------------------------- socket_dirs


def test_socket_dirs_goes_max_depth_deep_and_skips_hidden_dirs(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    wanted = [root, root / "a", root / "sweep" / "lr" / "x" / "run"]  # depths 0, 1 and 4
    too_deep = root / "sweep" / "lr" / "x" / "run" / "inner"  # depth 5
    hidden = [root / ".trash" / "old", root / "a" / ".cache"]
    for run_dir in [*wanted, too_deep, *hidden]:
        bound_and_closed(run_dir)  # socket_dirs only looks; probing is find_live_runs' part
    (root / "b").mkdir()  # a directory without a socket
    assert sorted(socket_dirs(root)) == sorted(wanted)
    assert sorted(socket_dirs(root, max_depth=1)) == [root, root / "a"]
    assert socket_dirs(root, max_depth=0) == [root]
    assert socket_dirs(tmp_path / "missing") == []


# ---------------------------------------------------------------------------- probe


@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_a_stale_socket_probes_as_none_at_once(tmp_path: Path) -> None:
    stale = [
        bound_and_closed(tmp_path / "closed"),
        bound_by_a_process_now_gone(tmp_path / "gone"),
    ]
    started = time.monotonic()
    assert [probe(run_dir) for run_dir in stale] == [None, None]
    assert probe(tmp_path / "no-socket-here") is None
    assert probe(tmp_path / "no-such-dir") is None
    assert time.monotonic() - started < 1.0  # refused, not timed out
    assert find_live_runs(tmp_path) == []


@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_a_socket_that_never_greets_costs_one_timeout(tmp_path: Path) -> None:
    """A listener that never answers (a stopped process: ctrl+z) holds a probe for its
    timeout only, and several of them are probed side by side."""
    listeners = []
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bind_unix(sock, tmp_path / name / wire.SOCKET_NAME)
        sock.listen(4)  # connections queue up; nobody accepts, nothing is sent
        listeners.append(sock)
    try:
        started = time.monotonic()
        assert probe(tmp_path / "a", timeout_s=0.3) is None
        assert 0.25 < time.monotonic() - started < 2.0
        started = time.monotonic()
        assert find_live_runs(tmp_path, timeout_s=1.0) == []
        assert time.monotonic() - started < 2.5  # not 3 x 1 s one after the other
    finally:
        for sock in listeners:
            sock.close()


def test_a_socket_that_answers_something_else_is_not_a_run(tmp_path: Path) -> None:
    """A peer of another user gets a refusal line instead of a hello: not listed."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bind_unix(sock, tmp_path / wire.SOCKET_NAME)
    sock.listen(1)

    def refuse() -> None:
        conn, _ = sock.accept()
        conn.sendall(wire.encode({"kind": "reply", "id": None, "ok": False, "error": "no"}))
        conn.close()

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    try:
        assert probe(tmp_path, timeout_s=5.0) is None
    finally:
        thread.join(TIMEOUT)
        sock.close()


def test_a_hello_with_odd_fields_gives_unknowns_not_a_crash() -> None:
    live = LiveRun.from_hello(Path("r"), {
        "kind": "hello", "pid": "12", "state": "running",
        "summary": {"preset": 3, "step": 7, "max_steps": True, "loss": "x", "started": 5},
        "viewers": [{"viewer": 2, "who": "a"}, "junk"],
    })  # fmt: skip
    assert (live.pid, live.preset, live.step, live.max_steps, live.loss) == (
        None,
        None,
        7,
        None,
        None,
    )
    assert live.started == 5.0 and live.viewers == [{"viewer": 2, "who": "a"}]
    bare = LiveRun.from_hello(Path("r"), {"kind": "hello", "summary": [1], "viewers": {}})
    assert (bare.state, bare.step, bare.viewers) == ("?", 0, [])


# ---------------------------------------------------------------------------- find_live_runs


def test_find_live_runs_lists_the_newest_first_and_skips_the_stale(
    tmp_path: Path, servers: list[ControlServer]
) -> None:
    root = tmp_path / "runs"
    now = time.time()
    for name, when in (("old", now - 7200), ("new", now - 60), ("mid", now - 600)):
        (root / name).mkdir(parents=True)
        server = serve_run(root / name, SimpleNamespace(state="running"), print)
        servers.append(server)
        server(run_started(when, preset=f"p-{name}"))
        server(Step(step=3, loss=2.5, lr=1e-3, grad_norm=1.0, tokens_per_s=1e4,
                    step_time_s=0.01, tokens=300))  # fmt: skip
    # still loading: no run_started yet, so no start time; it is the newest of all
    (root / "sweep" / "loading").mkdir(parents=True)
    loading = serve_run(root / "sweep" / "loading", SimpleNamespace(state="starting"), print)
    servers.append(loading)
    bound_and_closed(root / "killed")
    runs = find_live_runs(root)
    assert [r.run_dir for r in runs] == [
        root / "sweep" / "loading",
        root / "new",
        root / "mid",
        root / "old",
    ]
    assert [r.preset for r in runs] == [None, "p-new", "p-mid", "p-old"]
    assert [r.state for r in runs] == ["starting", "running", "running", "running"]
    assert runs[1].started == pytest.approx(now - 60)
    assert (runs[1].step, runs[1].max_steps, runs[1].loss) == (3, 500, 2.5)
    assert runs[0].step == 0 and runs[0].loss is None and runs[0].started is None


# ---------------------------------------------------------------------------- a real run


def test_the_hello_summary_and_viewers_are_true_for_a_real_run(tmp_path: Path) -> None:
    """A real tiny Trainer in a thread serves its socket: paused, its summary is the step and
    loss it stopped at, its preset and max_steps; its viewers are the two attached, named."""
    from engine.config.presets import load_preset
    from engine.train.trainer import Trainer

    run_dir = tmp_path / "run"
    trainer = Trainer(load_preset("tiny", ["train.max_steps=100000"]), run_dir=run_dir,
                      telemetry=False, interactive=False)  # fmt: skip
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    viewers: list[RemoteEngine] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while (live := probe(run_dir, timeout_s=1.0)) is None or live.step < 3:
            assert time.monotonic() < deadline and thread.is_alive(), "the run never served"
            time.sleep(0.02)
        assert live.state == "running" and live.viewers == []
        trainer.pause()
        while (live := probe(run_dir)) is None or live.state != "paused":
            assert time.monotonic() < deadline, "the run never paused"
            time.sleep(0.02)
        last = [e for e in trainer.drain_events() if isinstance(e, Step)][-1]
        assert last.step == trainer.step
        assert live.step == last.step and live.loss == pytest.approx(last.loss)
        assert live.preset == "tiny" and live.max_steps == 100_000
        assert live.tokens_per_s == pytest.approx(last.tokens_per_s)
        assert live.step_time_s == pytest.approx(last.step_time_s)
        assert live.started is not None and 0 <= time.time() - live.started < TIMEOUT
        assert live.pid is not None

        viewers.append(RemoteEngine(run_dir, who="alice@gpu1 (pts/3)"))
        viewers.append(RemoteEngine(run_dir, who="bob@gpu2 (pts/7)", read_only=True))
        expected = [
            {"viewer": viewers[0].viewer, "who": "alice@gpu1 (pts/3)", "read_only": False},
            {"viewer": viewers[1].viewer, "who": "bob@gpu2 (pts/7)", "read_only": True},
        ]
        # a viewer says who it is just after it connects: wait for the server to have read it
        while (live := probe(run_dir)) is None or live.viewers != expected:
            assert time.monotonic() < deadline, f"viewers {live and live.viewers}"
            time.sleep(0.02)
        viewers.pop().close()  # one leaves: the next look no longer lists it
        while (live := probe(run_dir)) is None or live.viewers != expected[:1]:
            assert time.monotonic() < deadline, f"viewers {live and live.viewers}"
            time.sleep(0.02)
    finally:
        for viewer in viewers:
            viewer.close()
        trainer.stop(checkpoint=False)
        thread.join(TIMEOUT)
    assert not thread.is_alive()
    assert probe(run_dir) is None  # the run ended: its socket is gone
