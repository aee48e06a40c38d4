"""A run's timeline of settings changes: what it changed, from which step and by whom, oldest
first; in each checkpoint and in config.toml's `[[changes]]`, and replayed from there. Pure and
torch-free."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.config.run_config import ConfigError


@dataclass(frozen=True)
class TimedChange:
    """One change: from step `step` on (shaping step `step + 1` first), by `by`, these values."""

    step: int
    settings: dict[str, Any]
    by: str = "app"

    def record(self) -> dict[str, Any]:
        return {"step": self.step, "by": self.by, "settings": dict(self.settings)}


@dataclass
class SettingsTimeline:
    """Every change a run made, oldest first (a resume or rollback keeps those up to its
    checkpoint's step)."""

    changes: list[TimedChange] = field(default_factory=list)

    def add(self, step: int, settings: Mapping[str, Any], by: str = "app") -> TimedChange:
        change = TimedChange(step=step, settings=dict(settings), by=by)
        self.changes.append(change)
        return change

    def up_to(self, step: int) -> SettingsTimeline:
        """The changes a checkpoint at `step` was trained under."""
        return SettingsTimeline([c for c in self.changes if c.step <= step])

    def due(self, step: int) -> list[TimedChange]:
        """The changes that apply at `step` (a replay makes them there)."""
        return [c for c in self.changes if c.step == step]

    def __bool__(self) -> bool:
        return bool(self.changes)

    def state_dict(self) -> list[dict[str, Any]]:
        return [c.record() for c in self.changes]

    def load_state_dict(self, records: Iterable[Mapping[str, Any]] | None) -> None:
        """Take a checkpoint's (or config.toml's) records; None or [] (a file from before
        live settings) is an empty timeline."""
        self.changes = [timed_change(r) for r in records or ()]

    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]] | None, source: str = "changes"
    ) -> SettingsTimeline:
        timeline = cls()
        try:
            timeline.load_state_dict(records)
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(
                f"{source}: a [[changes]] entry needs step (an integer >= 0) and settings (a "
                f"table of key = value), got {e}"
            ) from None
        return timeline


def timed_change(record: Mapping[str, Any]) -> TimedChange:
    step = record["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step {step!r}")
    settings = record["settings"]
    if not isinstance(settings, Mapping):
        raise TypeError(f"settings {settings!r}")
    by = record.get("by", "app")
    return TimedChange(step=step, settings=dict(settings), by=str(by))
