"""A run's control socket against what others may do to it: a socket of another user swapped in
where a run's should be, numbers and nesting that Python's JSON cannot take, viewers still
sending as the run ends. Real sockets, real processes, a second uid where the tests run as root."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.control import wire
from engine.control.unix_socket import connect_unix

TIMEOUT = 20.0
REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534


class Client:
    """A raw viewer: reads the server's lines, sends bytes or messages."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        connect_unix(self.sock, path)
        self.stream = self.sock.makefile("rb")

    def read(self) -> dict[str, Any] | None:
        line = self.stream.readline()
        return json.loads(line) if line else None

    def until(self, check: Any) -> list[dict[str, Any]]:
        seen = []
        while True:
            message = self.read()
            assert message is not None, f"the server closed the connection after {seen[-3:]}"
            seen.append(message)
            if check(message):
                return seen

    def send(self, data: bytes | dict[str, Any]) -> None:
        self.sock.sendall(data if isinstance(data, bytes) else wire.encode(data))

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


def is_reply(ident: Any = None) -> Any:
    return lambda m: m.get("kind") == "reply" and m.get("id") == ident


# ---------------------------------------------------------------- a socket of another user

FAKE_SERVER = r"""
import json, os, socket, sys
run_dir = sys.argv[1]
fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)  # as root: the 0700 tmp dirs above are no bar
os.setuid(int(sys.argv[2]))
here = f"/proc/self/fd/{fd}"
if os.path.lexists(f"{here}/control.sock"):
    os.rename(f"{here}/control.sock", f"{here}/control.sock.aside")  # the real run's, moved aside
listener = socket.socket(socket.AF_UNIX)
os.umask(0)
listener.bind(f"{here}/control.sock")
listener.listen(8)
hello = {"kind": "hello", "protocol": 1, "run_dir": run_dir, "pid": os.getpid(),
         "state": "running", "viewer": 1, "read_only": False, "replay": 0,
         "summary": {"preset": "fake-run", "step": 7}, "viewers": []}
print("listening", flush=True)
while True:
    conn, _ = listener.accept()
    conn.settimeout(3)
    try:  # a client that refused it may have hung up before the accept (a loaded machine): EPIPE
        conn.sendall(json.dumps(hello).encode() + b"\n" + b'{"kind": "live"}\n')
        while data := conn.recv(65536):
            print("got", data[:300], flush=True)  # what a viewer told the impostor
    except OSError:
        pass
    conn.close()
"""


@pytest.fixture
def impostor(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """runs/victim, a directory anyone may write to, whose control.sock is served by `nobody`."""
    if os.getuid() != 0:
        pytest.skip("needs root to serve a socket as another uid (os.setuid)")
    run_dir = tmp_path / "runs" / "victim"
    run_dir.mkdir(parents=True)
    os.chmod(run_dir, 0o777)
    fake = subprocess.Popen(
        [sys.executable, "-c", FAKE_SERVER, str(run_dir), str(NOBODY)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert fake.stdout is not None
        first = fake.stdout.readline()
        if first.strip() != "listening":
            fake.kill()
            error = fake.communicate(timeout=10)[1]
            if "Permission denied" in error:
                pytest.skip(f"uid {NOBODY} cannot bind in the run directory here")
            raise AssertionError(f"the impostor did not start: {error}")
        assert (run_dir / wire.SOCKET_NAME).stat().st_uid == NOBODY
        yield run_dir, fake
    finally:
        fake.kill()
        fake.wait(10)


def cockpit(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cockpit", *argv], capture_output=True, text=True,
        timeout=60, cwd=REPO, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def what_the_impostor_got(fake: subprocess.Popen[str]) -> str:
    fake.kill()
    out, _ = fake.communicate(timeout=10)
    return out


def test_ps_refuses_a_socket_served_by_another_uid_in_one_line(impostor) -> None:
    run_dir, fake = impostor
    result = cockpit("ps", str(run_dir.parent))
    assert result.returncode == 0, result.stderr
    assert "fake-run" not in result.stdout  # the impostor's run is not listed
    assert result.stdout.startswith("no live runs under")
    (line,) = result.stderr.splitlines()
    assert f"uid {NOBODY}" in line and str(run_dir) in line and "Traceback" not in line
    assert "got" not in what_the_impostor_got(fake)


def test_attach_refuses_a_socket_served_by_another_uid_and_tells_it_nothing(impostor) -> None:
    run_dir, fake = impostor
    result = cockpit("attach", str(run_dir))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("cockpit attach: ") and f"uid {NOBODY}" in line
    # not even the client's hello (who it is) reached the impostor, let alone a command
    assert "got" not in what_the_impostor_got(fake)


def test_a_remote_engine_refuses_the_impostor_and_names_its_uid(impostor) -> None:
    from engine.control.client import EngineUnreachable, RemoteEngine
    from engine.control.live_runs import find_live_runs, probe

    run_dir, fake = impostor
    with pytest.raises(EngineUnreachable) as refused:
        RemoteEngine(run_dir)
    assert f"served by uid {NOBODY}" in str(refused.value) and "\n" not in str(refused.value)
    assert probe(run_dir) is None  # `cockpit serve`, `runs` and `start` take it for no run
    problems: list[str] = []
    assert find_live_runs(run_dir.parent, refused=problems) == []
    assert len(problems) == 1 and f"uid {NOBODY}" in problems[0]
    assert "got" not in what_the_impostor_got(fake)


# ---------------------------------------------------------------- numbers and nesting

HOSTILE = {
    "a 310-digit integer": b'{"cmd": "set_lr", "id": 1, "lr": ' + b"9" * 310 + b"}",
    "a 5,000-digit integer": b'{"cmd": "set_lr", "id": 2, "lr": ' + b"9" * 5000 + b"}",
    "100k nested brackets": b'{"cmd": "pause", "id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    # parsed (just) in the server's reader thread, but its echo in the reply was too deep for
    # the writer's thread to encode: it died and the connection closed
    "an id nested 989 deep": b'{"cmd": "pause", "id": ' + b"[" * 989 + b"]" * 989 + b"}",
}
# the reply's id: a line that is not taken cannot be answered by its own id
HOSTILE_IDS = {"a 310-digit integer": 1, "a 5,000-digit integer": None,
               "100k nested brackets": None, "an id nested 989 deep": None}  # fmt: skip


def test_huge_numbers_and_deep_nesting_are_refused_in_one_line_and_the_run_goes_on(live) -> None:
    """Against a real run in its own process (tests/live_process.py): each line is refused
    with one line, the same connection still takes a command, and the engine logs no traceback."""
    client = Client(live.run_dir / wire.SOCKET_NAME)
    client.until(lambda m: m == {"kind": "live"})
    for name, line in HOSTILE.items():
        client.send(line + b"\n")
        reply = client.until(is_reply(HOSTILE_IDS[name]))[-1]
        assert reply["ok"] is False, name
        assert "\n" not in reply["error"] and len(reply["error"]) < 300, reply["error"]
    client.send({"cmd": "resume", "id": 9})  # the viewer's reader is alive: it still answers
    assert client.until(is_reply(9))[-1]["ok"] is True
    assert live.steps_grow(5)
    log = live.output()
    assert "Traceback" not in log and "Exception in thread" not in log, log
    client.close()


def test_the_refusals_say_what_was_wrong() -> None:
    with pytest.raises(wire.WireError, match="finite number"):
        wire.parse_command(wire.decode(HOSTILE["a 310-digit integer"]))
    with pytest.raises(wire.WireError, match="4,300 digits"):
        wire.decode(HOSTILE["a 5,000-digit integer"])
    with pytest.raises(wire.WireError, match="nested too deep"):
        wire.decode(HOSTILE["100k nested brackets"])
    with pytest.raises(wire.WireError, match=f"nested over {wire.MAX_DEPTH} deep"):
        wire.decode(b'{"cmd": "pause", "id": ' + b"[" * 100 + b"]" * 100 + b"}")
    # a rollback may name the checkpoint it was asked about: a file name, nothing else
    assert wire.parse_command(wire.command("rollback", lr_factor=0.5, checkpoint="ckpt-00000010.pt")) == (
        "rollback", {"lr_factor": 0.5, "checkpoint": "ckpt-00000010.pt"},
    )  # fmt: skip
    with pytest.raises(wire.WireError, match="checkpoint"):
        wire.parse_command({"cmd": "rollback", "lr_factor": 0.5, "checkpoint": 10})
    inner = wire.MAX_DEPTH - 1  # the message itself is the first level
    deep_enough = {"cmd": "pause", "id": json.loads("[" * inner + "]" * inner)}
    assert wire.decode(json.dumps(deep_enough).encode()) == deep_enough


class OneViewerServer:
    """A run's socket as this test writes it (same uid): the hello, then the lines it is given."""

    def __init__(self, run_dir: Path, hello: dict[str, Any]) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(run_dir / wire.SOCKET_NAME))
        self.listener.listen(4)
        self.hello = hello
        self.lines: list[bytes] = []
        self.conn: socket.socket | None = None
        self.connected = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            conn.sendall(json.dumps(self.hello).encode() + b"\n" + b'{"kind": "live"}\n')
            self.conn = conn
            self.connected.set()

    def send(self, *lines: bytes) -> None:
        assert self.connected.wait(5) and self.conn is not None
        for line in lines:
            self.conn.sendall(line + b"\n")

    def close(self) -> None:
        self.listener.close()
        if self.conn is not None:
            self.conn.close()


HELLO = {"kind": "hello", "protocol": wire.PROTOCOL, "run_dir": "x", "pid": 1, "state": "running",
         "viewer": 1, "read_only": False, "replay": 0}  # fmt: skip
STEP = {"kind": "step", "step": 5, "loss": 2.5, "lr": 1e-3, "grad_norm": 0.5, "tokens_per_s": 1e4,
        "step_time_s": 0.01, "tokens": 100, "update_ratio": 1e-3, "time": 1000.0}  # fmt: skip


def test_a_viewer_skips_such_lines_from_a_server_and_keeps_reading(tmp_path: Path) -> None:
    from engine.control.client import ENGINE_GONE, RemoteEngine

    server = OneViewerServer(tmp_path / "run", HELLO)
    remote = RemoteEngine(tmp_path / "run")
    big = b"9" * 310
    server.send(
        b'{"kind": "step", "n": ' + b"9" * 5000 + b"}",
        b"[" * 100_000 + b"]" * 100_000,
        json.dumps({**STEP, "step": 4}).encode().replace(b'"loss": 2.5', b'"loss": ' + big),
        json.dumps(STEP).encode(),
    )
    deadline, events = time.monotonic() + 5, []
    while not any(e.kind == "step" for e in events):
        assert time.monotonic() < deadline, events
        events += remote.drain_events()
        time.sleep(0.01)
    assert [e.step for e in events if e.kind == "step"] == [5]
    assert not [e for e in events if getattr(e, "code", "") == ENGINE_GONE]
    assert remote.unreadable_records == 3
    remote.close()
    server.close()


def test_ps_reads_a_hello_with_a_huge_number_as_unknown(tmp_path: Path) -> None:
    from engine.control.live_runs import probe

    hello = {**HELLO, "summary": {"preset": "tiny", "step": 3, "loss": 10**309}}
    server = OneViewerServer(tmp_path / "run", hello)
    live = probe(tmp_path / "run")
    assert live is not None and live.loss is None and live.step == 3
    server.close()


# ---------------------------------------------------------------- the final state last


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_final_state_is_the_last_record_while_viewers_attach_and_command(
    tmp_path: Path,
) -> None:
    """Viewers attached (their detach would be recorded when the server closes) and one sending
    commands as fast as it can while the run stops: nothing of theirs is recorded after the end."""
    from engine.config.presets import load_preset
    from engine.train.trainer import Trainer

    run_dir = tmp_path / "run"
    trainer = Trainer(load_preset("tiny", ["train.max_steps=100000"]), run_dir=run_dir,
                      telemetry=False, interactive=False)  # fmt: skip
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT
    while not (run_dir / wire.SOCKET_NAME).exists() or trainer.step < 2:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.01)
    watchers = [Client(run_dir / wire.SOCKET_NAME) for _ in range(2)]
    for n, watcher in enumerate(watchers):
        watcher.until(lambda m: m == {"kind": "live"})
        watcher.send({"hello": {"who": f"watcher {n}"}, "id": "hi"})
        watcher.until(is_reply("hi"))
    sender = Client(run_dir / wire.SOCKET_NAME)
    sender.until(lambda m: m == {"kind": "live"})
    sender.send({"hello": {"who": "sender"}, "id": "hi"})
    replies: list[dict[str, Any]] = []

    def send_commands() -> None:
        try:
            for n in range(1_000_000):
                sender.send({"cmd": "resume", "id": n})  # does nothing to a running run
                time.sleep(0.001)
        except OSError:
            pass  # the run ended and hung up

    def read_replies() -> None:
        try:
            while (message := sender.read()) is not None:
                if message.get("kind") == "reply":
                    replies.append(message)
        except (OSError, ValueError):
            pass

    threads = [threading.Thread(target=f, daemon=True) for f in (send_commands, read_replies)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + TIMEOUT
    while sum(1 for r in replies if r["ok"]) < 20:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    trainer.stop(checkpoint=False)
    thread.join(TIMEOUT)
    assert not thread.is_alive()
    for t in threads:
        t.join(TIMEOUT)
    records = read_records(run_dir / "metrics.jsonl")
    assert records[-1]["kind"] == "state" and records[-1]["state"] == "stopped", records[-3:]
    assert [r["kind"] for r in records].count("command") >= 20
    for watcher in watchers:
        watcher.close()
    sender.close()


def test_a_command_after_the_end_is_refused_not_recorded(tmp_path: Path) -> None:
    """The server alone (a stand-in handle): once the run's final state is being recorded, a
    command is refused in one line and neither it nor a viewer's attach is journaled."""
    from types import SimpleNamespace

    from engine.control.server import serve_run

    recorded: list[Any] = []
    handle = SimpleNamespace(state="running", resume=lambda: recorded.append("resumed"))
    server = serve_run(tmp_path, handle, lambda _message: None, emit=recorded.append)
    client = Client(tmp_path / wire.SOCKET_NAME)
    client.until(lambda m: m == {"kind": "live"})
    client.send({"cmd": "resume", "id": 1})
    assert client.until(is_reply(1))[-1]["ok"] is True
    assert [getattr(r, "kind", r) for r in recorded] == ["command", "resumed"]
    server.end_journal("stopped")
    client.send({"hello": {"who": "late"}, "id": 2})
    client.until(is_reply(2))
    client.send({"cmd": "resume", "id": 3})
    refused = client.until(is_reply(3))[-1]
    assert refused["ok"] is False and "the run has stopped" in refused["error"]
    assert "\n" not in refused["error"]
    assert [getattr(r, "kind", r) for r in recorded] == ["command", "resumed"]
    server.close()
    assert [getattr(r, "kind", r) for r in recorded] == ["command", "resumed"]
    client.close()
