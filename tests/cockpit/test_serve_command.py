"""`cockpit serve`'s refusals (one line, exit 2, nothing served) and the command each tab runs.

The page itself, in a real browser in front of a real run, is tests/e2e/test_browser.py.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cockpit.cli.serve import attach_command, serving_report
from engine.control.live_runs import LiveRun

REPO = Path(__file__).resolve().parents[2]


def serve(cwd: Path, *argv: str, pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (pythonpath, str(REPO)) if p)}
    return subprocess.run(
        [sys.executable, "-m", "cockpit", "serve", *argv],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal (exit 2, nothing on stdout, no traceback)."""
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cockpit serve: ")
    return lines[0]


@pytest.mark.parametrize(
    "port, problem",
    [
        ("abc", "not a port number"),
        ("0", "a port is a number from 1 to 65535"),
        ("70000", "a port is a number from 1 to 65535"),
    ],
)
def test_a_bad_port_is_refused(tmp_path: Path, port: str, problem: str) -> None:
    line = refused(serve(tmp_path, "--port", port))
    assert f"--port {port}: {problem}" in line and "e.g. --port 8000" in line


def test_a_port_in_use_is_named_with_a_free_one_to_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = refused(serve(tmp_path, "--port", str(port)))
    assert f"port {port} on 127.0.0.1 is in use" in line
    suggested = int(line.rsplit("--port ", 1)[1])
    assert suggested != port
    with socket.socket() as s:
        s.bind(("127.0.0.1", suggested))  # it was free when suggested (and still is)


def test_without_textual_serve_it_says_what_to_install(tmp_path: Path) -> None:
    missing = tmp_path / "hidden"
    (missing / "textual_serve").mkdir(parents=True)
    (missing / "textual_serve" / "__init__.py").write_text(
        "raise ImportError('textual-serve is hidden from this test')\n"
    )
    line = refused(serve(tmp_path, "--port", "8000", pythonpath=str(missing)))
    assert "textual-serve is not installed" in line
    assert "pip install 'cockpit[serve]'" in line


def test_a_directory_with_no_run_says_how_to_start_one(tmp_path: Path) -> None:
    line = refused(serve(tmp_path, str(tmp_path), "--port", str(free_port())))
    assert f"no live run in {tmp_path}" in line
    assert f"cockpit start --run-dir {tmp_path}" in line


def test_a_run_that_ended_says_how_to_resume_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "ckpt-00000100.pt").write_bytes(b"")
    stale = socket.socket(socket.AF_UNIX)  # a socket file left by a killed run: it refuses
    stale.bind(str(run_dir / "control.sock"))
    stale.close()
    line = refused(serve(tmp_path, "run", "--port", str(free_port())))
    assert "no live run in run;" in line and "cockpit start --resume run" in line


def test_no_such_directory(tmp_path: Path) -> None:
    line = refused(serve(tmp_path, "nowhere", "--port", str(free_port())))
    assert "nowhere: no such run directory" in line and "cockpit ps" in line


def test_without_run_dir_it_looks_under_runs(tmp_path: Path) -> None:
    line = refused(serve(tmp_path, "--port", str(free_port())))
    assert "no runs/ here" in line and "cockpit serve RUN_DIR" in line
    (tmp_path / "runs" / "old").mkdir(parents=True)
    line = refused(serve(tmp_path, "--port", str(free_port())))
    assert "no live run under runs/" in line and "cockpit start" in line


def test_each_tab_runs_cockpit_attach_on_the_run_quoted(tmp_path: Path) -> None:
    run_dir = tmp_path / "it's a run; $(nothing)"
    command = attach_command(run_dir, read_only=True)
    prefix, _, argv = command.partition(" exec ")
    # ctrl+c: no traceback from a tab still starting; the run's journal names the tab for what it is
    assert prefix == "trap '' INT; COCKPIT_VIA='browser via cockpit serve'"
    assert shlex.split(argv) == [
        sys.executable, "-m", "cockpit", "attach", str(run_dir.resolve()), "--read-only"
    ]  # fmt: skip
    assert shlex.split(attach_command(run_dir, read_only=False).partition(" exec ")[2])[-1] == str(
        run_dir.resolve()
    )


def test_a_tab_says_it_is_a_browser_tab_of_serve() -> None:
    """What the run's journal and `cockpit ps` call a tab's viewer (it has no terminal)."""
    code = "from engine.control.client import viewer_name; print(viewer_name())"
    out = subprocess.run(
        ["sh", "-c", f"{attach_command(Path('.'), read_only=False).partition(' exec ')[0]} "
         f"exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"],
        cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip
    assert out.stdout.strip().endswith("(browser via cockpit serve)"), out


def test_the_report_gives_the_url_with_its_token_the_run_and_the_tunnel(tmp_path: Path) -> None:
    live = LiveRun(tmp_path, 1, "running", "tiny", None, 1234, 10_000, 2.5, 1e4, 0.01)
    report = serving_report(live, 8123, "T0KEN", read_only=True)
    first = report.splitlines()[0]
    assert str(tmp_path) in first and "tiny, running, step 1,234" in first
    assert first.endswith(" at http://127.0.0.1:8123/?token=T0KEN")
    assert "ssh -L 8123:127.0.0.1:8123 " in report and "read-only" in report


def test_importing_the_command_is_cheap() -> None:
    heavy = "{'textual_serve', 'aiohttp', 'torch', 'textual'}"
    code = f"import sys, cockpit.cli.serve; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "[]", out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
