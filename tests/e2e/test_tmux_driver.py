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


def test_one_session_ending_leaves_another_running() -> None:
    # each session has a server of its own: another test's session ending cannot take it down
    with Tmux("echo first; sleep 30", width=40, height=5) as first:
        with Tmux("echo second; sleep 30", width=40, height=5) as second:
            second.wait_for("second", timeout=10)
        assert "first" in first.wait_for("first", timeout=10)


def test_a_wait_on_an_ended_session_says_so_with_its_last_screen() -> None:
    with Tmux("echo bye; sleep 1", width=40, height=5) as term:
        with pytest.raises(AssertionError, match=r"the session has ended\); last screen:\n.*bye"):
            term.wait_for("never printed", timeout=4)
