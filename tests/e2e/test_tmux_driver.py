"""The tmux driver the end-to-end tests and the soak bench share: it shows what the command
prints, sends keys to it, and killing the session ends the command (SIGHUP)."""

from __future__ import annotations

import shlex
import time

import pytest
from tmux_driver import TMUX_INSTALLED, Tmux

pytestmark = pytest.mark.skipif(not TMUX_INSTALLED, reason="tmux is not installed")


def test_reads_the_screen_sends_keys_and_kill_hangs_up(tmp_path) -> None:
    hung_up = tmp_path / "hung-up"
    command = (
        f"trap 'touch {hung_up}; exit' HUP; echo ready; read line; echo got $line; "
        "while :; do sleep 0.1; done"
    )
    with Tmux(f"bash -c {shlex.quote(command)}", width=40, height=5) as term:
        term.wait_for("ready", timeout=10)
        term.send("hello", "Enter")
        assert "got hello" in term.wait_for("got hello", timeout=10)
        with pytest.raises(AssertionError, match="never appeared"):
            term.wait_for("not printed", timeout=0.5)
    deadline = time.monotonic() + 10
    while not hung_up.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert hung_up.exists()
