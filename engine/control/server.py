"""A run's control socket, RUN_DIR/control.sock: `ControlServer`, a sink of the run's events.

On the training thread it only appends each event to every viewer's bounded queue; per viewer
a writer thread encodes and sends, a reader thread hands commands to the run's command
methods. A viewer that falls behind is resynchronised, never waited for; MAX_VIEWERS,
SEND_CHUNK_BYTES and viewer.REPLY_BACKLOG_BYTES bound what a flood of clients can take.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from engine.config.live import keys_refusal
from engine.control import wire
from engine.control.catch_up import LiveReplay
from engine.control.unix_socket import bind_unix, peer_uid
from engine.control.viewer import VIEWER_QUEUE, Viewer
from engine.events import CommandReceived, Event, ViewerChanged
from engine.rundir.journal import viewer_name
from engine.rundir.lock import RunLock

CLOSE_GRACE_S = 1.0  # time the viewers get to take the last records when the run ends
MAX_VIEWERS = 32  # viewers served at once (two threads each); one more is refused in one line
LISTEN_BACKLOG = 128  # connections waiting to be accepted: a flood's are refused at once
SEND_CHUNK_BYTES = 256 * 1024  # a writer sends its lines in pieces of about this size
REFUSAL_TIMEOUT_S = 1.0  # a refused peer's one line goes out within this, or not at all
LIVE_LINE = wire.encode({"kind": "live"})
# the commands that say who asked: config.toml's timeline and the events record the viewer
ATTRIBUTED = ("set_lr", "scale_lr")
WRITE_INTERVAL_S = 0.02  # a viewer's writer sends at most this often (a batch of events)


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
        max_viewers: int = MAX_VIEWERS,
    ) -> None:
        self.run_dir = run_dir
        self.path = run_dir / wire.SOCKET_NAME
        self.handle = handle
        self.alert = alert
        self.emit = emit
        self.queue_size = queue_size
        self.max_viewers = max_viewers
        self._lock = threading.Lock()  # viewers and the replay: taken by every event
        self._viewers: list[Viewer] = []
        self._replay = LiveReplay(self._lock, history)
        self.lock: RunLock | None = None  # released by close(): held for the run's life
        self._closing = False
        # The run's final state once it is being recorded (end_journal): no viewer's record
        # after it. The lock is held around each viewer's record, so one in flight is written
        # before the final state, never after it.
        self._journal_lock = threading.Lock()
        self._ended: str | None = None
        self._count = 0
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> str | None:
        """Listen (mode 0600; a stale socket from a killed run replaced); the caller holds the
        run's lock. Returns a one-line problem instead of raising when it cannot serve."""
        try:
            with contextlib.suppress(FileNotFoundError):
                there = os.lstat(self.path).st_mode
                if not (stat.S_ISSOCK(there) or stat.S_ISLNK(there)):
                    raise FileExistsError(errno.EEXIST, "something else is at its name")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            # Bound in a private directory (0700), made 0600, then renamed into place: no
            # window where another user connects, and no process-wide umask change (it would
            # race with every thread creating a file). The rename replaces a stale socket from
            # a killed run (we hold the lock: whoever bound it is gone) or a planted link.
            private = Path(tempfile.mkdtemp(prefix=f".{wire.SOCKET_NAME}.", dir=self.run_dir))
            try:
                bound = private / wire.SOCKET_NAME
                bind_unix(listener, bound)
                os.chmod(bound, 0o600)
                os.replace(bound, self.path)
            finally:
                shutil.rmtree(private, ignore_errors=True)
            listener.listen(LISTEN_BACKLOG)
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

    def end_journal(self, state: str) -> None:
        """The run is about to record its final `state` (the Trainer calls this just before):
        from now on a viewer's command is refused and nothing of the viewers' (commands,
        attaches, detaches) is recorded, so the final state stays the run's last record."""
        with self._journal_lock:  # a viewer's record being written finishes first
            self._ended = state

    @property
    def viewers(self) -> int:
        with self._lock:
            return len(self._viewers)

    # ------------------------------------------------------------------ the sink (any thread)
    def __call__(self, event: Event) -> None:
        with self._lock:
            self._replay.note(event)
            for viewer in self._viewers:
                viewer.offer(event, self.queue_size)

    def _facts(self, viewer: Viewer | None) -> dict[str, Any]:
        """What a hello says of the run (under the lock): the run at a glance, with the length
        in force (a live `set train.max_steps` included), and the viewers besides `viewer`."""
        name = getattr(getattr(self.handle, "cfg", None), "name", None)
        return {
            "protocol": wire.PROTOCOL,
            "run_dir": str(self.run_dir),
            "pid": os.getpid(),
            "state": str(self.handle.state),
            "summary": self._replay.summary(name),
            "viewers": self._others(viewer),
        }

    def _others(self, viewer: Viewer | None) -> list[dict[str, Any]]:
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
        if uid != os.getuid():  # told nothing of the run
            _turn_away(conn, f"refused: this run belongs to uid {os.getuid()}, you are uid {uid}")
            return
        with self._lock:
            if self._closing:
                conn.close()
                return
            if len(self._viewers) >= self.max_viewers:
                run = self._facts(None)
                full = True
            else:
                full = False
                self._count += 1
                viewer = Viewer(self._count, conn)
                viewer.resync = True  # the first replay is the hello's
                viewer.wake.set()  # sent at once, even by a paused run that emits nothing
                self._viewers.append(viewer)
        if full:  # what the run is goes with the refusal: `cockpit ps` lists it all the same
            error = (
                f"too many viewers ({len(run['viewers'])} attached, the most one run serves): "
                "detach one (`cockpit ps` names them) and attach again"
            )
            _turn_away(conn, error, run)
            return
        viewer.writer = threading.Thread(
            target=self._write_loop, args=(viewer,), name=f"control-writer-{viewer.number}",
            daemon=True,
        )
        viewer.writer.start()
        threading.Thread(
            target=self._read_loop, args=(viewer,), name=f"control-reader-{viewer.number}",
            daemon=True,
        ).start()

    def _drop(self, viewer: Viewer) -> None:
        with self._lock:
            if viewer in self._viewers:
                self._viewers.remove(viewer)
            viewer.closed = True
            detached = viewer.announced
            viewer.announced = False  # both the reader and the writer may drop it: once
        viewer.wake.set()
        viewer.room.set()  # a reader waiting for its replies to be taken ends
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
        return int(getattr(self._replay.last_step, "step", 0))

    def _record(self, event: Event) -> bool:
        """Hand a viewer's record to the run (not under the viewers' lock: it comes back as a
        sink); False, with nothing recorded, once the run's final state is (end_journal)."""
        with self._journal_lock:
            if self._ended is not None:
                return False
            if self.emit is not None:
                self.emit(event)
            return True

    def _write_loop(self, viewer: Viewer) -> None:
        first = True
        try:
            while True:
                viewer.wake.wait()
                viewer.wake.clear()
                with self._lock:
                    replay = self._replay.events() if viewer.take_resync() else None
                    head = None
                    if replay is not None:
                        head = {
                            "kind": "hello" if first else "resync",
                            **self._facts(viewer),
                            "viewer": viewer.number,
                            "read_only": viewer.read_only,
                            "replay": len(replay),
                        }
                    items = viewer.drain()
                    done = self._closing or viewer.closed
                if head is not None and replay is not None:
                    first = False
                    viewer.conn.sendall(wire.encode(head))  # a viewer waits for it: at once
                    replayed = (self._replay.encoded(e) for e in replay)
                    _send_lines(viewer.conn, itertools.chain(replayed, [LIVE_LINE]))
                _send_lines(viewer.conn, (wire.encode(_record(e)) for e in items))
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

    def _read_loop(self, viewer: Viewer) -> None:
        stream = viewer.conn.makefile("rb")
        try:
            while not viewer.closed:
                viewer.room.wait()  # its replies taken by the writer (or the viewer dropped)
                if viewer.closed:
                    break
                line = stream.readline(wire.MAX_LINE_BYTES + 1)
                if not line:
                    break
                with self._lock:
                    viewer.owe(len(line))  # its reply echoes its id: about its size
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

    def _take(self, viewer: Viewer, line: bytes) -> None:
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
        if name == "set" and (why := keys_refusal(arguments["settings"])) is not None:
            self._refuse(viewer, ident, why, "command")  # no run takes that key: said now
            return
        # recorded before it is queued, so its acknowledgement always follows it in the file
        recorded = self._record(
            CommandReceived(
                name=name, args=arguments, viewer=viewer.number, who=viewer.who, step=self._step()
            )
        )
        if not recorded:  # the run has ended: nothing would carry the command out
            error = f"{name}: the run has {self._ended}; it takes no more commands"
            self._refuse(viewer, ident, error, "ended")
            return
        # who asked goes with a change: the SettingsChanged and config.toml's timeline say
        by = viewer_name(viewer.number, viewer.who)
        if name == "set":
            self.handle.set_settings(arguments["settings"], by=by)
        elif name in ATTRIBUTED:
            getattr(self.handle, name)(**arguments, by=by)
        else:
            getattr(self.handle, name)(**arguments)
        self._reply(viewer, {"kind": "reply", "id": ident, "ok": True})

    def _refuse(self, viewer: Viewer, ident: Any, error: str, mistake: str) -> None:
        self._reply(viewer, {"kind": "reply", "id": ident, "ok": False, "error": error})
        if mistake in viewer.warned:
            return  # once per viewer per kind: the log is not flooded
        viewer.warned.add(mistake)
        with self._journal_lock:  # none after the run's end: a record after its final state
            if self._ended is None:
                self.alert(f"control socket: viewer {viewer.number} sent {error}")

    def _reply(self, viewer: Viewer, reply: dict[str, Any]) -> None:
        with self._lock:
            viewer.push(reply)


def _record(item: Event | dict[str, Any]) -> dict[str, Any]:
    return item.to_record() if isinstance(item, Event) else item


def _send_lines(conn: socket.socket, lines: Iterator[bytes]) -> None:
    """Send `lines` in pieces of about SEND_CHUNK_BYTES: a viewer that does not read holds up
    one piece, not a copy of all of them."""
    piece: list[bytes] = []
    size = 0
    for line in lines:
        piece.append(line)
        size += len(line)
        if size >= SEND_CHUNK_BYTES:
            conn.sendall(b"".join(piece))
            piece, size = [], 0
    if piece:
        conn.sendall(b"".join(piece))


def _turn_away(conn: socket.socket, error: str, run: dict[str, Any] | None = None) -> None:
    """One refusal line to a peer that is not served, then hang up (on the accept thread: a
    peer that does not read gets REFUSAL_TIMEOUT_S, not a thread). `run`: what the run is (a
    hello's fields), for a peer of the run's own user."""
    refusal: dict[str, Any] = {"kind": "reply", "id": None, "ok": False, "error": error}
    if run is not None:
        refusal["run"] = run
    conn.settimeout(REFUSAL_TIMEOUT_S)
    try:
        conn.sendall(wire.encode(refusal))
    except OSError:
        pass  # gone already, or not reading: the hang-up says the rest
    finally:
        _shutdown(conn)
        conn.close()


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
