"""docs/guide/live-settings.md lists what the engine decides: every live setting with the words
of its help, and every setting it refuses with its reason."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from engine.config.live import COOLDOWN, LIVE_SETTINGS, refusal
from engine.config.run_config import SECTIONS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "live-settings.md"


def rows(heading: str) -> dict[str, str]:
    """The first column (backquoted names) -> the second, of the table under `heading`."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index(f"\n## {heading}\n") :]
    section = section[: section.find("\n## ", 1)]
    table = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            names, what = (cell.strip() for cell in line.strip("|").split("|")[:2])
            for name in names.split(", "):
                table[name.strip("`")] = what
    return table


def test_every_live_setting_is_listed_with_its_help() -> None:
    listed = rows("What can change")
    assert set(listed) == {*LIVE_SETTINGS, COOLDOWN}
    assert all(listed[key] == help for key, help in LIVE_SETTINGS.items())


def test_every_setting_refused_is_listed_with_its_reason() -> None:
    listed = rows("What cannot change, and why")
    for section, kind in SECTIONS.items():
        for f in fields(kind):
            key = f"{section}.{f.name}"
            why = refusal(key)
            if why is None:
                continue
            name = f"{section}.*" if f"{section}.*" in listed else key
            assert name in listed, key
            shown = listed[name].replace("`", "")
            assert shown in why, (key, shown, why)
