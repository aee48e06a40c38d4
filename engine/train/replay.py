"""A run's changes of settings, kept across its files: config.toml, resumes and replays.

`ConfigFile` keeps the run's config.toml: the starting values and, as `[[changes]]` tables, the
changes made so far, rewritten whole (atomically) whenever one is made. `ReplayPlan` is the
other side: the changes of the config.toml a run was started from, each made again at its
step. `resumed_settings` is what a resume's --set changed (a change by "resume" at the resume
step, so a replay makes it too); `start_config` the starting values a checkpoint's run had;
`settings_back` puts a checkpoint's settings in force again after a rollback to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config.live import (
    LIVE_SETTINGS,
    SettingsChange,
    SettingsTimeline,
    TimedChange,
    setting_value,
)
from engine.config.loading import config_from_dict, recorded_config
from engine.config.run_config import SECTIONS, RunConfig
from engine.config.to_toml import config_to_toml
from engine.events import Event, LrChanged, SettingsChanged
from engine.files import atomic_write_text

if TYPE_CHECKING:
    from engine.train.live import LiveSettings

REPLAY_HEADER = (
    "The configuration this run trained with, every key resolved.\n"
    "`cockpit train --preset THIS_FILE` starts the same run afresh (with the changes below,\n"
    "if any, at their steps); `cockpit train --resume RUN_DIR` continues this one."
)


class ConfigFile:
    """RUN_DIR/config.toml: `start` (the starting values) and `timeline` (the run's own,
    changed in place), written now and again after each change (a sink of rank 0)."""

    def __init__(self, path: Path, start: RunConfig, timeline: SettingsTimeline) -> None:
        self.path, self.start, self.timeline = path, start, timeline

    def write(self) -> None:
        """Replaced whole: a reader never sees half a file, a link planted there is replaced."""
        text = config_to_toml(self.start, header=REPLAY_HEADER, changes=self.timeline)
        atomic_write_text(self.path, text)

    def __call__(self, event: Event) -> None:
        if isinstance(event, (SettingsChanged, LrChanged)):  # recorded before announced
            self.write()


class ReplayPlan:
    """The changes a run started from a config.toml makes again, each once, at the boundary of
    its step. A checkpoint keeps those still to make: a resume goes on replaying, and a
    rollback makes again those made after the checkpoint."""

    def __init__(self, changes: Iterable[TimedChange] = ()) -> None:
        self.changes = list(changes)
        self.next = 0  # the first change not made yet

    def due(self, step: int) -> list[TimedChange]:
        """The changes to make at the boundary of `step` (those before it are past: skipped)."""
        due = []
        while self.next < len(self.changes) and self.changes[self.next].step <= step:
            change = self.changes[self.next]
            self.next += 1
            if change.step == step:
                due.append(change)
        return due

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the changes still to make."""
        return {"settings_planned": [c.record() for c in self.changes[self.next :]]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.changes = SettingsTimeline.from_records(state.get("settings_planned")).changes
        self.next = 0


def _flat(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {
        f"{section}.{f.name}": raw.get(section, {}).get(f.name)
        for section in SECTIONS
        for f in fields(SECTIONS[section])
        if isinstance(raw.get(section), dict)
    }


def resumed_settings(saved: Mapping[str, Any], cfg: RunConfig) -> dict[str, Any]:
    """The settings a resume changed: `cfg` (the config it trains with) against `saved` (the
    checkpoint's config), the corpus aside (its path may move; its content is checked apart)."""
    # the saved config with today's defaults filled in: a setting the checkpoint predates is
    # the value it was trained with (recorded_config) or the default, not a change
    filled = config_from_dict(recorded_config(dict(saved)), source="checkpoint").to_dict()
    before, after = _flat(filled), _flat(cfg.to_dict())
    return {
        key: value
        for key, value in after.items()
        if not key.startswith("data.") and key in before and before[key] != value
    }


def start_config(state: Mapping[str, Any]) -> RunConfig:
    """The starting values of a checkpoint's run (config.toml's tables): kept in it since runs
    keep a timeline; a checkpoint from before has the config it was saved with."""
    raw = state.get("start_config") or state["config"]
    return config_from_dict(recorded_config(dict(raw)), source=str(state.get("_path", "checkpoint")))


def settings_back(live: LiveSettings, state: Mapping[str, Any]) -> SettingsChanged | None:
    """After a rollback to the checkpoint `state`: the live settings it was saved with in force
    again (the changes made since are undone, without the mid-run rules: the run is back where
    they held) and its timeline the run's. The event that says so, or None when none differed."""
    saved = config_from_dict(recorded_config(dict(state["config"])), source="checkpoint")
    now, step = live.cfg.train, int(state["step"])
    if saved.train.batch_size != now.batch_size:
        # an out-of-memory retry has split the micro-batch since: the checkpoint's step, in
        # micro-batches of the running size (its sequences a step are what the config said)
        sequences = saved.train.batch_size * saved.train.grad_accum
        whole = sequences % now.batch_size == 0
        saved.train.grad_accum = sequences // now.batch_size if whole else now.grad_accum
        saved.train.batch_size = now.batch_size
    changes = {
        key: (setting_value(live.cfg, key), setting_value(saved, key))
        for key in LIVE_SETTINGS
        if setting_value(live.cfg, key) != setting_value(saved, key)
    }
    event = None
    if changes:
        event = live.apply(SettingsChange(step=step, changes=changes, config=saved), "rollback")
    live.load_state_dict(state.get("settings_changes"))  # the checkpoint's, not one more entry
    return event
