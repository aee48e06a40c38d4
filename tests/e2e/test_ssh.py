"""cockpit over a real SSH connection: an sshd of the test's own on 127.0.0.1, an `ssh -tt` client
in tmux (a real terminal at both ends), and the client killed to drop the link, as a network
does. The remote command runs under a stand-in for a login shell that passes the hang-up on to
its job (as bash does) and records the job's exit status, which the terminal can no longer show.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from tiny import set_args, tiny_overrides
from tmux_driver import TMUX_INSTALLED, Tmux

from engine.control.live_runs import probe

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_INSTALLED = all(shutil.which(tool) for tool in ("ssh", "ssh-keygen")) and os.access(
    SSHD, os.X_OK
)
pytestmark = [
    pytest.mark.skipif(not TMUX_INSTALLED, reason="tmux is not installed"),
    pytest.mark.skipif(
        not SSH_INSTALLED, reason="openssh-server and openssh-client are not installed"
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="the test's sshd logs in as root: run as root"),
]

REPO = Path(__file__).resolve().parents[2]
PY = shlex.quote(sys.executable)
# The login shell's part: SIGHUP (the link dropped) goes on to the job; its status is kept.
LOGIN_SHELL = """\
import signal, subprocess, sys
job = subprocess.Popen(sys.argv[2:])
signal.signal(signal.SIGHUP, lambda *_: job.send_signal(signal.SIGHUP))
status = job.wait()
open(sys.argv[1], "w").write(str(status))
"""


class SshServer:
    """sshd on 127.0.0.1 on a free port, with a host key, a client key and a config of its own
    in `home`; `command(remote)` is the ssh client's command line to run `remote` there."""

    def __init__(self, home: Path) -> None:
        home.mkdir()
        self.home = home
        for key in ("host_key", "client_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / key)], check=True
            )
        shutil.copy(home / "client_key.pub", home / "authorized_keys")
        self.port = free_port()
        (home / "sshd_config").write_text(
            f"ListenAddress 127.0.0.1\nPort {self.port}\nHostKey {home / 'host_key'}\n"
            f"AuthorizedKeysFile {home / 'authorized_keys'}\nPidFile {home / 'sshd.pid'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "PrintMotd no\nPrintLastLog no\n"
        )
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        self.log = open(home / "sshd.log", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(home / "sshd_config")], stderr=self.log
        )
        wait(self.listening, 10, lambda: (home / "sshd.log").read_text())

    def listening(self) -> bool:
        assert self.process.poll() is None, (self.home / "sshd.log").read_text()
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            return True
        except OSError:
            return False

    def command(self, remote: str) -> str:
        """`ssh -tt ... root@127.0.0.1 REMOTE`, as a shell command line."""
        return shlex.join(
            ["ssh", "-tt", "-F", "/dev/null", "-i", str(self.home / "client_key"),
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-p", str(self.port),
             "root@127.0.0.1", remote]
        )  # fmt: skip

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.log.close()


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[SshServer]:
    server = SshServer(tmp_path / "sshd")
    try:
        yield server
    finally:
        server.stop()
        end_remote_jobs(tmp_path)


def end_remote_jobs(tmp_path: Path) -> None:
    """A remote job that never ended (a failed test) must not outlive it: the processes whose
    command line names `tmp_path`, bar the headless run a viewer attached to (`live` ends it)."""
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or ())
        if str(tmp_path) in line and "--headless" not in line and process.pid != os.getpid():
            try:
                process.kill()
            except psutil.Error:
                pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(condition: Callable[[], bool], timeout_s: float, why: Callable[[], str] = str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out: {why()}"
        time.sleep(0.1)


def remote_job(tmp_path: Path, argv: str, shell: str = "passes") -> tuple[str, Path]:
    """The remote command line running `python ARGV` (a shell line) in `tmp_path` with this
    test's environment, and the file its exit status will be in. The login shell `passes` the
    hang-up on to its job, as bash does, or `keeps` it (a wrapper's `trap`): then no SIGHUP
    reaches the job, only a terminal gone."""
    status = tmp_path / "status"
    # sshd gives the session a fresh environment: the test's own settings go along
    names = (
        "COCKPIT_CACHE_DIR",
        "XDG_CONFIG_HOME",
        "COCKPIT_TINYSHAKESPEARE",
        "TIKTOKEN_CACHE_DIR",
    )
    env = [f"{n}={os.environ[n]}" for n in names if n in os.environ]
    job = f"env {shlex.join([*env, f'PYTHONPATH={REPO}', 'LANG=C.UTF-8'])} {PY} {argv}"
    if shell == "passes":
        login_shell = tmp_path / "login_shell.py"
        login_shell.write_text(LOGIN_SHELL)
        run = f"{PY} {shlex.quote(str(login_shell))} {shlex.quote(str(status))} {job}"
    else:  # bash runs the trap once its job has ended, then writes the job's status
        run = f"trap : HUP; {job}; echo $? > {shlex.quote(str(status))}"
    return f"cd {shlex.quote(str(tmp_path))} && {run}", status


def drop_the_link(term: Tmux) -> None:
    """SIGKILL the ssh client in `term`: the connection drops with no goodbye."""
    pane = int(subprocess.run(
        term.argv("display-message", "-p", "-t", term.name, "#{pane_pid}"),
        capture_output=True, text=True, check=True,
    ).stdout)  # fmt: skip
    shell = psutil.Process(pane)
    clients = [p for p in (shell, *shell.children(recursive=True)) if p.name() == "ssh"]
    assert clients, "no ssh client in the pane"
    for client in clients:
        client.send_signal(signal.SIGKILL)


def exit_status(status: Path, timeout_s: float = 20) -> int:
    wait(status.exists, timeout_s, lambda: "the remote job never ended")
    return int(status.read_text())


@pytest.mark.parametrize("shell", ["passes", "keeps"])
def test_a_viewer_whose_ssh_link_drops_leaves_quietly_and_the_run_goes_on(
    tmp_path: Path, sshd: SshServer, live, shell: str
) -> None:
    """`cockpit attach` over SSH, the link dropped: status 0, and the run trains on without it.
    It was 120 when the hang-up reached it (the exit report's line hit EIO on the gone
    terminal, then a traceback), and it never ended when it did not (reading end-of-file from
    the gone terminal at full CPU)."""
    argv = f"-m cockpit attach {shlex.quote(str(live.run_dir))}"
    remote, status = remote_job(tmp_path, argv, shell)
    with Tmux(sshd.command(remote), 120, 36) as term:
        term.wait_for("RUNNING", timeout=60)
        wait(lambda: len(probe(live.run_dir).viewers) == 1, 30)
        drop_the_link(term)
        assert exit_status(status) == 0
    wait(lambda: not probe(live.run_dir).viewers, 10)
    before = probe(live.run_dir).step
    wait(lambda: probe(live.run_dir).step > before, 30)  # the run did not stop with its viewer


def test_the_app_whose_ssh_link_drops_saves_the_step_it_was_at(
    tmp_path: Path, sshd: SshServer
) -> None:
    run_dir = tmp_path / "run"
    overrides = tiny_overrides("train.max_steps=1000000", "eval.interval=0", "sample.interval=0")
    argv = shlex.join(
        [
            "-m",
            "cockpit",
            "--preset",
            "tiny",
            "--no-telemetry",
            "--run-dir",
            str(run_dir),
            *set_args(overrides),
        ]
    )
    # a shell that keeps the hang-up: the app finds its terminal gone by itself
    remote, status = remote_job(tmp_path, argv, shell="keeps")
    metrics = run_dir / "metrics.jsonl"

    def records() -> list[dict]:
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        return [json.loads(line) for line in lines if line.endswith("}")]

    with Tmux(sshd.command(remote), 120, 36) as term:
        term.wait_for("RUNNING", timeout=60)
        wait(lambda: sum(r["kind"] == "step" for r in records()) >= 20, 60)
        drop_the_link(term)
        assert exit_status(status, 60) == 0
    steps = [r["step"] for r in records() if r["kind"] == "step"]
    saved = sorted(run_dir.glob("ckpt-*.pt"))
    assert saved, "a dropped link must leave a checkpoint"
    assert int(saved[-1].stem.split("-")[1]) == steps[-1], "the checkpoint is at the last step run"
    final = [r for r in records() if r["kind"] == "state"][-1]
    assert (final["state"], final["reason"], final["step"]) == ("stopped", "SIGHUP", steps[-1])
