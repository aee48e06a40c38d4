"""The client's side of a control socket: finding it, connecting, reading lines and the hello.

Every way of not reaching a live run ends in `EngineUnreachable`, whose text is one line: the
problem, then what to do.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.control import wire
from engine.control.carry_on import carry_on
from engine.control.unix_socket import UntrustedServer, check_server, connect_unix


class EngineUnreachable(ConnectionError):
    """No live run to attach to; the text is one line: the problem; what to do."""


def socket_path_of(target: str | os.PathLike[str]) -> Path:
    """The control socket of `target`: a run directory, or the socket file itself."""
    path = Path(target)
    return path / wire.SOCKET_NAME if path.is_dir() or not path.exists() else path


def connect_run(path: Path, timeout_s: float) -> socket.socket:
    """A connected AF_UNIX socket to `path`; EngineUnreachable (one line) when there is none."""
    run_dir = path.parent
    if not path.exists():
        where = f"{run_dir}" if run_dir.is_dir() else f"{run_dir} (no such directory)"
        raise EngineUnreachable(
            f"no live run in {where}: no {path.name} (a finished or killed run has none); "
            f"{carry_on(run_dir)}"
        )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        connect_unix(sock, path)  # a path too long for sun_path goes by its directory's fd
    except PermissionError:
        sock.close()
        raise EngineUnreachable(
            f"permission refused on {path} (a run of another user?); attach as the user who "
            "started it"
        ) from None
    except (ConnectionRefusedError, FileNotFoundError):
        sock.close()
        raise EngineUnreachable(
            f"no live run in {run_dir}: {path.name} is left from an engine that is gone; "
            f"{carry_on(run_dir)}"
        ) from None
    except OSError as e:
        sock.close()
        raise EngineUnreachable(
            f"cannot connect to {path}: {e.strerror or e}; is the run alive?"
        ) from None
    try:
        check_server(sock, path)  # before a byte is sent: who we are, let alone a command
    except UntrustedServer as e:
        sock.close()
        raise EngineUnreachable(str(e)) from None
    return sock


class LineReader:
    """Lines from a socket, each at most wire.MAX_LINE_BYTES: a longer one is dropped as it
    comes (memory stays bounded) and reported as a WireError once its end arrives."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._scanned = 0  # bytes at the buffer's start known to hold no newline
        self._overlong = False  # inside a line over the limit: its bytes are being dropped

    def read_line(self, should_give_up: Callable[[], bool]) -> bytes | None:
        """The next line without its newline; None at the end of the stream or when
        `should_give_up()` says so between receive timeouts."""
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                self._scanned = 0
                if self._overlong:
                    self._overlong = False
                    raise wire.WireError(f"a line over the {wire.MAX_LINE_BYTES:,}-byte limit")
                return line
            self._scanned = len(self._buffer)
            if len(self._buffer) > wire.MAX_LINE_BYTES:
                self._overlong = True
                self._buffer.clear()
                self._scanned = 0
            try:
                chunk = self._sock.recv(1 << 16)
            except TimeoutError:
                if should_give_up():
                    return None
                continue
            except OSError:
                return None  # closed under us (detach) or reset (the engine died)
            if not chunk:
                return None
            self._buffer += chunk


def read_hello(reader: LineReader, socket_path: Path, timeout_s: float) -> dict[str, Any]:
    """The server's greeting, the first line; EngineUnreachable (one line) when it does not
    come within `timeout_s`, is not the protocol's, refuses this viewer or is of another
    protocol version."""
    run_dir = socket_path.parent
    deadline = time.monotonic() + timeout_s
    try:
        line = reader.read_line(lambda: time.monotonic() > deadline)
        message = wire.decode(line) if line is not None else None
    except wire.WireError as e:
        raise EngineUnreachable(
            f"{socket_path} does not speak cockpit's protocol ({e}); is it a run's socket?"
        ) from None
    if message is None:
        raise EngineUnreachable(
            f"the run in {run_dir} closed the connection before greeting "
            "(refused, or ending); try again, or check who owns the run"
        )
    if message.get("kind") != "hello":
        error = message.get("error") or f"a {message.get('kind')!r} message"
        raise EngineUnreachable(f"the run in {run_dir} refused this viewer: {error}")
    if message.get("protocol") != wire.PROTOCOL:
        raise EngineUnreachable(
            f"the run in {run_dir} speaks control protocol {message.get('protocol')!r}, "
            f"this cockpit speaks {wire.PROTOCOL}; attach with the cockpit that started it"
        )
    return message
