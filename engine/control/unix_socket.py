"""Unix socket addresses that work at any path length, the peer's uid, and the check a client
makes of the server it reached."""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

AF_UNIX_MAX = 107  # bytes of a socket path (sun_path is 108 with its NUL)
BUSY_RETRY_S = 0.01  # how often a connection to a listener with a full backlog is tried again


def bind_unix(sock: socket.socket, path: Path) -> None:
    """Bind `sock` to `path`, through /proc/self/fd when the path is too long for AF_UNIX."""
    if len(os.fsencode(path)) <= AF_UNIX_MAX:
        sock.bind(os.fsencode(path))
        return
    with directory_address(path) as address:
        sock.bind(address)


def connect_unix(sock: socket.socket, path: Path) -> None:
    """Connect `sock` to `path` (a client's side of bind_unix: long paths work too). A listener
    whose backlog is full (a flood of clients) refuses a socket with a timeout at once (EAGAIN):
    it is tried again until that timeout has passed, as a blocking socket would wait."""
    timeout = sock.gettimeout()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            _connect_once(sock, path)
            return
        except BlockingIOError:
            if deadline is None or time.monotonic() >= deadline:
                raise
            time.sleep(BUSY_RETRY_S)


def _connect_once(sock: socket.socket, path: Path) -> None:
    if len(os.fsencode(path)) <= AF_UNIX_MAX:
        sock.connect(os.fsencode(path))
        return
    with directory_address(path) as address:
        sock.connect(address)


class directory_address:  # noqa: N801 - a context manager used as a function
    """A short address for a long socket path: /proc/self/fd/N/NAME with N its directory open."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.address = os.fsencode(f"/proc/self/fd/{self._fd}/{path.name}")

    def __enter__(self) -> bytes:
        return self.address

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end (SO_PEERCRED: pid, uid, gid)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


class UntrustedServer(Exception):
    """The socket a client reached is served by another user; the text is one line."""


def check_server(sock: socket.socket, path: Path) -> None:
    """Raise UntrustedServer unless the process serving `path` (connected `sock`) runs as this
    process's uid. A run serves only its own user (control_server refuses any other peer), so a
    socket of another uid is never the run's: in a directory others can write to, someone may
    have moved the run's socket aside and bound theirs. Nothing is sent to it."""
    uid = peer_uid(sock)
    if uid != os.getuid():
        raise UntrustedServer(
            f"refused {path}: it is served by uid {uid}, not by you (uid {os.getuid()}), so it "
            f"is not your run's; check who can write to {path.parent}"
        )
