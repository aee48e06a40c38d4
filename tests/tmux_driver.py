"""A command in a real terminal: a detached tmux session to send keys to and read the screen of.

Shared by the end-to-end tests (tests/e2e, tests/engine/test_exit_reasons.py), which import it as
`tmux_driver` (pytest puts tests/ on sys.path for tests/conftest.py), and the soak bench, run
from the repository root as `python -m bench.soak`, which imports it as `tests.tmux_driver`.
It lives with the tests, not in the product: nothing in `cockpit` needs tmux.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from types import TracebackType

TMUX_INSTALLED = shutil.which("tmux") is not None


class Tmux:
    """`command` running in a new detached tmux session of `width` x `height` cells.

    Killing the session closes its pty: the command gets SIGHUP, as when an SSH link drops.
    `term` is the TERM the command sees (None: tmux's own). Each session has a tmux server of
    its own (`-L NAME`), so no other test's session, ending, can take its server down."""

    def __init__(
        self,
        command: str,
        width: int = 100,
        height: int = 30,
        *,
        prefix: str = "cockpit-e2e",
        term: str | None = "xterm-256color",
    ) -> None:
        self.name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        environment = ["-e", f"TERM={term}"] if term else []
        argv = self.argv("new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height),
                         *environment, command)  # fmt: skip
        for attempt in range(3):  # a loaded machine can refuse a fork: tried again
            started = subprocess.run(argv, capture_output=True, text=True)
            if started.returncode == 0:
                break
            time.sleep(0.5 * (attempt + 1))
        else:
            raise RuntimeError(f"tmux new-session failed: {started.stderr.strip()}")

    def argv(self, *args: str) -> list[str]:
        """A tmux command line addressed to this session's own server."""
        return ["tmux", "-L", self.name, *args]

    def screen(self) -> str:
        """The visible pane, as text."""
        out = subprocess.run(
            self.argv("capture-pane", "-p", "-t", self.name), capture_output=True, text=True
        )
        return out.stdout

    def send(self, *keys: str) -> None:
        """Keys in tmux's names: "space", "Escape", "q", "+"..."""
        subprocess.run(self.argv("send-keys", "-t", self.name, *keys), check=True)

    def wait_for(self, text: str, timeout: float = 60.0) -> str:
        """The screen once it shows `text`; fails with the last screen after `timeout` s."""
        deadline = time.monotonic() + timeout
        last = ""  # the last screen that showed anything: a session that ended shows nothing
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            last = screen if screen.strip() else last
            time.sleep(0.2)
        gone = subprocess.run(self.argv("has-session", "-t", self.name), capture_output=True)
        where = " (the session has ended)" if gone.returncode else ""
        raise AssertionError(f"{text!r} never appeared{where}; last screen:\n{last}")

    def kill(self) -> None:
        subprocess.run(self.argv("kill-server"), capture_output=True)

    def __enter__(self) -> Tmux:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.kill()
