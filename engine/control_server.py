"""A run's control socket: every run serves RUN_DIR/control.sock (engine/wire.py's protocol).

The run's lock is engine/run_lock.py's, its socket addresses engine/unix_socket.py's.
`ControlServer` is a sink of the run's events: on the training thread it only appends each
event to every viewer's bounded queue (no I/O, no JSON there);
per viewer a writer thread encodes and sends, and a reader thread takes commands and hands
them to the run's thread-safe command methods. A viewer that falls behind is resynchronised
(its queue cleared, then `{"kind": "resync", ...}` and the replay again), never waited for.

Torch-free: it needs only the run's command methods, its `state`, an alert callback and the
run's `emit` (a viewer's attach, detach and commands are recorded: engine/journal.py reads them).
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from engine import wire
from engine.events import CommandReceived, Event, ViewerChanged
from engine.metrics_log import HISTORY_KINDS
from engine.run_lock import RunLock
from engine.unix_socket import bind_unix, peer_uid

VIEWER_QUEUE = 10_000  # events a viewer may fall behind by before it is resynchronised
REPLAY_STEPS = 8000  # step records in a replay, thinned evenly as read_history does
CLOSE_GRACE_S = 1.0  # time the viewers get to take the last records when the run ends
REPLAY_TELEMETRY = 300  # newest device readings in a replay: the device panel's recent past
REPLAY_ALERTS = 5  # newest warnings and errors since the run last went running: why it is paused
REPLAY_JOURNAL = 500  # newest viewer and command records in a replay: who attached and did what
WRITE_INTERVAL_S = 0.02  # a viewer's writer sends at most this often (a batch of events)


class _Viewer:
    """One connection: its queue (events and replies), its writer wake-up, its threads."""

    def __init__(self, number: int, conn: socket.socket) -> None:
        self.number = number
        self.conn = conn
        self.queue: deque[Event | dict[str, Any]] = deque()
        self.wake = threading.Event()
        self.resync = False  # set when the queue overflowed: the writer replays afresh
        self.read_only = False
        self.who = ""  # what the viewer says it is (its client hello): "user@host (tty)"
        self.closed = False
        self.warned: set[str] = set()  # kinds of mistake already logged for this viewer
        self.announced = False  # its attach was recorded (at its client hello: probes say none)
        self.writer: threading.Thread | None = None


class ControlServer:
    """Serves a run's events and takes its commands on RUN_DIR/control.sock (see module doc).

    `handle` has the EngineHandle's command methods and `state`; `alert(message)` logs one
    warning for the run (called from a viewer's thread). `history` seeds the replay with the
    run's past (a resumed run's read_history). `emit(event)`, when given, records a viewer's
    attach, detach and commands as the run's events (called from a viewer's thread, never under
    the server's lock: the server is one of the run's sinks)."""

    def __init__(
        self,
        run_dir: Path,
        handle: Any,
        alert: Callable[[str], None],
        history: Iterable[Event] = (),
        queue_size: int = VIEWER_QUEUE,
        emit: Callable[[Event], None] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.path = run_dir / wire.SOCKET_NAME
        self.handle = handle
        self.alert = alert
        self.emit = emit
        self.queue_size = queue_size
        self._lock = threading.Lock()  # viewers, history, run_started: taken by every event
        self._viewers: list[_Viewer] = []
        self._run_started: Event | None = None
        self._history: list[Event] = []
        self._step_stride = 1  # keep every Nth step event in memory (doubled when too many)
        self._steps_seen = 0
        self._last_step: Event | None = None
        # the run's present besides its history: what a viewer needs to draw it as it is now
        self._last_state: Event | None = None
        self._last_memory: Event | None = None
        self._last_ranks: Event | None = None
        self._telemetry: deque[Event] = deque(maxlen=REPLAY_TELEMETRY)
        self._alerts: deque[Event] = deque(maxlen=REPLAY_ALERTS)
        self._journal: deque[Event] = deque(maxlen=REPLAY_JOURNAL)  # viewer and command records
        # wire lines of history records already sent once (id -> (event, line))
        self._lines: dict[int, tuple[Event, bytes]] = {}
        for event in history:
            self._remember(event)
        self.lock: RunLock | None = None  # released by close(): held for the run's life
        self._closing = False
        self._count = 0
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> str | None:
        """Listen (mode 0600; a stale socket from a killed run replaced); the caller holds the
        run's lock. Returns a one-line problem instead of raising when it cannot serve."""
        try:
            if self.path.is_socket() or self.path.is_symlink():
                self.path.unlink()  # we hold the lock: whoever bound it is gone
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old_umask = os.umask(0o177)  # created 0600: no window where another user connects
            try:
                bind_unix(listener, self.path)
            finally:
                os.umask(old_umask)
            os.chmod(self.path, 0o600)
            listener.listen(16)
        except OSError as e:
            return f"control socket {self.path} not served ({e.strerror or e}); attach won't work"
        self._listener = listener
        self._accept_thread = threading.Thread(
            target=self._accept_loop, name="control-accept", daemon=True
        )
        self._accept_thread.start()
        return None

    def close(self) -> None:
        """Stop accepting, let viewers take the last records, close them, remove the socket."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            viewers = list(self._viewers)
        if self._listener is not None:
            _shutdown(self._listener)
            self._listener.close()
            try:
                self.path.unlink()
            except OSError:
                pass
        for viewer in viewers:
            viewer.wake.set()
        deadline = time.monotonic() + CLOSE_GRACE_S
        for viewer in viewers:
            if viewer.writer is not None:
                viewer.writer.join(max(0.0, deadline - time.monotonic()))
            _shutdown(viewer.conn)  # a writer stuck on a full socket ends here
        if self._accept_thread is not None:
            self._accept_thread.join(CLOSE_GRACE_S)
        if self.lock is not None:
            self.lock.release()

    @property
    def viewers(self) -> int:
        with self._lock:
            return len(self._viewers)

    # ------------------------------------------------------------------ the sink (any thread)
    def __call__(self, event: Event) -> None:
        with self._lock:
            if event.kind == "run_started":
                self._run_started = event
            elif event.kind in HISTORY_KINDS:
                self._remember(event)
            else:
                self._note_present(event)
            for viewer in self._viewers:
                if len(viewer.queue) >= self.queue_size:
                    viewer.queue.clear()  # fallen behind: it gets the replay again instead
                    viewer.resync = True
                viewer.queue.append(event)
                viewer.wake.set()

    def _remember(self, event: Event) -> None:
        """Keep `event` for replays; steps thinned in memory so a long run stays small."""
        if event.kind == "step":
            step = event.step  # type: ignore[attr-defined]
            if self._last_step is not None and step <= self._last_step.step:  # type: ignore
                # trained again after a rollback: the newer records win, as in read_history
                self._history = [e for e in self._history if getattr(e, "step", 0) < step]
                self._forget_lines()
            self._last_step = event  # the newest step is always in a replay
            self._steps_seen += 1
            if self._steps_seen % self._step_stride:
                return
        self._history.append(event)
        if event.kind == "step" and len(self._history) > 2 * REPLAY_STEPS:
            self._step_stride *= 2
            steps = [e for e in self._history if e.kind == "step"]
            keep = {id(e) for e in steps[::2]}
            self._history = [e for e in self._history if e.kind != "step" or id(e) in keep]
            self._forget_lines()

    def _note_present(self, event: Event) -> None:
        """Keep the newest state, memory breakdown, readings and faults (under the lock)."""
        kind = event.kind
        if kind == "state":
            self._last_state = event
            if event.state == "running":  # type: ignore[attr-defined]
                self._alerts.clear()  # resumed: the faults that paused it are behind it
        elif kind == "memory":
            self._last_memory = event
        elif kind == "ranks":
            self._last_ranks = event  # every rank's row in the device panel at once
        elif kind == "telemetry":
            self._telemetry.append(event)
        elif kind in ("viewer", "command"):
            self._journal.append(event)
        elif kind == "alert" and event.level in ("warning", "error"):  # type: ignore[attr-defined]
            self._alerts.append(event)

    def _replay(self) -> list[Event]:
        """run_started, the history thinned to REPLAY_STEPS steps, the newest viewer and command
        records (who attached and did what), then the present: the newest memory breakdown, recent readings, the faults since the run last went running
        and the state it is in (under the lock)."""
        steps = [e for e in self._history if e.kind == "step"]
        keep = {id(e) for e in steps[:: max(1, math.ceil(len(steps) / REPLAY_STEPS))]}
        past = [e for e in self._history if e.kind != "step" or id(e) in keep]
        if self._last_step is not None and id(self._last_step) not in keep:
            past.append(self._last_step)
        past.extend(self._journal)
        present = [
            self._last_memory, self._last_ranks, *self._telemetry, *self._alerts, self._last_state
        ]
        past.extend(e for e in present if e is not None)
        return [self._run_started, *past] if self._run_started is not None else past

    def _forget_lines(self) -> None:
        """Drop the wire lines of records no longer in the history (under the lock)."""
        kept = {id(e) for e in self._history}
        self._lines = {k: v for k, v in self._lines.items() if k in kept}

    def _encoded(self, event: Event) -> bytes:
        """An event's wire line; history records are encoded once, whatever the viewers."""
        cached = self._lines.get(id(event))
        if cached is not None and cached[0] is event:
            return cached[1]
        line = wire.encode(_record(event))
        if event.kind in HISTORY_KINDS:
            with self._lock:
                self._lines[id(event)] = (event, line)  # the event held: its id stays its own
        return line

    def _summary(self) -> dict[str, Any]:
        """The run at a glance (`cockpit ps`), from the newest records (under the lock)."""
        started, last = self._run_started, self._last_step
        return {
            # before run_started (still loading): the preset of the run's config, when it has one
            "preset": getattr(started, "preset", None)
            or getattr(getattr(self.handle, "cfg", None), "name", None),
            "started": getattr(started, "time", None),
            "max_steps": getattr(started, "max_steps", None),
            "step": getattr(last, "step", getattr(started, "start_step", 0)),
            "loss": _finite(getattr(last, "loss", None)),
            "tokens_per_s": _finite(getattr(last, "tokens_per_s", None)),
            "step_time_s": _finite(getattr(last, "step_time_s", None)),
        }

    def _others(self, viewer: _Viewer) -> list[dict[str, Any]]:
        """The viewers attached besides `viewer` (under the lock)."""
        return [
            {"viewer": v.number, "who": v.who, "read_only": v.read_only}
            for v in self._viewers
            if v is not viewer and not v.closed
        ]

    # ------------------------------------------------------------------ connections
    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closing:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                self._admit(conn)
            except OSError:
                conn.close()

    def _admit(self, conn: socket.socket) -> None:
        uid = peer_uid(conn)
        if uid != os.getuid():
            error = f"refused: this run belongs to uid {os.getuid()}, you are uid {uid}"
            conn.sendall(wire.encode({"kind": "reply", "id": None, "ok": False, "error": error}))
            _shutdown(conn)
            conn.close()
            return
        with self._lock:
            if self._closing:
                conn.close()
                return
            self._count += 1
            viewer = _Viewer(self._count, conn)
            viewer.resync = True  # the first replay is the hello's
            viewer.wake.set()  # sent at once, even by a paused run that emits nothing
            self._viewers.append(viewer)
        viewer.writer = threading.Thread(
            target=self._write_loop, args=(viewer,), name=f"control-writer-{viewer.number}",
            daemon=True,
        )
        viewer.writer.start()
        threading.Thread(
            target=self._read_loop, args=(viewer,), name=f"control-reader-{viewer.number}",
            daemon=True,
        ).start()

    def _drop(self, viewer: _Viewer) -> None:
        with self._lock:
            if viewer in self._viewers:
                self._viewers.remove(viewer)
            viewer.closed = True
            detached = viewer.announced
            viewer.announced = False  # both the reader and the writer may drop it: once
        viewer.wake.set()
        _shutdown(viewer.conn)
        if detached:
            self._record(
                ViewerChanged(
                    viewer=viewer.number, who=viewer.who, read_only=viewer.read_only,
                    attached=False, step=self._step(),
                )
            )

    def _step(self) -> int:
        """The run's newest step, for a viewer's records (which the training thread lacks)."""
        step = getattr(self.handle, "step", None)
        if isinstance(step, int):
            return step
        return int(getattr(self._last_step, "step", 0))

    def _record(self, event: Event) -> None:
        """Hand a viewer's record to the run (not under the lock: it comes back as a sink)."""
        if self.emit is not None:
            self.emit(event)

    def _write_loop(self, viewer: _Viewer) -> None:
        first = True
        try:
            while True:
                viewer.wake.wait()
                viewer.wake.clear()
                with self._lock:
                    if viewer.resync:
                        viewer.resync = False
                        viewer.queue.clear()  # the replay covers what was queued
                        replay = self._replay()
                    else:
                        replay = None
                    items = list(viewer.queue)
                    viewer.queue.clear()
                    done = self._closing or viewer.closed
                out: list[bytes] = []
                if replay is not None:
                    head = {
                        "kind": "hello" if first else "resync",
                        "protocol": wire.PROTOCOL,
                        "run_dir": str(self.run_dir),
                        "pid": os.getpid(),
                        "state": str(self.handle.state),
                        "viewer": viewer.number,
                        "read_only": viewer.read_only,
                        "replay": len(replay),
                        "summary": self._summary(),
                        "viewers": self._others(viewer),
                    }
                    first = False
                    viewer.conn.sendall(wire.encode(head))  # a viewer waits for it: at once
                    out.extend(self._encoded(e) for e in replay)
                    out.append(wire.encode({"kind": "live"}))
                out.extend(wire.encode(_record(e)) for e in items)
                if out:
                    viewer.conn.sendall(b"".join(out))
                if done:
                    break
                # at most one wake-up per interval: events in between go out as one batch,
                # so a fast run's viewer costs the training thread little GIL time
                time.sleep(WRITE_INTERVAL_S)
        except OSError:
            pass  # the viewer went away or was shut down: the run goes on
        finally:
            self._drop(viewer)
            viewer.conn.close()

    def _read_loop(self, viewer: _Viewer) -> None:
        stream = viewer.conn.makefile("rb")
        try:
            while not viewer.closed:
                line = stream.readline(wire.MAX_LINE_BYTES + 1)
                if not line:
                    break
                if len(line) > wire.MAX_LINE_BYTES:
                    error = f"a line over the {wire.MAX_LINE_BYTES:,}-byte limit: disconnected"
                    self._refuse(viewer, None, error, "huge")
                    viewer.closed = True
                    viewer.wake.set()  # the writer sends the refusal, then closes
                    break
                if line.strip():
                    self._take(viewer, line)
        except OSError:
            pass
        finally:
            stream.close()
            if not viewer.closed:
                self._drop(viewer)

    def _take(self, viewer: _Viewer, line: bytes) -> None:
        """One client line: a command queued and acknowledged, or a refusal with one line."""
        try:
            message = wire.decode(line)
        except wire.WireError as e:
            self._refuse(viewer, None, str(e), "malformed")
            return
        ident = message.get("id")
        hello = message.get("hello")
        if "cmd" not in message and isinstance(hello, dict):
            viewer.read_only = viewer.read_only or bool(hello.get("read_only"))
            who = hello.get("who")
            if isinstance(who, str):
                viewer.who = who[:200]
            self._reply(viewer, {"kind": "reply", "id": ident, "ok": True})
            with self._lock:
                attach, viewer.announced = not viewer.announced and not viewer.closed, True
            if attach:
                self._record(
                    ViewerChanged(
                        viewer=viewer.number, who=viewer.who, read_only=viewer.read_only,
                        attached=True, step=self._step(),
                    )
                )
            return
        try:
            name, arguments = wire.parse_command(message)
        except wire.WireError as e:
            self._refuse(viewer, ident, str(e), "command")
            return
        if viewer.read_only:
            self._refuse(viewer, ident, f"{name}: this viewer is read-only", "read-only")
            return
        # recorded before it is queued, so its acknowledgement always follows it in the file
        self._record(
            CommandReceived(
                name=name, args=arguments, viewer=viewer.number, who=viewer.who, step=self._step()
            )
        )
        getattr(self.handle, name)(**arguments)
        self._reply(viewer, {"kind": "reply", "id": ident, "ok": True})

    def _refuse(self, viewer: _Viewer, ident: Any, error: str, mistake: str) -> None:
        self._reply(viewer, {"kind": "reply", "id": ident, "ok": False, "error": error})
        if mistake not in viewer.warned:  # once per viewer per kind: the log is not flooded
            viewer.warned.add(mistake)
            self.alert(f"control socket: viewer {viewer.number} sent {error}")

    def _reply(self, viewer: _Viewer, reply: dict[str, Any]) -> None:
        with self._lock:
            viewer.queue.append(reply)
        viewer.wake.set()


def _finite(value: Any) -> float | None:
    """A number JSON can carry, else None (a NaN loss is null on the wire)."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _record(item: Event | dict[str, Any]) -> dict[str, Any]:
    return item.to_record() if isinstance(item, Event) else item


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def serve_run(
    run_dir: Path,
    handle: Any,
    alert: Callable[[str], None],
    history: Iterable[Event] = (),
    emit: Callable[[Event], None] | None = None,
) -> ControlServer:
    """Lock the run directory (ConfigError when another engine has it) and serve its socket;
    a socket that cannot be served is one warning, not a failed run. close() ends both."""
    lock = RunLock(run_dir)
    lock.acquire()
    server = ControlServer(run_dir, handle, alert, history, emit=emit)
    server.lock = lock
    problem = server.start()
    if problem:
        alert(problem)
    return server
