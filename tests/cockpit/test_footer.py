"""The footer and the help at small sizes: whole keys only, nothing stray beside a dialog.

At 60x20 Textual's footer docked the palette key over the end of a row too wide for it, so the
last letter of 'q Quit' stuck out ('^p paletteu') and '? Help' hid under it; the help dialog,
over the footer's row, left a word's end beside its corner ('╯e').
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pilot import run_pilot, scripted_app, settle, wait_for
from run_dirs import three_runs
from textual.pilot import Pilot
from textual.widgets import DataTable, Footer

from cockpit.screens.runs_screen import RunsScreen
from cockpit.widgets.footer import KeyFooter, key_width, keys_that_fit


def screen_lines(pilot: Pilot) -> list[str]:
    return [strip.text for strip in pilot.app.screen._compositor.render_strips()]


def test_keys_that_fit_drop_the_palette_first_then_keys_from_the_end() -> None:
    assert keys_that_fit([5, 5, 5], 12, 27) == (3, True)
    assert keys_that_fit([5, 5, 5], 12, 26) == (3, False)
    assert keys_that_fit([5, 5, 5], 12, 14) == (2, False)
    assert keys_that_fit([5, 5, 5], None, 15) == (3, False)
    assert key_width("?", "Help", compact=True) == 7  # '? Help' and its margin
    assert key_width("?", "Help", compact=False) == 8  # ' ? Help '


@pytest.mark.parametrize("size", [(60, 20), (80, 24), (100, 30), (160, 48)])
def test_the_footer_row_shows_whole_keys(size: tuple[int, int]) -> None:
    app, factory = scripted_app()

    async def play(pilot: Pilot) -> tuple[str, list[str]]:
        await settle(pilot, factory)
        await pilot.pause()
        footer = app.main_screen.query_one(KeyFooter)
        labels = [str(key.render()).strip() for key in footer.children]
        return screen_lines(pilot)[-1], labels

    row, labels = run_pilot(app, play, size=size)
    assert "? Help" in labels, labels  # the help's key is never hidden
    # the row reads as the keys shown, each whole, nothing else
    assert row.replace("▏", " ").split() == " ".join(labels).replace("▏", " ").split(), row


def test_help_at_60x20_leaves_nothing_beside_its_corners() -> None:
    app, factory = scripted_app()

    async def play(pilot: Pilot) -> list[str]:
        await settle(pilot, factory)
        await pilot.press("question_mark")
        await pilot.pause(0.3)
        return screen_lines(pilot)

    lines = run_pilot(app, play, size=(60, 20))
    bottom = next(line for line in lines if "╰" in line)
    left, _, rest = bottom.partition("╰")
    _, _, right = rest.rpartition("╯")
    assert (left + right).strip() == "", bottom


@pytest.mark.parametrize("size", [(60, 20), (80, 24)])
def test_the_runs_screen_footer_shows_whole_keys(
    size: tuple[int, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`h` at 60 columns: the runs screen's footer had the same stray letters ('^p paletteu')."""
    monkeypatch.chdir(tmp_path)
    three_runs(Path("runs"))
    app, factory = scripted_app()

    async def play(pilot: Pilot) -> tuple[str, list[str]]:
        await settle(pilot, factory)
        await pilot.press("h")
        await wait_for(pilot, lambda: isinstance(app.screen, RunsScreen))
        screen = app.screen
        await wait_for(pilot, lambda: screen.query_one(DataTable).row_count == 3)
        await pilot.pause(0.2)
        footer = screen.query_one(Footer)
        labels = [str(key.render()).strip() for key in footer.children]
        return screen_lines(pilot)[-1], labels

    row, labels = run_pilot(app, play, size=size)
    assert "esc Back" in labels, labels  # the way out is never hidden
    assert row.replace("▏", " ").split() == " ".join(labels).replace("▏", " ").split(), row
