"""The warm processes the tests start (tests/warm_process.py) are real processes: their own pid,
exit status, signals, streams, working directory and environment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import warm_process


def test_a_warm_process_is_a_process_of_its_own(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(
        "import json, os, sys\n"
        "print(json.dumps([os.getpid(), os.getcwd(), os.environ['MARK'], sys.argv[1:], sys.stdin.read()]))\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    env = {**os.environ, "MARK": "here"}
    done = warm_process.run(
        [sys.executable, str(script), "a", "b"], input="typed", capture_output=True, text=True,
        cwd=tmp_path, env=env,
    )  # fmt: skip
    pid, cwd, mark, argv, typed = json.loads(done.stdout)
    assert done.returncode == 3 and pid not in (os.getpid(), done.args)
    assert (cwd, mark, argv, typed) == (str(tmp_path), "here", ["a", "b"], "typed")
    assert done.stderr == "to stderr\n"


def test_a_signal_ends_a_warm_process_as_it_ends_any_other(tmp_path: Path) -> None:
    script = tmp_path / "waits.py"
    script.write_text("import time\nprint('waiting', flush=True)\ntime.sleep(60)\n")
    child = warm_process.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, start_new_session=True
    )
    assert child.stdout is not None
    assert child.stdout.readline() == b"waiting\n"
    assert os.getpgid(child.pid) == child.pid  # a session of its own
    os.killpg(child.pid, signal.SIGTERM)
    assert child.wait(timeout=10) == -signal.SIGTERM


def test_settings_read_when_torch_loads_need_a_fresh_process() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 7)}
    with pytest.raises(ValueError, match="OMP_NUM_THREADS"):
        warm_process.run([sys.executable, "-m", "cockpit", "--help"], env=env)


def test_code_runs_as_python_c_and_a_named_server_serves_the_processes_a_child_starts() -> None:
    # the child starts a process of its own through live_process, as a bench run by a test does
    code = (
        "import os, sys, live_process\n"
        "done = live_process.run_process([sys.executable, '-c', 'import os; print(os.getppid())'],"
        " capture_output=True, text=True)\n"
        "print(sys.argv[1:], os.getppid(), done.stdout.strip())\n"
    )
    done = warm_process.run(
        [sys.executable, "-c", code, "x"], capture_output=True, text=True, timeout=60,
        cwd=Path(__file__).parent, env=warm_process.sharing_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    argv, parent, grandchild_parent = done.stdout.strip().rsplit(" ", 2)
    assert argv == "['x']"
    assert parent == grandchild_parent  # both forked from the one server: no new one started
