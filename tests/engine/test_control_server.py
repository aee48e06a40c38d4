"""A run's control socket, against a real tiny Trainer in a thread and real AF_UNIX clients."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import warm_process

from engine.config.presets import load_preset
from engine.control import wire
from engine.control.unix_socket import connect_unix
from engine.train.trainer import Trainer

TIMEOUT = 20.0


class Client:
    """A viewer: reads the server's lines, sends commands."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        connect_unix(self.sock, path)
        self.stream = self.sock.makefile("rb")

    def read(self) -> dict[str, Any]:
        line = self.stream.readline()
        assert line, "the server closed the connection"
        return json.loads(line)

    def until(self, check: Any) -> list[dict[str, Any]]:
        """Messages up to and including the first one `check` accepts."""
        seen = []
        while True:
            message = self.read()
            seen.append(message)
            if check(message):
                return seen

    def send(self, data: bytes | dict[str, Any]) -> None:
        self.sock.sendall(data if isinstance(data, bytes) else wire.encode(data))

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


def start_run(run_dir: Path, *extra: str, steps: int = 100_000) -> tuple[Trainer, threading.Thread]:
    trainer = Trainer(
        load_preset("tiny", [f"train.max_steps={steps}", *extra]),
        run_dir=run_dir,
        telemetry=False,
        interactive=False,
    )
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT
    while not (run_dir / wire.SOCKET_NAME).exists() or trainer.step < 2:
        assert time.monotonic() < deadline and thread.is_alive(), trainer.drain_events()[-3:]
        time.sleep(0.01)
    return trainer, thread


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Trainer, Path]]:
    run_dir = tmp_path / "run"
    trainer, thread = start_run(run_dir)
    yield trainer, run_dir
    trainer.stop(checkpoint=False)
    thread.join(TIMEOUT)
    assert not thread.is_alive()


def steps_grow(trainer: Trainer, by: int = 5) -> bool:
    start, deadline = trainer.step, time.monotonic() + TIMEOUT
    while trainer.step < start + by:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def files_beside_checkpoints(run_dir: Path) -> list[str]:
    """A run directory's files but the live run's checkpoints (its interval saves may come
    while a test looks) and the temporary files of its atomic writes (summary.json's)."""
    return sorted(
        p.name
        for p in run_dir.iterdir()
        if not p.name.startswith(("ckpt-", "best")) and not p.name.endswith(".tmp")
    )


def is_kind(kind: str, **fields: Any) -> Any:
    return lambda m: m.get("kind") == kind and all(m.get(k) == v for k, v in fields.items())


def test_hello_replay_then_live_in_order_and_the_socket_is_private(live) -> None:
    trainer, run_dir = live
    sock = run_dir / wire.SOCKET_NAME
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    assert stat.S_ISSOCK(sock.stat().st_mode)
    steps_grow(trainer, 10)
    client = Client(sock)
    hello = client.read()
    assert hello["kind"] == "hello" and hello["protocol"] == wire.PROTOCOL
    assert hello["run_dir"] == str(run_dir) and hello["pid"] == os.getpid()
    replay = [client.read() for _ in range(hello["replay"])]
    assert replay[0]["kind"] == "run_started" and replay[0]["preset"] == "tiny"
    replayed_steps = [r["step"] for r in replay if r["kind"] == "step"]
    assert len(replayed_steps) >= 10 and replayed_steps == sorted(set(replayed_steps))
    assert client.read() == {"kind": "live"}
    live_steps = [m["step"] for m in client.until(is_kind("step")) if m["kind"] == "step"]
    live_steps += [m["step"] for m in client.until(is_kind("step")) if m["kind"] == "step"]
    # nothing missed, nothing twice between the replay and the live stream
    assert live_steps == list(range(replayed_steps[-1] + 1, replayed_steps[-1] + 3))
    client.close()


def test_pause_resume_and_set_lr_through_the_socket_seen_by_both_viewers(live) -> None:
    trainer, run_dir = live
    one, two = Client(run_dir / wire.SOCKET_NAME), Client(run_dir / wire.SOCKET_NAME)
    for client in (one, two):
        client.until(lambda m: m == {"kind": "live"})
    one.send({"cmd": "pause", "id": "p"})
    assert one.until(is_kind("reply", id="p"))[-1]["ok"] is True
    for client in (one, two):
        client.until(is_kind("state", state="paused"))
    assert trainer.state == "paused"
    paused_at = trainer.step
    time.sleep(0.3)
    assert trainer.step == paused_at  # the step counter stopped
    two.send({"cmd": "set_lr", "id": 7, "lr": 0.0005})
    assert two.until(is_kind("reply", id=7))[-1]["ok"] is True
    for client in (one, two):
        changed = client.until(is_kind("lr_changed"))[-1]
        # the LR typed is the LR now, or during warmup the LR warmup ends at
        typed = changed["new_lr"] if changed["warmup_ends"] is None else changed["after_warmup_lr"]
        assert typed == pytest.approx(0.0005, rel=1e-3)
    two.send({"cmd": "resume", "id": 8})
    for client in (one, two):
        client.until(is_kind("state", state="running"))
    assert steps_grow(trainer)
    one.close()
    two.close()


def test_bad_lines_are_refused_and_the_run_keeps_stepping(live) -> None:
    trainer, run_dir = live
    client = Client(run_dir / wire.SOCKET_NAME)
    client.until(lambda m: m == {"kind": "live"})
    client.send(b"{not json\n")
    refused = client.until(is_kind("reply"))[-1]
    assert refused["ok"] is False and "not a JSON line" in refused["error"]
    client.send(b"{also not json\n")
    client.until(is_kind("reply"))
    client.send({"cmd": "explode", "id": 3})
    refused = client.until(is_kind("reply"))[-1]
    assert refused == {**refused, "id": 3, "ok": False} and "unknown command" in refused["error"]
    client.send({"cmd": "set_lr", "id": 4, "lr": "fast"})
    assert "must be a number" in client.until(is_kind("reply"))[-1]["error"]
    assert steps_grow(trainer)
    # one warning per kind of mistake, not one per line
    alerts = [e for e in trainer.drain_events() if e.kind == "alert" and e.code == "socket"]
    assert len(alerts) == 2 and "not a JSON line" in alerts[0].message

    huge = Client(run_dir / wire.SOCKET_NAME)
    huge.until(lambda m: m == {"kind": "live"})
    huge.send(b"x" * (wire.MAX_LINE_BYTES + 10) + b"\n")
    reply = huge.until(is_kind("reply"))[-1]
    assert reply["ok"] is False and "limit" in reply["error"]
    with pytest.raises((AssertionError, OSError)):  # then the connection is closed
        for _ in range(100_000):
            huge.read()
    assert steps_grow(trainer)
    client.send({"cmd": "checkpoint", "id": 5})  # the other viewer is still served
    assert client.until(is_kind("reply", id=5))[-1]["ok"] is True
    client.close()


def test_a_read_only_viewer_cannot_command(live) -> None:
    trainer, run_dir = live
    client = Client(run_dir / wire.SOCKET_NAME)
    client.until(lambda m: m == {"kind": "live"})
    client.send({"hello": {"read_only": True}, "id": 0})
    assert client.until(is_kind("reply", id=0))[-1]["ok"] is True
    client.send({"cmd": "pause", "id": 1})
    refused = client.until(is_kind("reply", id=1))[-1]
    assert refused["ok"] is False and "read-only" in refused["error"]
    assert steps_grow(trainer) and trainer.state in ("running", "saving")  # not paused
    client.close()


def rate(trainer: Trainer, seconds: float) -> float:
    start, t0 = trainer.step, time.monotonic()
    time.sleep(seconds)
    return (trainer.step - start) / (time.monotonic() - t0)


@pytest.mark.serial  # two step rates compared: a test beside it would slow one of them
def test_a_viewer_that_never_reads_does_not_slow_the_run(live) -> None:
    trainer, run_dir = live
    alone = max(rate(trainer, 0.5) for _ in range(2))
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    connect_unix(stuck, run_dir / wire.SOCKET_NAME)  # and never reads
    time.sleep(0.5)  # its socket buffer fills; its queue grows, then resyncs
    with_stuck = max(rate(trainer, 0.5) for _ in range(2))  # best of two: CI machines are noisy
    assert with_stuck > 0.5 * alone, (alone, with_stuck)
    # a well-behaved viewer beside it still gets the live stream
    reader = Client(run_dir / wire.SOCKET_NAME)
    reader.until(lambda m: m == {"kind": "live"})
    reader.until(is_kind("step"))
    reader.close()
    stuck.close()


def test_a_second_engine_on_the_directory_is_refused_with_one_line(live) -> None:
    trainer, run_dir = live
    before = files_beside_checkpoints(run_dir)
    second = Trainer(
        load_preset("tiny", ["train.max_steps=5"]),
        run_dir=run_dir,
        telemetry=False,
        interactive=False,
    )
    assert second.run() == "failed"
    (error,) = [e.message for e in second.drain_events() if e.kind == "alert"]
    assert "\n" not in error and f"in use by another engine (pid {os.getpid()}" in error
    assert files_beside_checkpoints(run_dir) == before
    assert steps_grow(trainer)  # the first one is untouched


@pytest.mark.parametrize("how", ["--run-dir", "--resume"])
def test_from_the_command_line_a_second_engine_is_one_line_exit_2(live, how) -> None:
    """Refused before anything starts: a resume of a live run would otherwise set aside its
    newer checkpoints, a new run in its directory would write beside it."""
    trainer, run_dir = live
    before = files_beside_checkpoints(run_dir)
    extra = ["--run-dir", str(run_dir)] if how == "--run-dir" else ["--resume", str(run_dir)]
    # another process (forked warm: torch imported already), as a second `cockpit` would be
    result = warm_process.run(
        [sys.executable, "-m", "cockpit", "train", "--headless", "--preset", "tiny", *extra,
         "--set", "train.max_steps=5"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"cockpit: run directory {run_dir} is in use by another engine")
    assert len(result.stderr.splitlines()) == 1 and not result.stdout
    assert files_beside_checkpoints(run_dir) == before
    assert steps_grow(trainer)


def test_stale_socket_replaced_and_the_socket_gone_after_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # a socket bound by a process that then died (as a SIGKILLed run leaves it)
    code = (
        f"import socket; s=socket.socket(socket.AF_UNIX); s.bind({str(run_dir / 'control.sock')!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert (run_dir / "control.sock").is_socket()
    trainer, thread = start_run(run_dir, steps=40)
    client = Client(run_dir / wire.SOCKET_NAME)
    assert client.read()["kind"] == "hello"
    # the run's end: the final state is sent, then the connection closes
    final = client.until(is_kind("state", state="finished"))[-1]
    assert final["step"] == 40
    assert client.stream.readline() == b""
    thread.join(TIMEOUT)
    assert not (run_dir / "control.sock").exists()
    client.close()


def test_a_run_directory_too_long_for_af_unix_is_served(tmp_path: Path) -> None:
    run_dir = tmp_path / ("d" * 60) / ("e" * 60)
    trainer, thread = start_run(run_dir, steps=100_000)
    assert len(os.fsencode(run_dir / "control.sock")) > 108
    client = Client(run_dir / wire.SOCKET_NAME)
    assert client.read()["kind"] == "hello"
    trainer.stop(checkpoint=False)
    client.until(is_kind("state", state="stopped"))
    thread.join(TIMEOUT)
    client.close()


@pytest.mark.skipif(os.getuid() != 0, reason="only root can connect as another uid")
def test_a_peer_of_another_uid_is_refused(live) -> None:
    trainer, run_dir = live
    sock = run_dir / wire.SOCKET_NAME
    os.chmod(run_dir, 0o711)  # a run directory is 0700: let the other user reach the socket
    os.chmod(sock, 0o666)  # ...and open it: the peer check must still refuse
    code = (
        "import os, socket\n"
        f"fd = os.open({str(run_dir)!r}, os.O_RDONLY | os.O_DIRECTORY)\n"
        "os.setuid(65534)\n"
        "s = socket.socket(socket.AF_UNIX); s.settimeout(10)\n"
        "s.connect(f'/proc/self/fd/{fd}/control.sock')\n"
        "print(s.makefile('rb').readline().decode())"
    )
    # the directory was opened as root: the tmp dirs above it (0700) are not in the way
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).resolve().parents[2],
    )
    if "Permission denied" in result.stderr:
        pytest.skip("the other uid cannot reach the socket's directory here")
    reply = json.loads(result.stdout)
    assert reply["ok"] is False and "uid 65534" in reply["error"]
    assert steps_grow(trainer) and trainer.state in ("running", "saving")  # not paused


@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_a_viewer_that_falls_behind_is_resynchronised_not_waited_for(tmp_path: Path) -> None:
    """The server alone (a stand-in handle): a viewer that stops reading while its queue
    overflows gets {"kind": "resync"} and the replay again, then the live stream."""
    from types import SimpleNamespace

    from engine.control.server import serve_run
    from engine.events import Alert, Step

    handle = SimpleNamespace(state="running")
    alerts: list[str] = []
    server = serve_run(tmp_path, handle, alerts.append)
    server.queue_size = 50
    client = Client(tmp_path / wire.SOCKET_NAME)
    client.until(lambda m: m == {"kind": "live"})
    # big alerts fill the socket's buffers: the writer blocks and the queue fills up
    started = time.monotonic()
    for _ in range(200):
        server(Alert(level="info", message="x" * 20_000, step=0))
    for step in range(1, 301):
        server(
            Step(
                step=step,
                loss=1.0,
                lr=1e-3,
                grad_norm=1.0,
                tokens_per_s=1.0,
                step_time_s=0.01,
                tokens=step,
            )
        )
    assert time.monotonic() - started < 2.0  # the producer never waited for the viewer
    seen = client.until(is_kind("step", step=300))
    resync = [m for m in seen if m["kind"] == "resync"]
    assert resync and resync[0]["replay"] >= 1
    after = seen[seen.index(resync[-1]) + 1 :]
    steps = [m["step"] for m in after if m["kind"] == "step"]
    assert steps == sorted(steps) and steps[-1] == 300  # replay then live: no gaps backwards
    server.close()
    assert not (tmp_path / wire.SOCKET_NAME).exists()
    client.close()


def test_a_remote_engine_steers_a_real_run_and_detaches_leaving_it_running(live) -> None:
    """The client the app will attach with (engine/control/client.py) against this server: the history
    arrives as events, pause and resume round-trip, an LR change is acknowledged, and leaving
    (run's should_stop) detaches without stopping the run."""
    from engine.control.client import DETACHED, RemoteEngine

    trainer, run_dir = live
    remote = RemoteEngine(run_dir)
    seen: list[Any] = []

    def wait_for(condition: Any) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not condition():
            assert time.monotonic() < deadline, [e.kind for e in seen][-10:]
            seen.extend(remote.drain_events())
            time.sleep(0.01)

    wait_for(lambda: any(e.kind == "run_started" for e in seen))
    remote.pause()
    wait_for(lambda: remote.state == "paused")
    paused_at = trainer.step
    time.sleep(0.3)
    assert trainer.step == paused_at  # the run itself stopped stepping
    remote.set_lr(1e-3)
    wait_for(lambda: any(e.kind == "lr_changed" for e in seen))
    remote.resume()
    wait_for(lambda: remote.state == "running")
    assert steps_grow(trainer)
    assert remote.run(should_stop=lambda: True) == DETACHED
    assert steps_grow(trainer)  # detached, not stopped
