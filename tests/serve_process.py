"""`cockpit serve` in front of a live run, as a subprocess: what the page tests open.

Imported as `serve_process` by the tests (pytest puts tests/ on sys.path for tests/conftest.py).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import warm_process

TIMEOUT_S = 30.0
REPO = Path(__file__).resolve().parent.parent


def start_serve(run_dir: Path) -> tuple[subprocess.Popen[str], str]:
    """`cockpit serve RUN_DIR --port FREE` in its own process group (its tabs' processes too),
    once it listens, and the URL it printed (its token in it)."""
    port = free_port()
    serve = warm_process.Popen(
        [sys.executable, "-m", "cockpit", "serve", str(run_dir), "--port", str(port)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        report = [serve.stdout.readline()]  # its last line says how to stop serving
        while "ctrl+c" not in report[-1] and report[-1]:
            report.append(serve.stdout.readline())
        url = report[0].rpartition(" at ")[2].strip()
        assert url.startswith(f"http://127.0.0.1:{port}/?token="), report
        assert "ssh -L" in "".join(report)
        wait_until(lambda: port_open(port) or serve.poll() is not None, "the server")
        assert serve.poll() is None, serve.communicate()[0]
    except BaseException:
        kill_serve(serve)
        raise
    return serve, url


def kill_serve(serve: subprocess.Popen[str]) -> None:
    """Serve and its tabs gone, if they are not already (their viewers just drop)."""
    if serve.poll() is None:
        os.killpg(serve.pid, signal.SIGKILL)
        serve.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(condition: Any, what: str, timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return result
