"""A RunConfig written back as TOML: the run directory's replayable `config.toml` (with the changes
made while it trained, as `[[changes]]`) and `cockpit presets show`. Every file it writes reads
back with `tomllib` into the same config.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from engine.config.run_config import SECTIONS, RunConfig
from engine.config.timeline import SettingsTimeline

CHANGES_HEADER = (
    "The changes made while the run trained, oldest first: from `step` on (they shape step\n"
    "step + 1 first), asked by `by`, these settings (lr_scale: the LR multiplier set by hand).\n"
    "The tables above are the starting values; a run started from this file makes the same\n"
    "changes at the same steps (a [[changes]] table deleted is a change not made)."
)


def toml_value(value: Any) -> str:
    """One TOML value. JSON's string escapes are all valid TOML basic-string escapes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # shortest round-tripping form: 0.001, 1e-05, 3.0
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def key_comment(meta: dict[str, Any]) -> str:
    """A key's help text with its allowed values, as shown above the key."""
    text = meta.get("help", "")
    if "choices" in meta:
        choices = ", ".join(repr(c) for c in meta["choices"])
        text = f"{text} (one of {choices})" if text else f"one of {choices}"
    return text


def config_to_toml(
    cfg: RunConfig,
    *,
    comments: bool = True,
    header: str = "",
    changes: SettingsTimeline | None = None,
) -> str:
    """The whole config as TOML, every key written (nothing left to a default that may change);
    with `comments`, each key's help text above it; `changes` (a run's timeline) after it."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [f"name = {toml_value(cfg.name)}", f"description = {toml_value(cfg.description)}"]
    for section in SECTIONS:
        lines += ["", f"[{section}]"]
        values = getattr(cfg, section)
        for f in fields(values):
            note = key_comment(dict(f.metadata)) if comments else ""
            if note:
                lines.append(f"# {note}")
            lines.append(f"{f.name} = {toml_value(getattr(values, f.name))}")
    if changes:
        lines += ["", *changes_to_toml(changes, comments=comments)]
    return "\n".join(lines) + "\n"


def changes_to_toml(changes: SettingsTimeline, *, comments: bool = True) -> list[str]:
    """A timeline as `[[changes]]` tables (lines), each change's settings one inline table."""
    lines = [f"# {line}" for line in CHANGES_HEADER.splitlines()] if comments else []
    for change in changes.changes:
        settings = ", ".join(
            f"{json.dumps(key)} = {toml_value(value)}" for key, value in change.settings.items()
        )
        lines += [
            "[[changes]]",
            f"step = {change.step}",
            f"by = {toml_value(change.by)}",
            f"settings = {{ {settings} }}" if settings else "settings = {}",
            "",
        ]
    return lines[:-1] if lines and not lines[-1] else lines
