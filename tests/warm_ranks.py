"""torchrun and its ranks, started warm: each is a small stand-in process (this file, stdlib only)
that has a server which imported torch once fork the real one, then mirrors it.

    [sys.executable, STAND_IN, "-m", "torch.distributed.run", ..., STAND_IN, SCRIPT, ARGS...]
    run with env=sharing_env()   (tests/distributed/launch.py, bench/distributed.py under a test)

torchrun starts its ranks as fresh interpreters, each importing torch (2-3 s of CPU on this
machine's 2 cores, three times a launch). Here the launcher and every rank it starts run
`python warm_ranks.py SCRIPT|-m MODULE ARGS...`: the stand-in hands its standard streams, its
environment (torchrun's RANK, MASTER_PORT, ...) and its working directory to the server, which
forks a child that runs SCRIPT or MODULE with them. The stand-in passes every signal it can
catch on to that child and ends as the child ended (its exit code, or killed by its signal), so
torchrun sees its workers start, fail, die and restart as it would. The child is a real process
of its own: it writes its pid where the tests signal it (rank_worker's pid-R), and a SIGKILL or
SIGSTOP reaches it directly.

A child dies with its stand-in: it holds the read end of a pipe only the stand-in writes to, and
kills its own process group when that pipe closes (a stand-in killed by torchrun or a test's
cleanup leaves no rank training on). A stand-in whose parent is gone kills its child.

What a fresh interpreter would have and a fork does not: its own hash seed (the children share
the server's), its own command line in /proc (the children show the server's), and what torch
reads from the environment as it loads: OMP_NUM_THREADS must be the server's (a request with
another is refused), torchrun's LOGLEVEL is the server's.
"""

from __future__ import annotations

import array
import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_SERVER = "COCKPIT_TEST_WARM_RANKS"  # the server's socket, for the stand-ins torchrun starts
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
# what the ranks and the launcher import on their way to training: imported once, by the server
PRELOAD = (
    "torch", "torch.distributed", "torch.distributed.launcher.api", "torch.distributed.fsdp",
    "torch.distributed.checkpoint", "torch.nn.parallel", "torch._dynamo", "torch.optim",
    "cockpit.cli.command_line", "cockpit.cli.headless", "cockpit.cli.launch", "cockpit.cli.preflight",
    "cockpit.cli.stop_signals", "engine.rundir.metrics_log", "engine.train.build_run",
)  # fmt: skip
REPO = Path(__file__).resolve().parents[1]
STAND_IN = Path(__file__).resolve()


def _send(conn: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode() + b"\n"
    if fds:
        conn.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        conn.sendall(data)


def _receive(conn: socket.socket, buffer: bytearray) -> tuple[dict[str, Any] | None, list[int]]:
    """One newline-ended message (and the descriptors that came with it); None at the end."""
    fds = array.array("i")
    while b"\n" not in buffer:
        data, ancdata, _, _ = conn.recvmsg(1 << 20, socket.CMSG_SPACE(4 * fds.itemsize))
        for level, kind, cdata in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(cdata[: len(cdata) - len(cdata) % fds.itemsize])
        if not data:
            return None, list(fds)
        buffer += data
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return json.loads(line), list(fds)


# ------------------------------------------------------------------ the server
def _die_with_stand_in(lifeline: int) -> None:
    """Block until the stand-in's end of the pipe closes, then kill this process's group."""
    while os.read(lifeline, 1):
        pass
    os.killpg(0, signal.SIGKILL)


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the process the stand-in asked for, run it, exit."""
    import io
    import runpy

    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.setsid()  # as torchrun starts its workers: a session, and a group to kill, of its own
        *streams, lifeline = fds
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
        for fd in streams:
            if fd > 2:
                os.close(fd)
        os.set_inheritable(lifeline, False)
        threading.Thread(target=_die_with_stand_in, args=(lifeline,), daemon=True).start()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stream
        sys.stdout = io.TextIOWrapper(
            io.FileIO(1, "w", closefd=False), write_through=unbuffered, line_buffering=unbuffered
        )
        sys.stderr = io.TextIOWrapper(
            io.FileIO(2, "w", closefd=False), errors="backslashreplace", line_buffering=True
        )
        argv = request["argv"]
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if not isinstance(exit_.code, int) and exit_.code is not None:
            print(exit_.code, file=sys.stderr)
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


def serve(path: str) -> None:
    """Import PRELOAD once, then fork a child for each stand-in that connects to `path`."""
    import importlib
    import select

    for name in PRELOAD:
        importlib.import_module(name)
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
                    try:
                        _send(conn, {"status": status})
                    except OSError:
                        pass
                    conn.close()
        if listener in readable:
            clients.append(listener.accept()[0])
        for conn in [c for c in clients if c in readable]:
            clients.remove(conn)
            request, fds = _receive(conn, bytearray())
            threads = (request or {}).get("env", {}).get("OMP_NUM_THREADS")
            if request is None or len(fds) != 4 or threads != os.environ.get("OMP_NUM_THREADS"):
                for fd in fds:
                    os.close(fd)
                if request is not None:  # OpenMP read the server's when torch loaded
                    _send(conn, {"error": f"OMP_NUM_THREADS={threads}, the server's is "
                                 f"{os.environ.get('OMP_NUM_THREADS')}: start another server"})  # fmt: skip
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
            _send(conn, {"pid": pid})


_server_lock = threading.Lock()
_server: tuple[subprocess.Popen[str], str] | None = None


def server_path() -> str:
    """The server of this test process, started on first use: one thread a process, as torchrun
    sets for its ranks (OpenMP reads OMP_NUM_THREADS as torch loads)."""
    global _server
    with _server_lock:
        if _server is None or _server[0].poll() is not None:
            path = os.path.join(tempfile.mkdtemp(prefix="warm-ranks-"), "sock")
            process = subprocess.Popen(
                [sys.executable, __file__, "--serve", path], stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, text=True, cwd=REPO,
                env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
            )  # fmt: skip
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError("the warm ranks' server did not start")
            _server = (process, path)
            atexit.register(_stop, process)
        return _server[1]


def _stop(process: subprocess.Popen[str]) -> None:
    """End the server with the tests (its CPU, and its children's, counted as theirs)."""
    process.terminate()
    process.wait(10)


def sharing_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) for a launch whose python processes start warm through
    STAND_IN: this test process's server named, one thread a process, this checkout's code."""
    return {
        **(os.environ if env is None else env), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO),
        ENV_SERVER: server_path(),
    }  # fmt: skip


# ------------------------------------------------------------------ the stand-in
def stand_in(argv: list[str]) -> None:
    """Have the server run `argv` as a child, pass signals on to it, and end as it ended."""
    path = os.environ.get(ENV_SERVER)
    if not path:
        sys.exit(f"warm_ranks.py: {ENV_SERVER} is not set; start it with warm_ranks.sharing_env()")
    parent = os.getppid()
    lifeline_read, lifeline_write = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
    _send(conn, request, [0, 1, 2, lifeline_read])
    os.close(lifeline_read)
    buffer = bytearray()
    reply, _ = _receive(conn, buffer)
    if reply is None or "pid" not in reply:
        sys.exit(
            f"warm_ranks.py: the server did not start {argv}: {(reply or {}).get('error', 'it is gone')}"
        )
    pid = reply["pid"]

    def forward(signum: int, _frame: Any) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    conn.settimeout(1.0)
    while True:
        try:
            reply, _ = _receive(conn, buffer)
            break
        except TimeoutError:
            if os.getppid() != parent:  # torchrun is gone: so is its worker
                os.kill(pid, signal.SIGKILL)
                os._exit(1)
    status = reply["status"] if reply is not None else signal.SIGKILL  # the server went away
    os.close(lifeline_write)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    sys.exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        stand_in(sys.argv[1:])
