"""A raw client of a live run's control socket, as the tests speak it: JSON lines in and out,
nothing of engine.control's client (tests/engine's socket tests against a real run)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from engine.control import wire
from engine.control.unix_socket import connect_unix

TIMEOUT_S = 60.0


class RawViewer:
    """Connects, reads the hello and the replay up to `{"kind": "live"}`, and says who it is
    when given `who` (the client hello); then reads lines and sends commands."""

    def __init__(self, run_dir: Path, who: str | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT_S)
        connect_unix(self.sock, run_dir / wire.SOCKET_NAME)
        self.stream = self.sock.makefile("rb")
        self.hello = self.until(kind("hello"))
        self.number = self.hello["viewer"]
        self.until(lambda m: m == {"kind": "live"})
        if who is not None:
            self.sock.sendall(wire.encode({"hello": {"who": who}, "id": "hello"}))
            self.until(is_reply("hello"))

    def until(self, check: Any) -> dict[str, Any]:
        """The first message from now that `check` accepts."""
        while True:
            line = self.stream.readline()
            assert line, "the run closed the connection"
            message = json.loads(line)
            if check(message):
                return message

    def command(self, name: str, id: Any, **arguments: Any) -> dict[str, Any]:
        """Send a command; its reply."""
        self.sock.sendall(wire.encode({"cmd": name, "id": id, **arguments}))
        return self.until(is_reply(id))

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


def is_reply(ident: Any) -> Any:
    return lambda m: m.get("kind") == "reply" and m.get("id") == ident


def kind(name: str, **fields: Any) -> Any:
    return lambda m: m.get("kind") == name and all(m.get(k) == v for k, v in fields.items())
