"""A client of a run's control socket: `RemoteEngine`, an `EngineHandle` over `control.sock`.

The app holds it exactly as it holds an in-process Trainer: commands go out as wire lines and
are acknowledged later by the run's events; a reader thread turns every record the server
sends (the replay of the run so far, then the live stream) into events in a bounded queue
that `drain_events()` empties; `run()` blocks until the connection ends.

Torch-free and textual-free (like engine.wire and engine.events): a viewer imports only this.
"""

from __future__ import annotations

import getpass
import itertools
import os
import re
import shlex
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import wire
from engine.events import Alert, Event, EventQueue, RunState, StateChanged
from engine.unix_socket import connect_unix

DETACHED = "detached"  # what run() returns when the viewer left and the run goes on
ENGINE_GONE = "engine_gone"  # the code of the Alert when the connection dropped mid-run
SOCKET_ALERT = "socket"  # the code of the Alerts about commands (refused, not delivered)

_CKPT_RE = re.compile(r"^ckpt-(\d+)\.(pt|dcp)$")  # engine.checkpoint's names, without its torch import
_POLL_S = 0.05  # how often run() looks at should_stop


class EngineUnreachable(ConnectionError):
    """No live run to attach to; the text is one line: the problem; what to do."""


def socket_path_of(target: str | os.PathLike[str]) -> Path:
    """The control socket of `target`: a run directory, or the socket file itself."""
    path = Path(target)
    return path / wire.SOCKET_NAME if path.is_dir() or not path.exists() else path


def last_checkpoint(run_dir: str | os.PathLike[str]) -> Path | None:
    """The newest `ckpt-STEP.pt` in `run_dir` (by step), read from disk; None when none."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return None
    steps = [(int(m.group(1)), name) for name in names if (m := _CKPT_RE.match(name))]
    return Path(run_dir, max(steps)[1]) if steps else None


def viewer_name() -> str:
    """Who this viewer is, as others see it: "user@host (tty)"."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    try:
        tty = os.ttyname(0).removeprefix("/dev/")
    except OSError:
        tty = "no tty"
    return f"{user}@{socket.gethostname()} ({tty})"


def resume_command(run_dir: str | os.PathLike[str]) -> str:
    return f"cockpit --resume {shlex.quote(os.fspath(run_dir))}"


def engine_gone_message(run_dir: str | os.PathLike[str]) -> str:
    """What a viewer says when its run's engine died: where, its last checkpoint, how to resume."""
    checkpoint = last_checkpoint(run_dir)
    saved = f"last checkpoint {checkpoint.name}" if checkpoint else "no checkpoint was saved"
    return (
        f"the engine of {os.fspath(run_dir)} is gone (killed?) without a final state; "
        f"{saved}; resume it with: {resume_command(run_dir)}"
    )


def _connect(path: Path, timeout_s: float) -> socket.socket:
    """A connected AF_UNIX socket to `path`; EngineUnreachable (one line) when there is none."""
    run_dir = path.parent
    if not path.exists():
        where = f"{run_dir}" if run_dir.is_dir() else f"{run_dir} (no such directory)"
        raise EngineUnreachable(
            f"no live run in {where}: no {path.name} (a finished or killed run has none); "
            f"resume it with {resume_command(run_dir)}"
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
            f"resume it with {resume_command(run_dir)}"
        ) from None
    except OSError as e:
        sock.close()
        raise EngineUnreachable(
            f"cannot connect to {path}: {e.strerror or e}; is the run alive?"
        ) from None
    return sock


class _LineReader:
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


class RemoteEngine:
    """One run in another process (or thread), through its control socket.

    Construction connects and reads the server's hello (EngineUnreachable on any failure, with
    a one-line text); a reader thread then queues every event, replay first, so the app draws
    the history before the live stream. `state` follows the hello and every StateChanged.

    Commands never block the caller for more than `send_timeout_s`; one that cannot be
    delivered (the connection is gone) is dropped and an Alert (warning, code "socket") says
    so, as does a command the server refuses (its reply with ok false).

    `run(should_stop)` returns:
    - the final state (stopped, finished, failed) when the run ended and the server closed;
    - `DETACHED` ("detached") when `should_stop()` said the app is closing: the viewer just
      closes its connection, the run goes on (no stop is sent; `state` keeps the last known
      live state);
    - `RunState.FAILED` when the connection dropped without a final state (the engine was
      killed): an Alert (error, code "engine_gone") names the run directory, its last
      checkpoint on disk and the command to resume it, and a StateChanged "failed" follows,
      so the app shows the run as failed and tells how to carry on.
    """

    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        capacity: int = 20_000,
        connect_timeout_s: float = 5.0,
        send_timeout_s: float = 1.0,
        read_only: bool = False,
        who: str | None = None,
    ) -> None:
        self.socket_path = socket_path_of(target)
        self.run_dir = self.socket_path.parent
        self.events = EventQueue(capacity)
        self._ids = itertools.count(1)
        self._commands_by_id: dict[int, str] = {}
        self._send_lock = threading.Lock()
        self._closed = threading.Event()  # the connection is over (for whatever reason)
        self._detaching = False
        self._final_state: str | None = None
        self._last_step = 0
        self._told_of_bad_lines = False
        self._last_time = 0.0  # the newest event time received (a resync replays up to here)
        self._resync_after: float | None = None  # in a resync's replay: skip events up to this
        self.live = False  # the replay is over: what comes now happens now
        self.unreadable_records = 0  # lines skipped: not JSON, too long, or of an unknown kind
        self._sock = _connect(self.socket_path, connect_timeout_s)
        self._reader = _LineReader(self._sock)
        try:
            hello = self._read_hello(connect_timeout_s)
        except BaseException:
            self._sock.close()
            raise
        self._state: str = str(hello.get("state") or RunState.STARTING)
        self.viewer = hello.get("viewer")
        self.read_only = bool(hello.get("read_only", False))
        self.pid = hello.get("pid")
        self.summary: dict[str, Any] = dict(hello.get("summary") or {})
        self.other_viewers: list[dict[str, Any]] = list(hello.get("viewers") or [])
        self._sock.settimeout(send_timeout_s)  # the reader's recv wakes up as often: harmless
        # engine/control_server.py's client hello (not a command): who this viewer is, and
        # whether it only watches
        intro: dict[str, Any] = {"who": viewer_name() if who is None else who}
        if read_only:
            intro["read_only"] = True
        try:
            self._sock.sendall(wire.encode({"hello": intro, "id": None}))
        except OSError as e:
            self._sock.close()
            raise EngineUnreachable(f"the run in {self.run_dir} hung up: {e}") from None
        self.read_only = self.read_only or read_only
        self._thread = threading.Thread(target=self._read_loop, name="remote-engine", daemon=True)
        self._thread.start()

    outlives_viewer = True  # EngineHandle: the run goes on when this viewer leaves

    # EngineHandle: state and events ---------------------------------------------------------
    @property
    def state(self) -> str:
        return self._state

    @property
    def dropped_events(self) -> int:
        return self.events.dropped

    def drain_events(self) -> list[Event]:
        """The events received so far; none while a replay is still coming (it is handed over
        whole, so the app routes and draws the run's history at once, not in pieces)."""
        if not self.live and not self._closed.is_set():
            return []
        return self.events.drain()

    def run(self, should_stop: Callable[[], bool] | None = None) -> str:
        while not self._closed.wait(_POLL_S):
            if should_stop is not None and should_stop():
                self.close()
                return DETACHED
        if self._detaching:
            return DETACHED
        return self._final_state or RunState.FAILED

    def close(self) -> None:
        """Detach: close the connection (the run goes on) and wait for the reader to end."""
        self._detaching = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(timeout=2.0)
        self._sock.close()
        self._closed.set()

    # EngineHandle: commands -----------------------------------------------------------------
    def pause(self) -> None:
        self._send("pause")

    def resume(self) -> None:
        self._send("resume")

    def checkpoint(self) -> None:
        self._send("checkpoint")

    def set_lr(self, lr: float) -> None:
        self._send("set_lr", lr=lr)

    def scale_lr(self, factor: float) -> None:
        self._send("scale_lr", factor=factor)

    def sample(self) -> None:
        self._send("sample")

    def evaluate(self) -> None:
        self._send("evaluate")

    def stop(self, checkpoint: bool = True, reason: str = "stopped by user") -> None:
        self._send("stop", checkpoint=checkpoint, reason=reason)

    def rollback(self, lr_factor: float = 0.5) -> None:
        self._send("rollback", lr_factor=lr_factor)

    # the wire ---------------------------------------------------------------------------------
    def _send(self, name: str, **arguments: Any) -> None:
        """Send one command line; an Alert instead when it cannot be sent (never raises)."""
        command_id = next(self._ids)
        try:
            line = wire.encode(wire.command(name, id=command_id, **arguments))
        except (wire.WireError, ValueError) as e:  # ValueError: a NaN the JSON cannot carry
            self._alert("warning", f"{name} refused: {e}", SOCKET_ALERT)
            return
        self._commands_by_id[command_id] = name
        with self._send_lock:  # the reader closes the socket under it too
            if self._closed.is_set() or self._sock.fileno() < 0:
                why = "the connection is closed"
                self._alert("warning", self._unreachable(name, why), SOCKET_ALERT)
                return
            try:
                self._sock.sendall(line)
            except TimeoutError:
                # part of a line may have gone: the stream is broken, so it ends here
                why = "the run does not read its socket"
                self._alert("warning", self._unreachable(name, why), SOCKET_ALERT)
                self._drop_connection()
            except OSError as e:
                why = e.strerror or str(e)
                self._alert("warning", self._unreachable(name, why), SOCKET_ALERT)

    def _unreachable(self, name: str, why: str) -> str:
        return f"{name} not sent: the run in {self.run_dir} is not reachable ({why})"

    def _drop_connection(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_hello(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        try:
            line = self._reader.read_line(lambda: time.monotonic() > deadline)
            message = wire.decode(line) if line is not None else None
        except wire.WireError as e:
            raise EngineUnreachable(
                f"{self.socket_path} does not speak cockpit's protocol ({e}); is it a run's socket?"
            ) from None
        if message is None:
            raise EngineUnreachable(
                f"the run in {self.run_dir} closed the connection before greeting "
                "(refused, or ending); try again, or check who owns the run"
            )
        if message.get("kind") != "hello":
            error = message.get("error") or f"a {message.get('kind')!r} message"
            raise EngineUnreachable(f"the run in {self.run_dir} refused this viewer: {error}")
        if message.get("protocol") != wire.PROTOCOL:
            raise EngineUnreachable(
                f"the run in {self.run_dir} speaks control protocol {message.get('protocol')!r}, "
                f"this cockpit speaks {wire.PROTOCOL}; attach with the cockpit that started it"
            )
        return message

    def _read_loop(self) -> None:
        try:
            while True:
                try:
                    line = self._reader.read_line(lambda: self._detaching)
                    if line is None:
                        break
                    self._handle(wire.decode(line))
                except wire.WireError as e:
                    # skipped, the stream goes on; said once, not once a line
                    self.unreadable_records += 1
                    if not self._told_of_bad_lines:
                        self._told_of_bad_lines = True
                        message = f"the run in {self.run_dir} sent a line this viewer skipped: {e}"
                        self._alert("warning", message, SOCKET_ALERT)
        finally:
            if not self._detaching and self._final_state is None:
                self._engine_gone()
            with self._send_lock:  # not under a sendall of another thread
                self._sock.close()
            self._closed.set()

    def _handle(self, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        if kind == "live":
            self.live = True
        elif kind == "reply":
            self._handle_reply(record)
        elif kind == "resync":
            # this viewer fell behind: the server dropped its queue and replays the run again;
            # of that replay only what is newer than the events already queued passes
            self.live = False
            self._resync_after = self._last_time
            if isinstance(record.get("state"), str):
                self._state = record["state"]
        elif kind == "hello":
            pass  # a second hello carries nothing a viewer needs
        else:
            try:
                event = Event.from_record(record)
            except ValueError:
                self.unreadable_records += 1
                return
            if self._resync_after is not None and event.time <= self._resync_after:
                return  # drawn already, before the resync
            self._last_time = max(self._last_time, event.time)
            self._track(event)
            self.events.put(event)

    def _handle_reply(self, record: dict[str, Any]) -> None:
        command_id = record.get("id")
        name = self._commands_by_id.pop(command_id, None) if isinstance(command_id, int) else None
        if record.get("ok") is False:
            what = name or "a command"
            self._alert(
                "warning", f"{what} refused by the run: {record.get('error')}", SOCKET_ALERT
            )

    def _track(self, event: Event) -> None:
        step = getattr(event, "step", None)
        if isinstance(step, int):
            self._last_step = max(self._last_step, step)
        if isinstance(event, StateChanged):
            self._state = event.state
            self._final_state = event.state if event.state in RunState.ENDED else None

    def _alert(self, level: str, message: str, code: str) -> None:
        self.events.put(Alert(level=level, message=message, step=self._last_step, code=code))

    def _engine_gone(self) -> None:
        self._alert("error", engine_gone_message(self.run_dir), ENGINE_GONE)
        self._state = RunState.FAILED
        self.events.put(
            StateChanged(state=RunState.FAILED, step=self._last_step, reason="engine gone")
        )
