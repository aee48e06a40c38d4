"""A run's changes of settings in its files: config.toml, and the replay of one.

`ConfigFile` keeps the run's config.toml: the starting values and, as `[[changes]]` tables, the
changes made so far, rewritten whole (atomically) whenever one is made. `ReplayPlan` is the
other side: the changes of the config.toml a run was started from, each made again at its
step. `start_config` is the starting values a checkpoint's run had.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.config.loading import config_from_dict, recorded_config
from engine.config.run_config import RunConfig
from engine.config.timeline import SettingsTimeline, TimedChange
from engine.config.to_toml import config_to_toml
from engine.events import Event, LrChanged, SettingsChanged
from engine.files import atomic_write_text

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


def start_config(state: Mapping[str, Any]) -> RunConfig:
    """The starting values of a checkpoint's run (config.toml's tables): kept in it since runs
    keep a timeline; a checkpoint from before has the config it was saved with."""
    raw = state.get("start_config") or state["config"]
    return config_from_dict(recorded_config(dict(raw)), source=str(state.get("_path", "checkpoint")))

