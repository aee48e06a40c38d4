"""A changes file as a proposer: the candidate changes of a TOML file, tried in the file's order,
each once. A top-level setting is a change of its own (`"model.mlp" = "relu2"`); a list is a
range, each value a candidate (`optim.lr = [1e-3, 2e-3, 4e-3]`); a `[[change]]` table changes
several keys at once (with an optional `reason`, one of its keys may be a range)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cockpit.research.proposals import (
    Proposal,
    ResearchContext,
    change_text,
    check_change,
)
from engine.config import ConfigError, read_small_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROPOSED_BY = "changes file"


def _flat(table: dict[str, Any], where: str) -> dict[str, Any]:
    """`optim.lr = 1` (TOML reads it as a nested table) and `"optim.lr" = 1` alike: {"optim.lr": 1}."""
    made: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            for name, inner in value.items():
                if isinstance(inner, dict):
                    raise ConfigError(f"{where}: {key}.{name}: a setting is section.key = value")
                made[f"{key}.{name}"] = inner
        else:
            made[key] = value
    return made


def _expand(settings: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """One change, or one per value of its range (a list)."""
    ranges = [k for k, v in settings.items() if isinstance(v, list)]
    if len(ranges) > 1:
        raise ConfigError(
            f"{where}: {ranges[0]} and {ranges[1]} are both ranges; give one range per change "
            "(each value is one candidate)"
        )
    if not ranges:
        return [settings]
    key = ranges[0]
    if not settings[key]:
        raise ConfigError(
            f"{where}: {key} = []: an empty range; give its values, e.g. [1e-3, 2e-3]"
        )
    return [{**settings, key: value} for value in settings[key]]


def read_changes(
    path: Path, preset: str, base: Sequence[str] = (), presets_dirs: Sequence[str] = ()
) -> list[Proposal]:
    """The candidates of the changes file at `path`, each checked on `preset` with `base` (the
    search's `--set`s); ConfigError (one line naming the file, the candidate and the fix) for
    a file that cannot be read or a candidate that is not a valid change."""
    try:
        raw = tomllib.loads(read_small_text(path, "a changes file"))
    except FileNotFoundError:
        raise ConfigError(
            f"--changes {path}: no such file; give a TOML file of candidate changes"
        ) from None
    except IsADirectoryError:
        raise ConfigError(f"--changes {path}: a directory, not a TOML file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--changes {path}: not UTF-8 text; a changes file is TOML") from None
    except OSError as e:
        raise ConfigError(f"--changes {path}: cannot read it ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(
            f"--changes {path}: malformed TOML ({e}); fix the syntax at that line"
        ) from None
    tables = raw.pop("change", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"--changes {path}: change: expected [[change]] tables, one per change")
    found: list[tuple[dict[str, Any], str, str]] = []  # change, reason, where
    for key, value in _flat(raw, f"--changes {path}").items():
        where = f"--changes {path}"  # the messages name the key
        found += [(c, "", where) for c in _expand({key: value}, where)]
    for number, table in enumerate(tables, 1):
        reason = table.pop("reason", "")
        if not isinstance(reason, str):
            raise ConfigError(
                f"--changes {path}: change {number}: reason: expected a string in quotes"
            )
        where = f"--changes {path}: change {number}"
        settings = _flat(table, where)
        if not settings:
            raise ConfigError(f"{where}: no settings; add key = value lines, e.g. optim.lr = 0.002")
        found += [(c, reason, where) for c in _expand(settings, where)]
    if not found:
        raise ConfigError(
            f"--changes {path}: no candidate; add lines such as optim.lr = [1e-3, 2e-3] or [[change]] tables"
        )
    proposals = []
    for change, reason, where in found:
        why = check_change(preset, change, base, presets_dirs)
        if why is not None and "changes nothing" not in why:  # nothing new now may be later
            raise ConfigError(f"{where}: {why}")
        proposals.append(
            Proposal(change=change, reason=reason or f"from {path.name}", proposed_by=PROPOSED_BY)
        )
    return proposals


class ChangesFileProposer:
    """Each candidate of a changes file once, in its order: one the research log has already
    (a rerun continuing the search) is passed over."""

    def __init__(self, proposals: Sequence[Proposal]) -> None:
        self.proposals = list(proposals)

    @classmethod
    def from_file(
        cls, path: Path, preset: str, base: Sequence[str] = (), presets_dirs: Sequence[str] = ()
    ) -> ChangesFileProposer:
        return cls(read_changes(path, preset, base, presets_dirs))

    def propose(self, context: ResearchContext) -> Proposal | None:
        tried = {str(row.get("change", "")) for row in context.log_rows}
        for proposal in self.proposals:
            if change_text(proposal.change) not in tried:
                return proposal
        return None
