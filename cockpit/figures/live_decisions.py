"""The live settings as the app sees and decides them, without a screen: the run's config from its
RunStarted (`run_config`, updated by `config_after`), those a rollback puts back
(`settings_put_back`), a setting's texts, and each edited field checked by the engine's own
`live_change`, so a refusal here is the engine's line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from engine.config import (
    COOLDOWN,
    LIVE_SETTINGS,
    RunConfig,
    SettingsChange,
    config_from_dict,
    live_change,
    setting_value,
)
from engine.events import RunStarted

Curve = tuple[tuple[int, float], ...]
# section name -> its dataclass, as the run's config has them
_SECTIONS = {name: type(value) for name, value in vars(RunConfig()).items() if is_dataclass(value)}


def run_config(info: RunStarted | None) -> RunConfig | None:
    """The config the run trains with, as the app sees it: its RunStarted's (which the app
    keeps up to date with each SettingsChanged: `config_after`); None before the run started
    or for a config this version cannot read."""
    if info is None:
        return None
    try:
        return config_from_dict(dict(info.config), "the run's config")
    except (ValueError, TypeError, KeyError):  # ConfigError is a ValueError
        return None


def config_after(config: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """A RunStarted's config dict with a SettingsChanged's `changes` (key -> [old, new]) in force:
    the app's view of the run's settings after the acknowledgement."""
    raw = {
        section: dict(values) if isinstance(values, Mapping) else values
        for section, values in config.items()
    }
    for key, (_, new) in changes.items():
        section, _, name = key.partition(".")
        if section in _SECTIONS and name:
            raw.setdefault(section, {})[name] = new
    return raw


def settings_put_back(
    now: Mapping[str, Any] | None, saved: Mapping[str, Any] | None
) -> dict[str, tuple[Any, Any]]:
    """The live settings a rollback puts back (the engine restores those its checkpoint was
    saved with): each one that differs between the run's config `now` and the config in force
    when the checkpoint was `saved`, as (now, then). {} when either is not known here."""
    if now is None or saved is None:
        return {}
    try:
        current = config_from_dict(dict(now), "the run's config")
        then = config_from_dict(dict(saved), "the checkpoint's config")
    except (ValueError, TypeError, KeyError):  # ConfigError is a ValueError
        return {}
    pairs = {key: (setting_value(current, key), setting_value(then, key)) for key in LIVE_SETTINGS}
    return {key: pair for key, pair in pairs.items() if pair[0] != pair[1]}


class PutBack:
    """`settings_put_back`, asked again only when either config changed (the rollback question
    is asked a few times a second; a config is a new object at each change)."""

    def __init__(self) -> None:
        self._asked: tuple[object, object] | None = None
        self._answer: dict[str, tuple[Any, Any]] = {}

    def __call__(
        self, now: Mapping[str, Any] | None, saved: Mapping[str, Any] | None
    ) -> dict[str, tuple[Any, Any]]:
        if self._asked is None or self._asked[0] is not now or self._asked[1] is not saved:
            self._asked, self._answer = (now, saved), settings_put_back(now, saved)
        return self._answer


def field_help(key: str) -> str:
    """The config field's own help, then when a new value takes effect."""
    section, name = key.split(".", 1)
    meta = {f.name: f.metadata for f in fields(_SECTIONS[section])}.get(name, {})
    own = str(meta.get("help", ""))
    when = LIVE_SETTINGS.get(key, "")
    return f"{own} · {when}" if own and when else own or when


def shown_value(value: Any) -> str:
    """A value as `--set` writes it (what the field accepts back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return str(value)


def cooldown_refusal(cfg: RunConfig, step: int) -> str | None:
    """Why "cool down now" is not offered at `step` (not a WSD schedule, cooling down already),
    or None when it is."""
    answer = live_change(cfg, {COOLDOWN: 0}, step)
    return answer if isinstance(answer, str) else None


def cooldown_span(cfg: RunConfig) -> int:
    """The decay's length "cool down now" gives with no length: the configured fraction."""
    return max(1, round(cfg.train.max_steps * cfg.schedule.decay_fraction))


@dataclass(frozen=True)
class Decision:
    """What the fields ask for: each refused field's line, the refusal of them all together,
    and the change when everything is accepted."""

    refused: dict[str, str]
    refusal: str = ""
    change: SettingsChange | None = None
    asked: tuple[str, ...] = ()  # the edited keys, in the screen's order

    @property
    def settings(self) -> dict[str, Any]:
        """What to send: every edited key with its value as the config holds it."""
        if self.change is None:
            return {}
        return {key: setting_value(self.change.config, key) for key in self.asked}


def decide(cfg: RunConfig, step: int, edits: Mapping[str, str]) -> Decision:
    """Check each edited field alone (its own refusal line), then all of them together, as the
    engine will at the next step boundary."""
    refused = {}
    for key, text in edits.items():
        answer = live_change(cfg, {key: text}, step)
        if isinstance(answer, str):
            refused[key] = answer
    if refused:
        return Decision(refused)
    if not edits:
        return Decision({}, "nothing to change: type a new value in a field")
    answer = live_change(cfg, dict(edits), step)
    if isinstance(answer, str):
        return Decision({}, answer)
    if not answer.changes:
        return Decision({}, "nothing to change: every value typed is in force already")
    return Decision({}, change=answer, asked=tuple(edits))


def decide_cooldown(cfg: RunConfig, step: int, text: str) -> tuple[int, RunConfig] | str:
    """"Cool down now" with a length typed as `text` ("" = the configured fraction): the
    length to send and the config it gives, or the one-line refusal."""
    text = text.strip()
    try:
        length = int(text.replace("_", "")) if text else 0
    except ValueError:
        return f"'{text}': type the decay's length in steps, or nothing for the configured fraction"
    answer = live_change(cfg, {COOLDOWN: length}, step)
    if isinstance(answer, str):
        return answer
    return length, answer.config


def shown_refusal(refusal: str) -> str:
    """A refusal as the screen says it, under the field it is about."""
    return refusal.removeprefix("set refused: ").removeprefix("set: ")
