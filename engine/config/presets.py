"""Finding and loading presets: TOML files that describe a run, from the built-in `presets/`, the
user's directory (`$COCKPIT_PRESETS_DIR`, else `$XDG_CONFIG_HOME/cockpit/presets`) and each
`--presets-dir`, a later source winning a name clash. A preset may `extends = "other"`; `--set`
applies last. A run directory's config.toml is a preset too, with its `[[changes]]` to replay.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.config.loading import apply_overrides, config_from_dict, merge_tables, read_toml
from engine.config.replay import check_replay
from engine.config.run_config import ConfigError, RunConfig
from engine.config.timeline import SettingsTimeline

DEFAULT_PRESET = "default"


@dataclass(frozen=True)
class PresetInfo:
    name: str
    path: Path
    origin: str  # "built-in", "user" or "--presets-dir"
    description: str


def builtin_dir() -> Path:
    import presets

    return Path(presets.__file__).parent


def user_dir() -> Path:
    if os.environ.get("COCKPIT_PRESETS_DIR"):
        return Path(os.environ["COCKPIT_PRESETS_DIR"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "cockpit" / "presets"


def search_dirs(extra_dirs: list[str | Path] = ()) -> list[tuple[Path, str]]:
    dirs = [(builtin_dir(), "built-in"), (user_dir(), "user")]
    dirs += [(Path(d).expanduser(), "--presets-dir") for d in extra_dirs]
    return dirs


def discover(extra_dirs: list[str | Path] = ()) -> dict[str, PresetInfo]:
    """Every preset by name, the highest-priority one for each name, sorted by name."""
    found: dict[str, PresetInfo] = {}
    for directory, origin in search_dirs(extra_dirs):
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            try:
                description = str(read_toml(path).get("description", ""))
            except ConfigError as e:
                description = f"(invalid: {e})"
            found[path.stem] = PresetInfo(path.stem, path, origin, description)
    return dict(sorted(found.items()))


def preset_path(name_or_path: str, extra_dirs: list[str | Path] = ()) -> tuple[Path, str]:
    """The file a preset name (or path) stands for, and the preset's name."""
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        path = Path(name_or_path).expanduser()
        return path, path.stem
    presets = discover(extra_dirs)
    if name_or_path not in presets:
        known = ", ".join(presets) or "none"
        raise ConfigError(
            f"unknown preset '{name_or_path}' (known: {known}); give a name or a path to a .toml file"
        )
    return presets[name_or_path].path, name_or_path


def extends_chain(name_or_path: str, extra_dirs: list[str | Path] = ()) -> list[Path]:
    """The files a preset is built from: its own, then the one it extends, and so on."""
    chain: list[Path] = []
    name: object = name_or_path
    while isinstance(name, str):
        path, _ = preset_path(name, extra_dirs)
        if path in chain:  # load_preset reports the cycle; the chain stops at the repeat
            break
        chain.append(path)
        name = read_toml(path).get("extends")
    return chain


def _resolve_raw(
    name_or_path: str, extra_dirs: list[str | Path], chain: tuple[str, ...]
) -> tuple[dict[str, Any], str, str]:
    """The raw TOML dict of a preset with its `extends` chain merged in; also its name and path."""
    path, name = preset_path(name_or_path, extra_dirs)
    if str(path) in chain:
        raise ConfigError(f"{path}: 'extends' forms a cycle ({' -> '.join(chain)} -> {path})")
    raw = read_toml(path)
    parent = raw.get("extends")
    if parent is not None:
        if not isinstance(parent, str):
            raise ConfigError(f"{path}: extends: expected a preset name, got {parent!r}")
        parent_raw, _, _ = _resolve_raw(parent, extra_dirs, (*chain, str(path)))
        parent_raw.pop("description", None)
        raw = merge_tables(parent_raw, raw)
    return raw, name, str(path)


@dataclass(frozen=True)
class Replay:
    """A preset's starting values and the changes it makes at their steps (none for a preset
    that is not a run's config.toml)."""

    config: RunConfig
    changes: SettingsTimeline


def load_preset(
    name_or_path: str = DEFAULT_PRESET,
    overrides: list[str] = (),
    extra_dirs: list[str | Path] = (),
) -> RunConfig:
    """Load a preset by name or path, apply `extends` and `--set` overrides, and validate: the
    starting values (a run's config.toml's changes are load_replay's)."""
    return load_replay(name_or_path, overrides, extra_dirs, check=False).config


def load_replay(
    name_or_path: str = DEFAULT_PRESET,
    overrides: list[str] = (),
    extra_dirs: list[str | Path] = (),
    *,
    check: bool = True,
) -> Replay:
    """A preset's starting values (as load_preset) and its `[[changes]]`, checked from them
    step by step (`check`): a change that no longer holds is refused in one line."""
    raw, name, path = _resolve_raw(name_or_path, list(extra_dirs), ())
    raw.pop("extends", None)
    records = raw.pop("changes", None)
    raw = apply_overrides(raw, list(overrides))
    raw.setdefault("name", name)
    cfg = config_from_dict(raw, source=path)
    if records is not None and not isinstance(records, list):
        raise ConfigError(f"{path}: changes: expected [[changes]] tables, got {records!r}")
    changes = SettingsTimeline.from_records(records, source=path)
    if check:
        check_replay(cfg, changes, path)
    return Replay(cfg, changes)
