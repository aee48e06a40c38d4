"""The preset menu's rows and the question asked before a switch, without an app."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from pilot import run_pilot, scripted_app, settle, wait_for
from textual.pilot import Pilot

from cockpit.app.preset_switch import preset_menu_rows, switch_question
from cockpit.cli.command_line import parse_args
from cockpit.cli.launch import make_trainer, menu_data_check
from cockpit.screens.preset_menu import PresetRow, PresetScreen


def test_rows_say_which_data_is_here_and_which_preset_is_current() -> None:
    def data(name: str) -> tuple[bool, str, bool]:
        if name == "tiny":
            raise OSError("disk gone")
        return True, "", name == "default"

    rows, error = preset_menu_rows((), data, current="default")
    assert error == ""
    by_name = {r.name: r for r in rows}
    assert by_name["default"].current and by_name["default"].data_stand_in
    assert not by_name["tiny"].data_ok and by_name["tiny"].data_note == "cannot check data: disk gone"


def test_presets_that_cannot_be_listed_are_one_message_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(_dirs: object) -> None:
        raise PermissionError("presets dir: permission denied")

    monkeypatch.setattr("engine.config.presets.discover", broken)
    rows, error = preset_menu_rows(["/p"], lambda n: (True, ""), current="default")
    assert rows == [] and error == "presets dir: permission denied"


def test_the_question_names_the_switch_and_its_warnings() -> None:
    row = PresetRow("big", "", "built-in", False, "corpus.txt is missing")
    assert switch_question("tiny", "big", False, None, "") == "Start [b]big[/b]?"
    asked = switch_question("tiny", "big", True, row, "needs 80 GiB [of memory]")
    assert asked.startswith("Save a checkpoint of [b]tiny[/b], stop it, then start [b]big[/b]?")
    assert "⚠ data: corpus.txt is missing" in asked
    assert "⚠ needs 80 GiB \\[of memory]" in asked  # the warning's own brackets are not markup


def test_the_menu_finds_the_local_copy_its_preset_was_started_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COCKPIT_CACHE_DIR", str(tmp_path / "cache"))  # nothing downloaded here
    monkeypatch.delenv("COCKPIT_TINYSHAKESPEARE", raising=False)
    copy = tmp_path / "input.txt"
    copy.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 100)
    args = parse_args(["--preset", "shakespeare-char", "--data", str(copy)])
    app, _factory = scripted_app()

    app.switching.data_available = partial(menu_data_check, args)

    async def scenario(pilot: Pilot) -> dict[str, PresetRow]:
        await settle(pilot)
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, PresetScreen))
        return {row.name: row for row in app.screen.rows}

    rows = run_pilot(app, scenario)
    picked_again = rows["shakespeare-char"]
    assert picked_again.data_ok and "not downloaded" not in picked_again.data_note
    # a pick of it trains on that copy, as the menu said; another preset's data is its own
    assert make_trainer(args, "shakespeare-char", first=False).data_path == str(copy)
    assert make_trainer(args, "tiny", first=False).data_path is None
    assert "not downloaded" in rows["speedrun-shakespeare"].data_note
