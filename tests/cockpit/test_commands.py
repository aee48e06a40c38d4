"""The command table (cockpit/app/key_table.py) against what the user gets: every command has a key, a
help line of its own and a palette entry, read from the running app rather than from the table."""

from __future__ import annotations

import functools
import re

import pytest
from pilot import pilot_test
from textual.actions import parse as parse_action
from textual.pilot import Pilot
from textual.widgets import Static

from cockpit.app.cockpit_app import CockpitApp
from cockpit.app.key_table import COMMANDS, LR_STEP, Command, help_rows
from cockpit.screens.help_screen import HelpScreen

# How the help writes Textual's key names; = and _ are + and - unshifted.
KEY_IN_HELP = {
    "question_mark": "?",
    "plus": "+",
    "minus": "-",
    "equals_sign": "+",
    "underscore": "-",
}


def bound_actions(cmd: Command) -> set[str]:
    return {action for action, _ in cmd.bound_as} or {cmd.action}


def help_row_keys(keys: str) -> set[str]:
    """The keys one help row lists: "s / e" -> {s, e}, "ctrl+c ctrl+q" -> both, "1-5" -> 1..5."""
    listed: set[str] = set()
    for token in re.split(r" / | ", keys):
        if m := re.fullmatch(r"(\d)-(\d)", token):
            listed |= {str(i) for i in range(int(m[1]), int(m[2]) + 1)}
        else:
            listed.add(token)
    return listed


def commands_missing_from_help(rows: list[tuple[str, str]]) -> list[str]:
    """The commands without a row that lists each of their keys as a whole key (not a substring:
    `c` is in `space` and `ctrl+c`) and, in the same row, their help text."""
    missing = []
    for cmd in COMMANDS:
        keys = {KEY_IN_HELP.get(k, k) for k in cmd.keys.split(",")}
        if not any(
            keys <= help_row_keys(row_keys) and cmd.help in description
            for row_keys, description in rows
        ):
            missing.append(cmd.action)
    return missing


@pilot_test()
async def test_every_command_is_bound_to_its_keys(app: CockpitApp) -> None:
    """Each key reaches its command on the main screen (tab and ctrl+p are Textual's own)."""
    active = app.screen.active_bindings
    for cmd in COMMANDS:
        for key in cmd.keys.split(","):
            assert key in active, f"{key}: {cmd.action}"
            # the binding that wins now (space: pause or resume, whichever applies; r rolls a
            # running run back and resumes a finished one)
            winner = active[key].binding
            sharing = [c for c in COMMANDS if key in c.keys.split(",")]
            assert winner.action in set().union(*map(bound_actions, sharing)), f"{key}: {winner.action}"
            assert winner.priority == cmd.priority or cmd.textual_binds, key
            # and every action the key stands for (space: pause and resume)
            on_key = {
                b.action
                for _, bindings in app.screen._binding_chain
                for b in bindings.key_to_bindings.get(key, [])
            }
            assert bound_actions(cmd) <= on_key, f"{key}: {on_key}"


@pilot_test()
async def test_help_screen_has_a_line_for_every_command(pilot: Pilot, app: CockpitApp) -> None:
    await pilot.press("question_mark")
    await pilot.pause()
    assert isinstance(app.screen, HelpScreen)
    keys = [str(w.render()) for w in app.screen.query(".help-key").results(Static)]
    descriptions = [str(w.render()) for w in app.screen.query(".help-description").results(Static)]
    shown = list(zip(keys, descriptions, strict=True))
    assert shown == help_rows()
    assert commands_missing_from_help(shown) == []


@pytest.mark.parametrize("dropped", range(len(help_rows())))
def test_the_help_check_notices_any_one_missing_line(dropped: int) -> None:
    rows = help_rows()
    del rows[dropped]
    assert commands_missing_from_help(rows) != []


@pilot_test()
async def test_every_command_is_in_the_palette(app: CockpitApp) -> None:
    """By its own entry, which runs its action with its arguments and names its key, or by the
    entry it names (ctrl+c's request_quit is the palette's Quit), where it does something in the
    run's state (a finished run's r is not offered in a live one). Textual's tab and ctrl+p (the
    palette itself) have none."""
    entries = {}
    for entry in app.get_system_commands(app.screen):
        callback, args = entry.callback, ()
        if isinstance(callback, functools.partial):
            callback, args = callback.func, tuple(callback.args)
        entries[entry.title] = (entry.help, callback.__name__, args)
    by_action = {cmd.action: cmd for cmd in COMMANDS}
    for cmd in COMMANDS:
        if cmd.textual_binds:
            continue
        entry_cmd = by_action[cmd.palette_as] if cmd.palette_as else cmd
        if not app.offered(entry_cmd.name):  # it would do nothing in this run's state
            assert entry_cmd.title not in entries, cmd.action
            continue
        assert entry_cmd.title in entries, cmd.action
        description, method, args = entries[entry_cmd.title]
        _, name, want_args = parse_action(entry_cmd.action)
        assert (method, args) == (f"action_{name}", want_args), entry_cmd.action
        first_key = entry_cmd.keys.split(",")[0]
        assert description.endswith(f"({KEY_IN_HELP.get(first_key, first_key)})"), description


def test_the_lr_step_labels_come_from_the_factor() -> None:
    step = f"{LR_STEP:g}"
    labels = {b.action: b.description for b in CockpitApp.BINDINGS}
    assert labels["lr_up"] == f"LR×{step}" and labels["lr_down"] == f"LR÷{step}"
    (lr_row,) = [d for k, d in help_rows() if k == "l / + / -"]  # joined: the help fits 80x24
    assert lr_row.endswith(f" / ×{step} / ÷{step}")
