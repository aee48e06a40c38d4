"""Switching presets from the app (`p`): the menu's rows and the question asked before a switch.

The menu shows, per preset, whether its data is here (or a stand-in corpus would be used); the
question names what the switch does to the current run and warns about the data and about a
preset far beyond this machine (the fit check, run off the UI thread by the app). Plain
functions of the presets found and the callbacks the CLI gives, so they are tested alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from textual.markup import escape

from cockpit.screens.preset_menu import PresetRow

# data_available(preset) -> (ok, note) or (ok, note, stand_in): see CockpitApp
DataAvailable = Callable[[str], tuple[Any, ...]]


def data_always_available(_preset: str) -> tuple[bool, str]:
    return True, ""


def preset_menu_rows(
    preset_dirs: Sequence[str], data_available: DataAvailable, current: str
) -> tuple[list[PresetRow], str]:
    """The menu's rows, and why the presets could not all be listed ("" when they could)."""
    from engine.config import discover

    try:
        found = discover(list(preset_dirs))
    except (ValueError, OSError) as e:  # a broken preset dir must not crash the menu
        return [], str(e)
    rows = []
    for name, info in found.items():
        try:
            ok, note, *more = data_available(name)
        except (ValueError, OSError) as e:  # unreadable data: said on its row
            ok, note, more = False, f"cannot check data: {e}", []
        rows.append(
            PresetRow(
                name,
                info.description,
                info.origin,
                ok,
                note,
                current=(name == current),
                data_stand_in=bool(more and more[0]),
            )
        )
    return rows, ""


def switch_question(
    current: str, name: str, running: bool, row: PresetRow | None, fit_warning: str
) -> str:
    """What the switch dialog asks (markup): the switch, then the data and fit warnings."""
    if running:
        msg = f"Save a checkpoint of [b]{current}[/b], stop it, then start [b]{name}[/b]?"
    else:
        msg = f"Start [b]{name}[/b]?"
    if row is not None and not row.data_ok:
        msg += f"\n\n[$warning]⚠ data: {row.data_note or 'not available'}[/]"
    elif row is not None and row.data_stand_in:
        msg += (
            f"\n\n[$warning]⚠ data: {escape(row.data_note)}. Picked here, {name} trains on "
            f"the Python docs; for your corpus quit and run: "
            f"cockpit --preset {name} --data PATH[/]"
        )
    if fit_warning:
        msg += f"\n\n[$warning]⚠ {escape(fit_warning)}[/]"
    return msg
