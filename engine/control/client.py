"""A client of a run's control socket: `RemoteEngine`, an `EngineHandle` over `control.sock`.

The app holds it as it holds an in-process Trainer: commands go out as wire lines, acknowledged
later by events; a reader thread queues every record the server sends (the replay, then the
live stream) as events. Torch-free and textual-free: a viewer needs neither.
"""

from __future__ import annotations

import getpass
import itertools
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from engine.control import wire
from engine.control.carry_on import engine_gone_message
from engine.control.connection import (
    EngineUnreachable,
    LineReader,
    connect_run,
    read_hello,
    socket_path_of,
)
from engine.events import Alert, Event, EventQueue, RunState, StateChanged

DETACHED = "detached"  # what run() returns when the viewer left and the run goes on
ENGINE_GONE = "engine_gone"  # the code of the Alert when the connection dropped mid-run
SOCKET_ALERT = "socket"  # the code of the Alerts about commands (refused, not delivered)
_POLL_S = 0.05  # how often run() looks at should_stop


def viewer_name() -> str:
    """Who this viewer is, as others see it: "user@host (tty)"."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    # a viewer without a terminal of its own says what it is instead: `cockpit serve`'s tabs
    # set COCKPIT_VIA="browser via cockpit serve"
    via = os.environ.get("COCKPIT_VIA", "")[:60]
    try:
        tty = via or os.ttyname(0).removeprefix("/dev/")
    except OSError:
        tty = "no tty"
    return f"{user}@{socket.gethostname()} ({tty})"

class RemoteEngine:
    """One run in another process (or thread), through its control socket: construction
    reads the hello (EngineUnreachable on failure); `state` follows it and every StateChanged.
    A command blocks at most `send_timeout_s`; one undelivered or refused is an Alert
    ("socket"). `run(should_stop)` returns the final state, `DETACHED` when the app closes
    (the run goes on), or FAILED when the connection dropped without a final state (an Alert
    "engine_gone" then says how to resume)."""

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
        self._arrived = threading.Condition()  # notified when drain_events has something new
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
        self.replayed_until = 0.0  # EngineHandle: the newest time of the replay, once it is over
        self.unreadable_records = 0  # lines skipped: not JSON, too long, or of an unknown kind
        self._sock = connect_run(self.socket_path, connect_timeout_s)
        self._reader = LineReader(self._sock)
        try:
            hello = read_hello(self._reader, self.socket_path, connect_timeout_s)
        except BaseException:
            self._sock.close()
            raise
        self._state: str = str(hello.get("state") or RunState.STARTING)
        self.viewer = hello.get("viewer")
        self.read_only = bool(hello.get("read_only", False))
        self.pid = hello.get("pid")
        # a field of the wrong type (an odd server) is unknown, not a crash of the viewer
        summary, viewers = hello.get("summary"), hello.get("viewers")
        self.summary: dict[str, Any] = dict(summary) if isinstance(summary, dict) else {}
        self.other_viewers: list[dict[str, Any]] = (
            [v for v in viewers if isinstance(v, dict)] if isinstance(viewers, list) else []
        )
        self._sock.settimeout(send_timeout_s)  # the reader's recv wakes up as often: harmless
        # the client's hello to the server (not a command): who this viewer is, and whether it
        # only watches
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
    recorded = False  # a live run
    resume_from = None  # the run's own process resumed it, if anything did
    telemetry_enabled = True  # the run's readings, as its process polls them

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

    def wait_for_events(self, timeout: float) -> bool:
        """Block until `drain_events()` has something to return (the replay whole, then each
        event as it arrives) or `timeout` seconds passed; True if it has."""
        with self._arrived:
            return self._arrived.wait_for(self._drainable, timeout)

    def _drainable(self) -> bool:
        return (self.live or self._closed.is_set()) and len(self.events) > 0

    def _wake(self) -> None:
        """Wake a viewer waiting in wait_for_events (it checks for itself what is drainable)."""
        with self._arrived:
            self._arrived.notify_all()

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
        self._wake()

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

    def set_settings(self, settings: dict[str, Any]) -> None:
        # JSON has lists, not tuples (sample.prompts as the config holds it); the run names
        # this viewer as who asked
        values = {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()}
        self._send("set", settings=values)

    def sample(self) -> None:
        self._send("sample")

    def evaluate(self) -> None:
        self._send("evaluate")

    def stop(self, checkpoint: bool = True, reason: str = "stopped by user") -> None:
        self._send("stop", checkpoint=checkpoint, reason=reason)

    def rollback(self, lr_factor: float = 0.5, checkpoint: str | None = None) -> None:
        # the wire takes the checkpoint's file name (the run compares names, in its directory)
        named = {} if checkpoint is None else {"checkpoint": os.path.basename(checkpoint)}
        self._send("rollback", lr_factor=lr_factor, **named)

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
            self._wake()  # what is queued is drainable now, the replay's end or not

    def _handle(self, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        if kind == "live":
            if not self.replayed_until:  # the first replay's end (a resync's is news missed)
                self.replayed_until = self._last_time
            self.live = True
            self._wake()  # the replay, whole
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
            if self.live:  # a replay's records wait for its end: no wake for each of them
                self._wake()

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
        self._wake()

    def _engine_gone(self) -> None:
        self._alert("error", engine_gone_message(self.run_dir), ENGINE_GONE)
        self._state = RunState.FAILED
        self.events.put(
            StateChanged(state=RunState.FAILED, step=self._last_step, reason="engine gone")
        )
