"""A run's control socket under a flood: hundreds of clients at once, a client that sends and
never reads. Against a real headless run in its own process (tests/live_process.py): the run
keeps stepping, its threads and memory stay bounded, the extra viewers are told why in one
line, and `cockpit ps` still lists the run."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine.control import wire
from engine.control.live_runs import find_live_runs
from engine.control.server import MAX_VIEWERS
from engine.control.unix_socket import connect_unix

REPO = Path(__file__).resolve().parents[2]
FLOOD = 200  # clients at once, each connecting and then never reading
MIB = 1 << 20


def threads_and_rss(pid: int) -> tuple[int, int]:
    """The process's thread count and resident memory in bytes (/proc/PID/status)."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) * 1024


def connect(run_dir: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills at once: a stuck viewer
    sock.settimeout(10.0)
    connect_unix(sock, run_dir / wire.SOCKET_NAME)
    return sock


def first_line(sock: socket.socket) -> dict:
    """The server's first line (read byte by byte: nothing after it is taken off the socket)."""
    line = bytearray()
    while not line.endswith(b"\n"):
        byte = sock.recv(1)
        assert byte, f"closed after {bytes(line)!r}"
        line += byte
    return json.loads(line)


def settle(pid: int, most: int, timeout_s: float = 10.0) -> int:
    """The process's thread count once it is at most `most` (or the last seen)."""
    deadline = time.monotonic() + timeout_s
    while (threads := threads_and_rss(pid)[0]) > most and time.monotonic() < deadline:
        time.sleep(0.05)
    return threads


def test_a_flood_of_viewers_is_capped_and_ps_still_lists_the_run(live) -> None:
    threads_before, rss_before = threads_and_rss(live.pid)
    flood = [connect(live.run_dir) for _ in range(FLOOD)]
    greetings = [first_line(sock) for sock in flood]
    admitted = [g for g in greetings if g["kind"] == "hello"]
    refused = [g for g in greetings if g["kind"] != "hello"]
    # the cap, less a probe of the fixture's that may not have hung up yet
    assert MAX_VIEWERS - 2 <= len(admitted) <= MAX_VIEWERS
    assert len(refused) == FLOOD - len(admitted)
    for refusal in refused:  # one line, then the end of the connection
        assert refusal["kind"] == "reply" and refusal["ok"] is False
        assert refusal["error"].startswith(f"too many viewers ({MAX_VIEWERS} attached")
    for sock, greeting in zip(flood, greetings, strict=True):
        if greeting["kind"] != "hello":
            assert sock.recv(1) == b""

    # during the flood: `cockpit ps` lists the run, which keeps stepping
    runs = find_live_runs(live.run_dir.parent)
    assert [r.run_dir for r in runs] == [live.run_dir]
    assert len(runs[0].viewers) == MAX_VIEWERS and runs[0].step > 0
    listed = subprocess.run(
        [sys.executable, "-m", "cockpit", "ps", str(live.run_dir.parent), "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert [r["run_dir"] for r in json.loads(listed.stdout)] == [str(live.run_dir)]
    assert live.steps_grow(5)
    # an attach is refused in one line that says why
    from engine.control.client import RemoteEngine
    from engine.control.connection import EngineUnreachable

    try:
        RemoteEngine(live.run_dir, connect_timeout_s=5.0).close()
        raise AssertionError("attached past the cap")
    except EngineUnreachable as e:
        assert "too many viewers" in str(e) and "\n" not in str(e)

    # a reader and a writer a viewer, no more; the memory of stuck viewers stays small
    threads, rss = threads_and_rss(live.pid)
    assert threads <= threads_before + 2 * MAX_VIEWERS + 2, (threads_before, threads)
    assert rss - rss_before < 100 * MIB, (rss_before, rss)

    # once they hang up, their threads are gone and a viewer is admitted again
    for sock in flood:
        sock.close()
    assert settle(live.pid, threads_before) <= threads_before
    viewer = connect(live.run_dir)
    assert first_line(viewer)["kind"] == "hello"
    viewer.close()


def test_a_client_that_sends_and_never_reads_holds_little_memory(live) -> None:
    """Each line is answered with a reply that echoes its id: a client that sends 100 MiB of
    lines and reads none of the replies is no longer read from once its replies back up."""
    _, rss_before = threads_and_rss(live.pid)
    sock = connect(live.run_dir)
    sock.settimeout(2.0)
    line = wire.encode({"cmd": "no such command", "id": "x" * 100_000})
    sent = 0

    def send_all() -> None:
        nonlocal sent
        try:
            for _ in range(1000):
                sock.sendall(line)
                sent += 1
        except OSError:
            pass  # the run stopped reading: sendall timed out

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    sender.join(30)
    assert sent < 1000  # backpressure: the run does not take 100 MiB it cannot answer
    _, rss = threads_and_rss(live.pid)
    assert rss - rss_before < 40 * MIB, (rss_before, rss, sent)
    assert live.steps_grow(5)
    sock.close()
