"""Real processes that start warm: `Popen`/`run` as subprocess's, for `python -m cockpit ...` and
Python scripts, forked from a server that has imported torch once, instead of each process
importing it again (2-3 s of CPU each on a 2-core machine, a quarter of the suite).

The children are real processes of their own (their pid, signals, process group, exit status,
file descriptors, environment and working directory are theirs); what they skip is the exec and
the imports. Tests of what happens while a process starts up (a signal during the imports, the
command line `ps` shows) keep starting a fresh interpreter with `subprocess`.

This file holds the one fork server of the suite. A test process starts one server of each kind
it uses (`ServerKind`: what the server imports, what its environment sets): this file's, for
the processes `Popen` starts, and tests/warm_ranks.py's, for torchrun's launcher and ranks (one
OpenMP thread each, torch.distributed imported). A request names the argv, environment, working
directory and standard streams of the process to fork, and may bring a lifeline: the read end
of a pipe whose closing kills the child's process group (tests/warm_ranks.py's stand-ins).

A server is single-threaded (it forks), ends with the test process that started it, and its
children get SIGTERM when it goes.
"""

from __future__ import annotations

import array
import atexit
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]
HEADER = 4  # bytes of a message's length
STREAMS = 3  # stdin, stdout, stderr: the descriptors every request brings
# read once when torch and its OpenMP load: a child asking for other values needs a fresh process
READ_AT_IMPORT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED", "CUDA_VISIBLE_DEVICES")
WARM_IMPORTS = ("torch", "torch._dynamo", "torch.optim", "numpy", "cockpit.cli.command_line",
                "engine.train", "engine.train.build_run", "engine.config")  # fmt: skip


# ------------------------------------------------------------------ messages (both ends)
def send(conn: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """One message: its length, then its JSON; `fds` go with its first byte."""
    data = json.dumps(message).encode()
    payload = len(data).to_bytes(HEADER, "big") + data
    if fds:
        conn.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        conn.sendall(payload)


def receive(conn: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors that came with it; None where the other end closed. It
    reads no further than its message: the next one (a child's exit, right after its pid) stays
    for the next call."""
    fds = array.array("i")
    data = b""
    while len(data) < HEADER:
        more, ancdata, _, _ = conn.recvmsg(
            HEADER - len(data), socket.CMSG_SPACE((STREAMS + 1) * fds.itemsize)
        )
        for level, kind, cdata in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(cdata[: len(cdata) - len(cdata) % fds.itemsize])
        if not more:
            return None, list(fds)
        data += more
    size = int.from_bytes(data, "big")
    body = b""
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            return None, list(fds)
        body += more
    return json.loads(body), list(fds)


# ------------------------------------------------------------------ the server (its own process)
def _refusal(request: dict[str, Any], fds: list[int]) -> str | None:
    """Why this server cannot fork what `request` asks for; None where it can."""
    wanted = STREAMS + bool(request.get("lifeline"))
    if len(fds) != wanted:
        return f"a request brings {wanted} descriptors, this one {len(fds)}"
    if request.get("lifeline") and not request["new_session"]:  # it kills the child's group
        return "a child with a lifeline has a session of its own: start_new_session=True"
    env = request["env"]
    for name in READ_AT_IMPORT:
        if env.get(name) != os.environ.get(name):
            return (
                f"a warm process has its server's {name} ({os.environ.get(name, 'unset')}), not "
                f"{env.get(name, 'unset')}: torch reads it as it loads; start a fresh process for another"
            )  # fmt: skip
    path = env.get("PYTHONPATH", "")
    if path and Path(path.split(os.pathsep)[0]).resolve() != REPO:
        return f"a warm process runs this checkout's code, not PYTHONPATH={path}"
    return None


def _die_with_lifeline(lifeline: int) -> None:
    """Block until the other end of the lifeline closes, then kill this process's group."""
    while os.read(lifeline, 1):
        pass
    os.killpg(0, signal.SIGKILL)


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the process the request describes, run it, exit."""
    code = 1
    try:
        # the server's handlers are an interpreter's at start (SIGPIPE and SIGXFSZ ignored, SIGINT
        # raising KeyboardInterrupt) but for the SIGCHLD it waits on
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        if sys.platform == "linux":  # a test that died mid-way leaves no run training on
            import ctypes

            pr_set_pdeathsig = 1  # SIGTERM when the server goes, which it does with its test
            ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)
        if request["new_session"]:
            os.setsid()
        streams, lifelines = fds[:STREAMS], fds[STREAMS:]
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
        for fd in streams:
            if fd > 2:
                os.close(fd)
        for lifeline in lifelines:
            os.set_inheritable(lifeline, False)
            threading.Thread(target=_die_with_lifeline, args=(lifeline,), daemon=True).start()
        if request["memory_cap"]:
            import resource

            cap = request["memory_cap"]
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        # the server's, cached at its imports: read TMPDIR afresh, as a new process would
        tempfile.tempdir = None
        os.umask(request["umask"])
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stream
        sys.stdout = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), write_through=unbuffered,
            line_buffering=unbuffered or os.isatty(1),
        )  # fmt: skip
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), errors="backslashreplace", line_buffering=True
        )
        argv = request["argv"]
        import runpy

        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
        else:
            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int) and exit_.code is not None:
            print(exit_.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT  # an interpreter's own exit on an unhandled Ctrl-C, near enough
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # noqa: BLE001 - the child's last word, as an interpreter prints it
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os._exit(code)


def _reply(conn: socket.socket, message: dict[str, Any]) -> None:
    """Best effort: a client gone (its test ended, was killed) must not end the server."""
    try:
        send(conn, message)
    except OSError:
        pass


def serve(path: str, imports: list[str]) -> None:
    """Import `imports` once, then fork a child for each request on `path`."""
    import gc
    import importlib

    for name in imports:
        importlib.import_module(name)
    # a child's garbage collections leave the imported objects alone: they would touch (and so
    # copy, page by page) the whole heap the child shares with the server
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select through the pipe
    print("ready", flush=True)
    children: dict[int, socket.socket] = {}
    clients: list[socket.socket] = []
    parent = os.getppid()
    while os.getppid() == parent:  # the test process that started it is gone: so is it
        readable, _, _ = select.select([listener, wake_read, *clients], [], [], 1.0)
        if wake_read in readable:
            os.read(wake_read, 512)
            while children:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
                conn = children.pop(pid, None)
                if conn is not None:
                    _reply(conn, {"exited": pid, "status": status})
                    conn.close()
        if listener in readable:
            clients.append(listener.accept()[0])
        for conn in [c for c in clients if c in readable]:
            clients.remove(conn)
            try:
                request, fds = receive(conn)
            except (OSError, ValueError):
                request, fds = None, []
            refusal = None if request is None else _refusal(request, fds)
            if request is None or refusal is not None:
                for fd in fds:
                    os.close(fd)
                if refusal is not None:
                    _reply(conn, {"error": refusal})
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                for own in (listener, conn, *clients, *children.values()):
                    own.close()
                os.close(wake_read)
                os.close(wake_write)
                _child(request, fds)
            for fd in fds:
                os.close(fd)
            children[pid] = conn
            _reply(conn, {"pid": pid})  # its client gone, the child runs on and is reaped


# ------------------------------------------------------------------ the servers (in the test)
class ServerKind(NamedTuple):
    """A kind of warm server: the variable that names one to the processes a test starts (they
    start theirs from it), the modules it imports once, and what its environment sets beside
    the test process's."""

    variable: str
    imports: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


# where a test names its server to a process it starts (a bench, say), that process starts its
# own processes from the same server (tests/live_process.py's runs, a bench's viewers)
SERVER_ENV = "COCKPIT_WARM_SERVER"
PROCESSES = ServerKind(SERVER_ENV, WARM_IMPORTS)
_servers_lock = threading.Lock()
_servers: dict[ServerKind, tuple[subprocess.Popen[str], str]] = {}


def server_path(kind: ServerKind = PROCESSES) -> str:
    """The socket of this test process's server of `kind` (started on first use), or of the
    one its environment names."""
    shared = os.environ.get(kind.variable)
    if shared and kind not in _servers and os.path.exists(shared):
        return shared
    with _servers_lock:
        server = _servers.get(kind)
        if server is None or server[0].poll() is not None:
            path = os.path.join(tempfile.mkdtemp(prefix="warm-"), "sock")
            process = subprocess.Popen(
                [sys.executable, __file__, path, *kind.imports], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, text=True, cwd=REPO,
                env={**os.environ, **dict(kind.env), "PYTHONPATH": str(REPO)},
            )  # fmt: skip
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError("the warm process server did not start")
            server = _servers[kind] = (process, path)
            atexit.register(_stop, process)
        return server[1]


def _stop(process: subprocess.Popen[str]) -> None:
    """End a server with the tests (its CPU, and its children's, counted as theirs)."""
    process.terminate()
    process.wait(10)


def sharing_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) naming this test process's server: a process started
    with it starts its own warm, from the same server."""
    return {**(os.environ if env is None else env), SERVER_ENV: server_path()}


# ------------------------------------------------------------------ the client (in the test)
class Popen(subprocess.Popen):
    """subprocess.Popen for `[sys.executable, "-m", MODULE, ...]`, `[sys.executable, "-c", CODE,
    ...]` or `[sys.executable, SCRIPT, ...]`, the child forked from the warm server at `server`
    (default: this test process's). `memory_cap` (bytes of address space) stands in for a
    preexec_fn that sets RLIMIT_AS; `lifeline`, the read end of a pipe: the child's process
    group is killed when its write end closes. A request the server cannot serve (another
    OMP_NUM_THREADS, say) raises ValueError."""

    def __init__(
        self,
        args: list[str],
        *,
        memory_cap: int | None = None,
        server: str | None = None,
        lifeline: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not args or args[0] != sys.executable or len(args) < 2:
            raise ValueError(f"a warm process runs python -m MODULE, -c CODE or SCRIPT, not {args}")
        if kwargs.get("preexec_fn") is not None or kwargs.get("shell"):
            raise ValueError("a warm process takes memory_cap, not preexec_fn or shell")
        self._memory_cap = memory_cap
        self._server = server
        self._lifeline = lifeline
        self._status_conn: socket.socket | None = None
        super().__init__(args, **kwargs)

    def _execute_child(  # type: ignore[override]
        self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
        creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
        restore_signals, gid, gids, uid, umask, start_new_session, process_group,
    ) -> None:  # fmt: skip
        # where the caller redirects nothing, the child shares the caller's own stream
        fds = [fd if fd != -1 else own for fd, own in ((p2cread, 0), (c2pwrite, 1), (errwrite, 2))]
        if self._lifeline is not None:
            fds.append(self._lifeline)
        umask_now = os.umask(0o022)
        os.umask(umask_now)
        request = {
            "argv": list(args[1:]),
            "cwd": str(cwd) if cwd is not None else os.getcwd(),
            "env": dict(env) if env is not None else dict(os.environ),
            "new_session": bool(start_new_session),
            "memory_cap": self._memory_cap,
            "umask": umask_now if umask < 0 else umask,
            "lifeline": self._lifeline is not None,
        }
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self._server or server_path())
            send(conn, request, fds)
            reply, _ = receive(conn)
        except BaseException:
            conn.close()
            raise
        if reply is None or "pid" not in reply:
            conn.close()
            if reply is not None and "error" in reply:
                raise ValueError(reply["error"])
            raise OSError(f"the warm process server did not start {args}")
        self.pid = reply["pid"]
        self._status_conn = conn
        self._child_created = True
        # the ends made for the child are the child's now (subprocess closes the same ones)
        if p2cread != -1 and p2cwrite != -1 and p2cread != getattr(self, "_devnull", None):
            os.close(p2cread)
        if c2pwrite != -1 and c2pread != -1:
            os.close(c2pwrite)
        if errwrite != -1 and errread != -1:
            os.close(errwrite)
        if hasattr(self, "_devnull"):
            os.close(self._devnull)

    def _status(self, block: bool) -> tuple[int, int]:
        conn = self._status_conn
        if conn is None:
            return self.pid, 0
        if not block and not select.select([conn], [], [], 0)[0]:
            return 0, 0
        reply, _ = receive(conn)
        conn.close()
        self._status_conn = None
        if reply is None:  # the server went away: say the child was killed
            return self.pid, signal.SIGKILL
        return self.pid, reply["status"]

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        return self._status(block=not wait_flags & os.WNOHANG)

    def _wait(self, timeout: float | None) -> int | None:
        # the exit comes as a message: wait for it to arrive, rather than poll as subprocess does
        conn = self._status_conn
        if timeout is not None and self.returncode is None and conn is not None:
            try:
                ready = select.select([conn], [], [], max(timeout, 0.0))[0]
            except (OSError, ValueError):  # another thread read the exit and closed it
                ready = [conn]
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return super()._wait(None)

    def _internal_poll(self, _deadstate: int | None = None, **_: Any) -> int | None:
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    pid, status = self._status(block=False)
                    if pid == self.pid:
                        self._handle_exitstatus(status)
            finally:
                self._waitpid_lock.release()
        return self.returncode


def run(
    args: list[str],
    *,
    input: str | bytes | None = None,
    timeout: float | None = None,
    check: bool = False,
    capture_output: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """subprocess.run, the process started warm."""
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    with Popen(args, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        code = process.poll()
    if check and code:
        raise subprocess.CalledProcessError(code, args, stdout, stderr)
    return subprocess.CompletedProcess(args, code, stdout, stderr)


def pass_signals_on(pid: int, signums: tuple[int, ...]) -> None:
    """Send each of `signums` that reaches this process on to `pid` (a stand-in's child)."""

    def pass_on(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in signums:
        signal.signal(signum, pass_on)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
