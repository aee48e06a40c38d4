"""The help screen's rows at 80x24: each on its own line(s), in the panels' words, plainly put.

The EMA row wrapped (joined to 't / g') and said '0.9/0.99' where the loss panel says
'ema:heavy'; the quit row said 'twice: yes, saving (a viewer detaches); thrice: unsaved'.
"""

from __future__ import annotations

from pilot import pilot_test
from textual.pilot import Pilot
from textual.widgets import Static

from cockpit.app.cockpit_app import CockpitApp
from cockpit.app.key_table import help_rows
from cockpit.screens.help_screen import HelpScreen
from cockpit.widgets.loss import SMOOTHING


def row(keys: str) -> str:
    (description,) = [d for k, d in help_rows() if k == keys]
    return description


def test_the_smoothing_row_says_what_the_loss_panel_says() -> None:
    description = row("m")
    for beta, name in SMOOTHING:
        assert name in description  # the panel's title says ema:light, ema:heavy, ema:off
        if beta:
            assert f"{beta:g}" in description


def test_the_quit_row_says_what_each_press_does_in_words() -> None:
    description = row("ctrl+c ctrl+q")
    assert "twice" not in description and "thrice" not in description
    lines = description.splitlines()
    assert lines[0].startswith("quit") and "asks" in lines[0]
    assert "again" in lines[1] and "checkpoint" in lines[1]
    assert any("detach" in line for line in lines)
    assert lines[-1].startswith("a third time") and "without the checkpoint" in lines[-1]


@pilot_test(size=(80, 24))
async def test_no_help_row_wraps_at_80x24(pilot: Pilot, app: CockpitApp) -> None:
    await pilot.press("question_mark")
    await pilot.pause(0.3)
    assert isinstance(app.screen, HelpScreen)
    wrapped = [
        str(static.render())
        for static in app.screen.query(".help-description").results(Static)
        if static.size.height > len(str(static.render()).splitlines())
    ]
    assert wrapped == []
