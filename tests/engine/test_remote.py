"""RemoteEngine, the client of a run's control socket, against a small server written here on a
real AF_UNIX socket and engine.control.wire (the real server is engine/control/server.py)."""

from __future__ import annotations

import inspect
import os
import queue
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engine.contract import EngineHandle
from engine.control import wire
from engine.control.client import DETACHED, EngineUnreachable, RemoteEngine
from engine.events import Alert, CheckpointSaved, Event, RunState, StateChanged, Step

T = 1234.5  # events made here carry fixed times, so a record and its event compare equal


def step(n: int) -> Step:
    return Step(step=n, loss=3.0 - n / 10, lr=1e-3, grad_norm=0.5, tokens_per_s=1e4,
                step_time_s=0.01, tokens=768 * n, update_ratio=1e-3, time=1000.0 + n)  # fmt: skip


class FakeRun:
    """One viewer's server: hello, the replay, live; then whatever the test sends. Records the
    commands it receives (in `commands`, a queue) and whether the viewer hung up."""

    def __init__(
        self,
        run_dir: Path,
        replay: list[Event],
        protocol: int = wire.PROTOCOL,
        address: str | None = None,  # where to bind, when not run_dir's socket path itself
    ) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = run_dir
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(address or str(run_dir / wire.SOCKET_NAME))
        self.listener.listen(1)
        self.hello = {"kind": "hello", "protocol": protocol, "run_dir": str(run_dir),
                      "pid": os.getpid(), "state": RunState.RUNNING, "viewer": 1,
                      "read_only": False, "replay": len(replay)}  # fmt: skip
        self.replay = replay
        self.commands: queue.Queue[dict[str, Any]] = queue.Queue()
        self.hellos: queue.Queue[dict[str, Any]] = queue.Queue()  # the client's introductions
        self.hung_up = threading.Event()
        self.conn: socket.socket | None = None
        self.connected = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        self.listener.close()  # one viewer is all a test needs
        self.conn = conn
        try:
            conn.sendall(wire.encode(self.hello))
            for event in self.replay:
                conn.sendall(wire.encode(event.to_record()))
            conn.sendall(wire.encode({"kind": "live"}))
        except (BrokenPipeError, ConnectionResetError):  # a client that refused the hello left
            conn.close()
            self.hung_up.set()
            return
        self.connected.set()
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                message = wire.decode(line.rstrip(b"\n"))
                (self.hellos if "hello" in message else self.commands).put(message)
        self.hung_up.set()

    def send(self, *records: dict[str, Any]) -> None:
        assert self.connected.wait(5)
        assert self.conn is not None
        for record in records:
            self.conn.sendall(wire.encode(record))

    def die(self) -> None:
        """The engine is gone: the connection drops, the socket file stays (as after kill -9)."""
        assert self.connected.wait(5)
        assert self.conn is not None
        self.conn.shutdown(socket.SHUT_RDWR)

    def next_command(self) -> dict[str, Any]:
        return self.commands.get(timeout=5)


def drain_until(engine: RemoteEngine, done: Any, timeout_s: float = 5.0) -> list[Event]:
    """Events drained until `done(events so far)` holds."""
    events: list[Event] = []
    deadline = time.monotonic() + timeout_s
    while not done(events):
        assert time.monotonic() < deadline, f"timed out with {events}"
        events += engine.drain_events()
        time.sleep(0.005)
    return events


def alerts(events: list[Event]) -> list[Alert]:
    return [e for e in events if isinstance(e, Alert)]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


def test_replay_then_live_events_arrive_in_order_and_state_follows(run_dir: Path) -> None:
    history = [step(1), step(2), CheckpointSaved(step=2, path=str(run_dir / "ckpt-00000002.pt"),
                                                 reason="interval", time=1002.5)]  # fmt: skip
    server = FakeRun(run_dir, history)
    engine = RemoteEngine(run_dir)
    assert isinstance(engine, EngineHandle)
    assert engine.state == RunState.RUNNING and engine.viewer == 1
    server.send(step(3).to_record(), StateChanged(state="paused", step=3, time=T).to_record())
    events = drain_until(engine, lambda got: len(got) >= 5)
    assert events == [*history, step(3), StateChanged(state="paused", step=3, time=T)]
    assert engine.state == RunState.PAUSED and engine.live
    server.send(StateChanged(state="running", step=3).to_record())
    drain_until(engine, lambda got: got)
    assert engine.state == RunState.RUNNING
    engine.close()


def test_each_command_sends_its_wire_line_with_an_increasing_id(run_dir: Path) -> None:
    server = FakeRun(run_dir, [])
    engine = RemoteEngine(run_dir)
    engine.pause()
    engine.resume()
    engine.checkpoint()
    engine.set_lr(3e-4)
    engine.scale_lr(0.5)
    engine.sample()
    engine.evaluate()
    engine.rollback()
    engine.stop(checkpoint=False, reason="enough")
    received = [server.next_command() for _ in range(9)]
    assert received == [
        {"cmd": "pause", "id": 1}, {"cmd": "resume", "id": 2}, {"cmd": "checkpoint", "id": 3},
        {"cmd": "set_lr", "id": 4, "lr": 3e-4}, {"cmd": "scale_lr", "id": 5, "factor": 0.5},
        {"cmd": "sample", "id": 6}, {"cmd": "evaluate", "id": 7},
        {"cmd": "rollback", "id": 8, "lr_factor": 0.5},
        {"cmd": "stop", "id": 9, "checkpoint": False, "reason": "enough"},
    ]  # fmt: skip
    engine.close()


def test_a_refused_command_becomes_a_warning_alert(run_dir: Path) -> None:
    server = FakeRun(run_dir, [])
    engine = RemoteEngine(run_dir)
    engine.pause()
    sent = server.next_command()
    server.send({"kind": "reply", "id": sent["id"], "ok": False, "error": "read-only viewer"})
    (alert,) = alerts(drain_until(engine, alerts))
    assert alert.level == "warning" and alert.code == "socket"
    assert "pause" in alert.message and "read-only viewer" in alert.message
    server.send({"kind": "reply", "id": sent["id"], "ok": True})  # an ok reply shows nothing
    time.sleep(0.05)
    assert engine.drain_events() == []
    engine.close()


def test_a_bad_argument_is_an_alert_not_a_line(run_dir: Path) -> None:
    server = FakeRun(run_dir, [])
    engine = RemoteEngine(run_dir)
    engine.set_lr(float("nan"))
    (alert,) = alerts(drain_until(engine, alerts))
    assert "set_lr" in alert.message and alert.code == "socket"
    engine.pause()
    assert server.next_command()["cmd"] == "pause"  # nothing else went out before it
    engine.close()


def test_should_stop_detaches_without_stopping_the_run(run_dir: Path) -> None:
    server = FakeRun(run_dir, [step(1)])
    engine = RemoteEngine(run_dir)
    asked = threading.Event()
    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(engine.run(asked.is_set)))
    worker.start()
    time.sleep(0.1)
    assert worker.is_alive()  # run() blocks while the run goes on
    asked.set()
    worker.join(5)
    assert result == [DETACHED]
    assert server.hung_up.wait(5) and server.commands.empty()  # no stop went out
    assert engine.state == RunState.RUNNING
    assert not alerts(engine.drain_events())  # detaching is not an error


def test_run_returns_the_final_state_when_the_server_closes(run_dir: Path) -> None:
    server = FakeRun(run_dir, [])
    engine = RemoteEngine(run_dir)
    server.send(step(5).to_record(),
                StateChanged(state="finished", step=5, reason="max_steps", time=T).to_record())  # fmt: skip
    server.die()
    assert engine.run(lambda: False) == RunState.FINISHED
    events = engine.drain_events()
    assert events[-1] == StateChanged(state="finished", step=5, reason="max_steps", time=T)
    assert not alerts(events)


def test_an_engine_that_dies_is_named_with_its_checkpoint_and_resume_command(
    run_dir: Path,
) -> None:
    server = FakeRun(run_dir, [step(1)])
    for n in (10, 20):
        (run_dir / f"ckpt-{n:08d}.pt").write_bytes(b"")
    engine = RemoteEngine(run_dir)
    server.send(step(21).to_record())
    server.die()
    assert engine.run(lambda: False) == RunState.FAILED
    events = engine.drain_events()
    (alert,) = alerts(events)
    assert alert.level == "error" and alert.code == "engine_gone"
    assert str(run_dir) in alert.message and "ckpt-00000020.pt" in alert.message
    assert f"cockpit --resume {run_dir}" in alert.message
    assert events[-1] == StateChanged(state="failed", step=21, reason="engine gone",
                                      time=events[-1].time)  # fmt: skip
    assert engine.state == RunState.FAILED
    engine.pause()  # a command to a dead run: dropped, and said so
    (late,) = alerts(engine.drain_events())
    assert "pause" in late.message and "not reachable" in late.message


def test_no_socket_is_one_line_saying_there_is_no_live_run(run_dir: Path) -> None:
    run_dir.mkdir()
    with pytest.raises(EngineUnreachable) as caught:
        RemoteEngine(run_dir)
    text = str(caught.value)
    assert "\n" not in text and "no live run" in text and "--resume" not in text  # nothing saved
    assert isinstance(caught.value, ConnectionError)
    (run_dir / "config.toml").write_text('name = "tiny"\n')
    with pytest.raises(EngineUnreachable, match=f"start it again with: cockpit --preset {run_dir}/config.toml"):
        RemoteEngine(run_dir)
    (run_dir / "ckpt-00000020.pt").write_bytes(b"")
    with pytest.raises(EngineUnreachable, match=f"resume it with: cockpit --resume {run_dir}$"):
        RemoteEngine(run_dir)


def test_a_stale_socket_is_no_live_run(run_dir: Path) -> None:
    run_dir.mkdir()
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(run_dir / wire.SOCKET_NAME))
    dead.close()  # the file stays, nobody listens: a killed engine's leftover
    with pytest.raises(EngineUnreachable, match="no live run"):
        RemoteEngine(run_dir / wire.SOCKET_NAME)


def test_another_protocol_version_is_refused(run_dir: Path) -> None:
    FakeRun(run_dir, [], protocol=wire.PROTOCOL + 1)
    with pytest.raises(EngineUnreachable, match="protocol 2") as caught:
        RemoteEngine(run_dir)
    assert "\n" not in str(caught.value)


def test_the_signatures_are_the_protocols(run_dir: Path) -> None:
    for name, member in vars(EngineHandle).items():
        if inspect.isfunction(member) and not name.startswith("_"):
            assert inspect.signature(getattr(RemoteEngine, name), eval_str=True) == (
                inspect.signature(member, eval_str=True)
            ), name


def test_the_client_needs_neither_torch_nor_textual() -> None:
    import subprocess
    import sys

    code = (
        "import sys, engine.control.client;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'textual')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_bad_and_huge_lines_are_skipped_and_the_stream_goes_on(run_dir: Path) -> None:
    server = FakeRun(run_dir, [])
    engine = RemoteEngine(run_dir)
    assert server.connected.wait(5) and server.conn is not None
    server.conn.sendall(b"not json\n" + b"x" * (wire.MAX_LINE_BYTES + 10) + b"\n")
    server.send({"kind": "from_the_future", "x": 1}, step(7).to_record())
    events = drain_until(engine, lambda got: any(isinstance(e, Step) for e in got))
    (alert,) = alerts(events)  # said once, not once a line
    assert alert.level == "warning" and "skipped" in alert.message
    assert events[-1] == step(7) and engine.unreadable_records == 3
    engine.close()


def test_the_bounded_queue_counts_what_nobody_drained(run_dir: Path) -> None:
    FakeRun(run_dir, [step(n) for n in range(1, 6)])
    engine = RemoteEngine(run_dir, capacity=2)
    deadline = time.monotonic() + 5
    while engine.dropped_events < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert engine.dropped_events == 3
    assert engine.drain_events() == [step(4), step(5)]
    engine.close()


def test_a_run_dir_too_long_for_a_socket_address_is_still_reached(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    # the server binds through its directory's descriptor as well: sun_path holds ~107 bytes
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        FakeRun(deep, [step(1)], address=f"/proc/self/fd/{fd}/{wire.SOCKET_NAME}")
    finally:
        os.close(fd)
    assert len(str(deep / wire.SOCKET_NAME)) > 108
    engine = RemoteEngine(deep)
    assert drain_until(engine, lambda got: got) == [step(1)]
    engine.close()


def test_a_resync_replays_only_what_the_viewer_missed(run_dir: Path) -> None:
    server = FakeRun(run_dir, [step(1), step(2)])
    engine = RemoteEngine(run_dir)
    assert drain_until(engine, lambda got: len(got) >= 2) == [step(1), step(2)]
    # the viewer fell behind: its queue was dropped, the run is replayed, then live again
    resync = {**server.hello, "kind": "resync", "state": "paused", "replay": 4}
    replay = [step(1), step(2), step(3), StateChanged(state="paused", step=3, time=T)]
    server.send(resync, *(e.to_record() for e in replay), {"kind": "live"}, step(4).to_record())
    events = drain_until(engine, lambda got: len(got) >= 3)
    assert events == [step(3), StateChanged(state="paused", step=3, time=T), step(4)]
    assert engine.state == RunState.PAUSED
    engine.close()


def test_a_read_only_viewer_says_so_on_connect(run_dir: Path) -> None:
    server = FakeRun(run_dir, [])
    engine = RemoteEngine(run_dir, read_only=True)
    assert engine.read_only
    hello = server.hellos.get(timeout=5)["hello"]
    assert hello["read_only"] is True and "@" in hello["who"]
    engine.close()
