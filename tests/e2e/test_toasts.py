"""Toasts in a real terminal (tmux): every one goes when its time is up, none leaves a ghost."""

from __future__ import annotations

import time

from test_terminal import cockpit, pytestmark  # noqa: F401 - skipped without tmux
from tmux_driver import Tmux

TOAST_MARK = "▌"  # the left edge Textual draws on every toast


def test_no_toast_outlives_its_timeout_at_80x24(tmp_path):
    """Eight LR changes while paused: eight 4-second toasts, more than 24 rows hold, so
    Textual scrolls them; once they are gone, none may stay painted over the panels (a paused
    run repaints nothing by itself, so a ghost would stay for good)."""
    run_dir = tmp_path / "run"
    term = Tmux(cockpit(run_dir), width=80, height=24)
    try:
        term.wait_for("RUNNING")
        term.send("space")
        term.wait_for("PAUSED")
        for _ in range(8):
            term.send("+")
            time.sleep(0.1)
        term.wait_for("LR changed")
        # their timeout, and some slack for a loaded machine
        deadline = time.monotonic() + 4.0 + 3.0
        screen = term.screen()
        while ("LR changed" in screen or TOAST_MARK in screen) and time.monotonic() < deadline:
            time.sleep(0.2)
            screen = term.screen()
        assert "LR changed" not in screen and TOAST_MARK not in screen, screen
        time.sleep(0.5)  # gone, and nothing painted back
        screen = term.screen()
        assert "LR changed" not in screen and TOAST_MARK not in screen, screen
        assert "PAUSED" in screen
    finally:
        term.kill()
