"""A run started from another run's config.toml makes that run's changes again, at their steps.

Each `[[changes]]` entry is decided as it was then: a `set` or an `lr_scale` by `live_change` with
the mid-run rules, a resume's entry as the resume decided it. `check_replay` walks the whole plan
before anything trains and refuses one that no longer holds in one line. Pure and torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config.live import (
    LR_SCALE,
    SettingsChange,
    canonical_key,
    live_change,
    refusal,
    setting_value,
)
from engine.config.loading import config_from_dict
from engine.config.run_config import ConfigError, RunConfig
from engine.config.timeline import SettingsTimeline, TimedChange

# who made the changes a resume made: the --set of `cockpit --resume` (or of `cockpit fork`)
RESUMED_BY = ("resume",)


@dataclass(frozen=True)
class ReplayedChange:
    """What one entry does at its step: a change of settings (None: none) and the LR
    multiplier set by hand (None: unchanged)."""

    change: SettingsChange | None
    lr_scale: float | None


def replayed_change(cfg: RunConfig, entry: TimedChange) -> ReplayedChange | str:
    """The entry `entry` made on `cfg` (the config in force at its step), or the one line
    why it cannot be made."""
    settings = dict(entry.settings)
    scale = settings.pop(LR_SCALE, None)
    if scale is not None and (
        isinstance(scale, bool)
        or not isinstance(scale, (int, float))
        or not math.isfinite(scale)
        or scale <= 0
    ):
        return f"{LR_SCALE}: expected a positive number (the LR multiplier), got {scale!r}"
    change: SettingsChange | str | None = None
    if settings:
        if entry.by in RESUMED_BY:
            change = resumed_change(cfg, settings, entry.step)
        else:
            change = live_change(cfg, settings, entry.step)
        if isinstance(change, str):
            return change.removeprefix("set refused: ")
    return ReplayedChange(change, None if scale is None else float(scale))


def resumed_change(cfg: RunConfig, settings: Mapping[str, Any], step: int) -> SettingsChange | str:
    """The --set of a resume at `step`, made again in a running run: any setting a running
    run can take (the mid-run rules are the resume's, which had none), none it is built with."""
    try:
        asked = {canonical_key(str(key)): value for key, value in settings.items()}
    except ConfigError as e:
        return str(e)
    for key in asked:
        if refusal(key) is not None:
            return (
                f"{key} was changed by a resume, which a run started from this file cannot do "
                f"at step {step}: make it a starting value (its table above) or delete it"
            )
    raw = cfg.to_dict()
    for key, value in asked.items():
        section, name = key.split(".", 1)
        raw[section][name] = value
    try:
        new = config_from_dict(raw, source="resume")
    except ConfigError as e:
        return str(e)
    if new.train.max_steps <= step:
        return f"train.max_steps={new.train.max_steps} must be more than {step}"
    changes = {
        key: (setting_value(cfg, key), setting_value(new, key))
        for key in asked
        if setting_value(cfg, key) != setting_value(new, key)
    }
    return SettingsChange(step=step, changes=changes, config=new)


def check_replay(cfg: RunConfig, changes: SettingsTimeline, source: str) -> None:
    """Refuse (ConfigError, one line naming the entry) a plan of changes that cannot be made
    from the starting values `cfg`: out of order, past the run's end, or refused at its step."""
    now, last = cfg, 0
    for number, entry in enumerate(changes.changes, 1):
        where = f"{source}: [[changes]] entry {number} (step {entry.step}, by {entry.by})"
        if entry.step < last:
            raise ConfigError(f"{where}: comes after a change at step {last}; the entries go oldest first")
        if entry.step >= now.train.max_steps:
            raise ConfigError(
                f"{where}: the run ends at step {now.train.max_steps} (train.max_steps), before "
                "this change; delete the entry or raise train.max_steps"
            )
        made = replayed_change(now, entry)
        if isinstance(made, str):
            raise ConfigError(f"{where}: {made}; fix or delete that entry to replay the run")
        if made.change is not None:
            now = made.change.config
        last = entry.step
