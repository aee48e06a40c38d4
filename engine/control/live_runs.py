"""The live runs under a directory: those whose control socket answers (`cockpit ps`, attach).

A run is live when its `control.sock`, served by our uid, greets a connection with the hello;
the probe reads that line only and hangs up (a full run's refusal carries the same fields, so
`cockpit ps` answers during a flood of clients too). Torch-free and textual-free.
"""

from __future__ import annotations

import math
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.control import wire
from engine.control.unix_socket import UntrustedServer, check_server, connect_unix

PROBE_TIMEOUT_S = 2.0  # a run busy in a long step still greets at once (its own thread does)
MAX_DEPTH = 4  # how deep under the root run directories are looked for (runs/sweep/x/...)
MAX_PROBES = 16  # sockets probed at once


@dataclass(frozen=True)
class LiveRun:
    """One live run as its hello describes it."""

    run_dir: Path
    pid: int | None
    state: str
    preset: str | None
    started: float | None  # the run_started record's time (this session of the run)
    step: int
    max_steps: int | None
    loss: float | None
    tokens_per_s: float | None
    step_time_s: float | None
    viewers: list[dict[str, Any]] = field(default_factory=list)  # attached besides the probe

    @classmethod
    def from_hello(cls, run_dir: Path, hello: dict[str, Any]) -> LiveRun:
        # a field of the wrong type (an older or odd server) is unknown, not a crash of `ps`
        summary = hello.get("summary")
        summary = summary if isinstance(summary, dict) else {}
        viewers = hello.get("viewers")
        viewers = [v for v in viewers if isinstance(v, dict)] if isinstance(viewers, list) else []
        preset = summary.get("preset")
        return cls(
            run_dir=run_dir,
            pid=_int_or_none(hello.get("pid")),
            state=str(hello.get("state") or "?"),
            preset=preset if isinstance(preset, str) else None,
            started=_number_or_none(summary.get("started")),
            step=_int_or_none(summary.get("step")) or 0,
            max_steps=_int_or_none(summary.get("max_steps")),
            loss=_number_or_none(summary.get("loss")),
            tokens_per_s=_number_or_none(summary.get("tokens_per_s")),
            step_time_s=_number_or_none(summary.get("step_time_s")),
            viewers=viewers,
        )


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number_or_none(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        return None
    return number if math.isfinite(number) else None


def probe(run_dir: Path, timeout_s: float = PROBE_TIMEOUT_S) -> LiveRun | None:
    """The live run in `run_dir`, or None when nothing answers there as a run does (a socket
    of another uid included)."""
    try:
        return _probe(run_dir, timeout_s)
    except UntrustedServer:
        return None


def _probe(run_dir: Path, timeout_s: float) -> LiveRun | None:
    """probe's answer; UntrustedServer (one line) for a socket served by another uid."""
    path = run_dir / wire.SOCKET_NAME
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        connect_unix(sock, path)
        check_server(sock, path)
        line = _first_line(sock, time.monotonic() + timeout_s)
    except OSError:  # refused (stale), gone, not ours, too slow
        return None
    finally:
        sock.close()
    try:
        hello = wire.decode(line) if line is not None else None
    except wire.WireError:
        return None
    if hello is not None and hello.get("kind") == "reply" and isinstance(hello.get("run"), dict):
        hello = hello["run"]  # refused, as one viewer too many: what the run is comes with it
        if hello.get("protocol") != wire.PROTOCOL:
            return None
    elif not hello or hello.get("kind") != "hello":
        return None
    return LiveRun.from_hello(run_dir, hello)


def _first_line(sock: socket.socket, deadline: float) -> bytes | None:
    buffer = bytearray()
    while b"\n" not in buffer:
        left = deadline - time.monotonic()
        if left <= 0 or len(buffer) > wire.MAX_LINE_BYTES:
            return None
        sock.settimeout(left)  # the whole line within the timeout, not each piece of it
        chunk = sock.recv(1 << 16)
        if not chunk:
            return None
        buffer += chunk
    return bytes(buffer[: buffer.index(b"\n")])


def socket_dirs(root: Path, max_depth: int = MAX_DEPTH) -> list[Path]:
    """Directories at most `max_depth` below `root` (itself included) holding a control socket."""
    found: list[Path] = []
    root_depth = len(root.parts)
    for current, dirs, files in os.walk(root):
        here = Path(current)
        if wire.SOCKET_NAME in files:
            found.append(here)
        if len(here.parts) - root_depth >= max_depth:
            dirs.clear()
        else:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
    return found


def find_live_runs(
    root: str | os.PathLike[str] = "runs",
    timeout_s: float = PROBE_TIMEOUT_S,
    refused: list[str] | None = None,
) -> list[LiveRun]:
    """Every live run under `root`, newest first (by when its session started; a run still
    starting, with no start time yet, is the newest). A socket served by another uid is left
    out; with `refused` given, one line saying so is appended to it for each."""
    dirs = socket_dirs(Path(root))
    if not dirs:
        return []

    def look(run_dir: Path) -> LiveRun | str | None:
        try:
            return _probe(run_dir, timeout_s)
        except UntrustedServer as e:
            return str(e)

    # probed side by side: a stopped (ctrl+z) run that never greets costs one timeout, not one each
    with ThreadPoolExecutor(max_workers=min(len(dirs), MAX_PROBES)) as pool:
        found = list(pool.map(look, dirs))
    if refused is not None:
        refused.extend(item for item in found if isinstance(item, str))
    runs = [item for item in found if isinstance(item, LiveRun)]
    return sorted(runs, key=_newest_first)


def _newest_first(run: LiveRun) -> tuple[bool, float, str]:
    return (run.started is not None, -(run.started or 0.0), str(run.run_dir))
