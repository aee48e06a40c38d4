"""Unix socket addresses that work at any path length, and the peer's uid."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

AF_UNIX_MAX = 107  # bytes of a socket path (sun_path is 108 with its NUL)


def bind_unix(sock: socket.socket, path: Path) -> None:
    """Bind `sock` to `path`, through /proc/self/fd when the path is too long for AF_UNIX."""
    if len(os.fsencode(path)) <= AF_UNIX_MAX:
        sock.bind(os.fsencode(path))
        return
    with directory_address(path) as address:
        sock.bind(address)


def connect_unix(sock: socket.socket, path: Path) -> None:
    """Connect `sock` to `path` (a client's side of bind_unix: long paths work too)."""
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
