"""The README's start/attach walkthrough: its preset lasts, and what `cockpit start` leaves on
the terminal names no pid to kill once the app it opened has shown the run's end.

`cockpit start --preset tiny` ended in 6 s, so the walkthrough's `cockpit attach` met "no live
runs"; and after the app closed, the start report above its exit report still said
`stop: ... (or: kill -TERM PID)` for a process gone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tmux_driver import TMUX_INSTALLED, Tmux
from warm_pane import pane_command

from engine.config.presets import load_preset
from engine.data.preparation import data_available
from engine.data.tinyshakespeare import TINYSHAKESPEARE_ENV

REPO = Path(__file__).resolve().parents[2]
WALKTHROUGHS = [REPO / "README.md", REPO / "docs" / "guide" / "runs.md"]
LASTS_STEPS = 1000  # tiny's 100 steps end in seconds; the walkthrough needs minutes


def started_presets(page: Path) -> list[str]:
    """The preset of each `cockpit start` command in a page's code blocks ("default" without
    --preset)."""
    found = []
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("cockpit start"):
            named = re.search(r"--preset\s+(\S+)", line)
            found.append(named.group(1) if named else "default")
    return found


@pytest.mark.parametrize("page", WALKTHROUGHS, ids=lambda p: p.name)
def test_the_walkthrough_starts_a_run_that_lasts_and_needs_no_download(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TINYSHAKESPEARE_ENV, raising=False)  # the suite's own copy: not a user's
    presets = started_presets(page)
    assert presets, f"{page.name} has no `cockpit start` line"
    for name in presets:
        cfg = load_preset(name, [])
        assert cfg.train.max_steps >= LASTS_STEPS, (name, cfg.train.max_steps)
        usable, why = data_available(cfg.data, cache_dir=tmp_path)  # a fresh machine, offline
        assert usable, (name, why)


@pytest.mark.skipif(not TMUX_INSTALLED, reason="tmux is not installed")
def test_after_the_app_shows_the_run_s_end_no_pid_to_kill_is_left_on_the_terminal(
    tmp_path: Path,
) -> None:
    short = ["--preset", "tiny", "--set", "train.max_steps=20", "--no-telemetry"]
    start = pane_command(["-m", "cockpit", "start", *short])
    with Tmux(f"cd {tmp_path} && {start}; sleep 60", 120, 40) as term:
        term.wait_for("FINISHED", timeout=90)
        term.send("q")
        term.wait_for("Quit (y)", timeout=10)
        term.send("y")
        screen = term.wait_for("finished; to train on", timeout=30)
    assert "started in the background" in screen
    assert "q in an attached cockpit, then s" in screen
    assert "kill -TERM" not in screen, screen
