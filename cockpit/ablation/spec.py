"""What an ablation series is: a baseline preset, the changes measured against it (`--change
'KEY=VALUE ...'` or `[[change]]` tables of a TOML file), and what every run is measured to (a
target val loss, or a number of steps). Every setting is checked as `--set` checks it before
anything runs: a bad one is a one-line ConfigError.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config import ConfigError, load_preset, parse_override, read_small_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BASELINE = "baseline"
FINE_KEY = "eval.fine_interval"  # the cadence near a target (engine.train.cadence)
FINE_PER_INTERVAL = 10  # with a target, evaluations near it are 10 times as frequent
FILE_KEYS = (
    "preset", "target", "budget", "steps", "repeat_baseline", "name", "description", "settings", "change",
)  # fmt: skip
BUDGET_KEY = "train.time_budget"  # what --budget sets (engine.train.cadence.time_budget_note)
FULL_VAL_KEY = "eval.full_val"  # a budget's runs are compared on the whole val split
DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(s|m|h)")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600}


def plain_label(text: str) -> str:
    """A label as it may be printed: its control characters (a terminal's escape sequences,
    which could recolour, move or retitle the terminal it is printed on) written as escapes,
    `\\x1b` for ESC."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@dataclass(frozen=True)
class Change:
    """One change of the baseline: its label (the settings as given, or the TOML's `name`) and
    its settings, each `section.key=value` as `--set` takes it."""

    label: str
    settings: tuple[str, ...]
    source: str = field(default="--change", compare=False)  # who proposed it: --change, or its file


def parse_duration(text: str, where: str = "--budget") -> float:
    """`90s`, `5m`, `1.5h` in seconds; ConfigError (one line) for anything else."""
    match = DURATION.fullmatch(text.strip())
    seconds = float(match.group(1)) * UNIT_SECONDS[match.group(2)] if match else 0.0
    if not seconds > 0:
        raise ConfigError(f"{where} {text!r}: a training time with its unit, e.g. 90s, 5m or 1h")
    return seconds


def duration_text(seconds: float) -> str:
    """Seconds as --budget spells them: 300 as 5m, 90 as 90s."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True)
class AblationSpec:
    """A series: `preset` trained as is (the baseline, `repeat_baseline` times) and once with
    each change, every run with `settings` (`--set`) and to `target` (stops there) or `steps`."""

    preset: str
    changes: tuple[Change, ...] = ()
    target: float | None = None  # val loss each run stops at (train.stop_at_val)
    steps: int | None = None  # train.max_steps of every run
    budget: float | None = None  # seconds of training time of every run (train.time_budget)
    settings: tuple[str, ...] = ()  # --set: every run of the series
    repeat_baseline: int = 1
    name: str | None = None  # the series' directory under runs/ (default: from the spec)
    description: str = ""
    presets_dirs: tuple[str, ...] = field(default=(), compare=False)

    def measure(self) -> str:
        """What the runs are measured to, in words: "val 1.88" or "200 steps"."""
        if self.budget is not None:
            cap = f" (at most {self.steps} steps)" if self.steps is not None else ""
            return f"a training time of {duration_text(self.budget)}{cap}"
        if self.target is not None and self.steps is not None:
            return f"val {self.target:g} (at most {self.steps} steps)"
        if self.target is not None:
            return f"val {self.target:g}"
        if self.steps is not None:
            return f"{self.steps} steps"
        return "the preset's own steps"

    def common_settings(self) -> list[str]:
        """The settings every run of the series has, the baseline's included."""
        made = list(self.settings)
        if self.steps is not None:
            made.append(f"train.max_steps={self.steps}")
        if self.target is not None:
            made.append(f"train.stop_at_val={self.target!r}")
            made.extend(self.fine_cadence())
        if self.budget is not None:
            made.append(f"{BUDGET_KEY}={self.budget!r}")
            if not any(text.partition("=")[0] == FULL_VAL_KEY for text in self.settings):
                made.append(f"{FULL_VAL_KEY}=true")
        return made

    def fine_cadence(self) -> list[str]:
        """With a target, `eval.fine_interval` a tenth of the baseline's `eval.interval` (at
        least 1), so each run's crossing is seen within that many steps; none when `--set`
        gives it (0 turns it off) or the baseline has no periodic evaluation."""
        if any(text.partition("=")[0] == FINE_KEY for text in self.settings):
            return []
        try:
            interval = load_preset(self.preset, list(self.settings), list(self.presets_dirs)).eval.interval
        except ConfigError:  # check_spec says what is wrong with the preset or a setting
            return []
        return [f"{FINE_KEY}={max(1, interval // FINE_PER_INTERVAL)}"] if interval else []

    def identity(self) -> dict[str, Any]:
        """What makes two series the same one: a rerun of the same command finds its runs."""
        made = {
            "preset": self.preset,
            "target": self.target,
            "steps": self.steps,
            "settings": settled(self.settings),
        }
        if self.budget is not None:  # absent otherwise: the series of before keep their names
            made["budget"] = self.budget
        return made

    def series_name(self) -> str:
        """The directory name: `--name`, else `ablate-PRESET-HASH` of the whole spec."""
        if self.name:
            return self.name
        whole = {
            **self.identity(),
            "changes": [settled(c.settings) for c in self.changes],
            "repeat_baseline": self.repeat_baseline,
        }
        digest = hashlib.sha256(json.dumps(whole, sort_keys=True).encode()).hexdigest()[:8]
        return f"ablate-{Path(self.preset).stem}-{digest}"


def settled(settings: Sequence[str]) -> list[str]:
    """Settings as they end up: the last of each key, sorted (the order they were given in
    does not make another series)."""
    last = {text.partition("=")[0]: text for text in settings}
    return sorted(last.values())


def parse_change(text: str, where: str = "--change") -> Change:
    """`--change 'a.b=1 c.d=2'` as a Change; ConfigError (one line) for one that is no
    KEY=VALUE list. The values are checked against the preset by `check_spec`."""
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ConfigError(f"{where} {text!r}: {e}; quote a value with spaces as a=\"x y\"") from None
    if not words:
        raise ConfigError(
            f"{where} {text!r}: empty; give KEY=VALUE, e.g. --change optim.name=adamw "
            "(several keys in one change: --change 'a=1 b=2')"
        )
    settings = []
    for word in words:
        if "=" not in word or word.startswith("="):  # "=3": no key
            raise ConfigError(
                f"{where} {text!r}: {word!r} is not KEY=VALUE, e.g. optim.name=adamw "
                "(several keys in one change: --change 'a=1 b=2')"
            )
        settings.append(canonical_setting(word, f"{where} {text!r}"))
    return Change(label=plain_label(" ".join(words)), settings=tuple(settings))


def canonical_setting(text: str, where: str) -> str:
    """`text` as one spelling of it: its key in full and its value as TOML (`optim.lr=1e-3`
    and `lr=0.001` are both `optim.lr=0.001`, `optim.name=adamw` is `optim.name="adamw"`), so
    that a rerun finds the same runs however the command spells them; ConfigError for a key
    that is no setting (saying the closest one) or a value no setting takes."""
    try:
        section, name, value = parse_override(text)
        return f"{section}.{name}={toml_text(value)}"
    except ConfigError as e:
        # the engine's words are --set's ("--set: unknown key 'a'"); here the option is `where`
        text = str(e)
        for prefix in ("--set: ", "--set "):
            text = text.removeprefix(prefix)
        raise ConfigError(f"{where}: {text}") from None


def toml_text(value: Any) -> str:
    """A TOML value written back as the text `--set` reads (the file's values become settings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_text(v) for v in value) + "]"
    raise ConfigError(f"{value!r}: a setting's value is a number, true/false, a string or a list")


def flat_settings(table: dict[str, Any], where: str, skip: Sequence[str] = ()) -> list[str]:
    """A TOML table of settings (`"optim.name" = "adamw"` or `optim.name = "adamw"`, which
    TOML reads as a nested table) as `section.key=value` texts."""

    def setting(key: str, value: Any) -> str:
        try:
            text = toml_text(value)
        except ConfigError as e:  # a date, say: which file and change it is in
            raise ConfigError(f"{where}: {key}: {e}") from None
        return canonical_setting(f"{key}={text}", where)

    made = []
    for key, value in table.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            for name, inner in value.items():
                if isinstance(inner, dict):
                    raise ConfigError(f"{where}: {key}.{name}: a setting is section.key = value")
                made.append(setting(f"{key}.{name}", inner))
        else:
            made.append(setting(key, value))
    return made


def spec_from_file(path: Path) -> AblationSpec:
    """The series a TOML file describes; ConfigError (one line) for one that cannot be read or
    holds what a series has not."""
    try:
        raw = tomllib.loads(read_small_text(path, "a series file"))  # no FIFO, no /dev/zero
    except FileNotFoundError:
        hint = "" if path.suffix == ".toml" else f"; a baseline preset is --preset {path}"
        raise ConfigError(f"{path}: no such file; give the series' TOML file (see cockpit ablate --help){hint}") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: a directory, not a TOML file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; a series file is TOML") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: malformed TOML ({e}); fix the syntax at that line") from None
    unknown = [k for k in raw if k not in FILE_KEYS]
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (a series file has: {', '.join(FILE_KEYS)})")
    preset = raw.get("preset")
    if preset is not None and not isinstance(preset, str):
        raise ConfigError(f'{path}: preset: expected a preset name or .toml path in quotes, got {preset!r}')
    if not preset:
        raise ConfigError(f'{path}: no baseline: add preset = "NAME" (a preset name or .toml path)')
    settings = raw.get("settings", {})
    if not isinstance(settings, dict):
        raise ConfigError(f"{path}: settings: expected a table [settings] of key = value")
    changes_raw = raw.get("change", [])
    if not isinstance(changes_raw, list) or not all(isinstance(c, dict) for c in changes_raw):
        raise ConfigError(f"{path}: change: expected [[change]] tables, one per change")
    changes = []
    for number, table in enumerate(changes_raw, 1):
        label = table.get("name")
        if label is not None and (not isinstance(label, str) or not label.strip()):
            raise ConfigError(
                f"{path}: change {number}: name: expected its label in quotes, e.g. name = \"AdamW\", "
                f"got {label!r} (or drop name: the label is then its settings)"
            )
        where = f"{path}: change {label!r}" if isinstance(label, str) else f"{path}: change {number}"
        made = flat_settings(table, where, skip=("name",))
        if not made:
            raise ConfigError(f"{where}: no settings; add key = value lines, e.g. optim.name = \"adamw\"")
        shown = label if isinstance(label, str) else " ".join(shown_setting(t) for t in made)
        changes.append(Change(label=plain_label(shown), settings=tuple(made), source=str(path)))
    repeats = _number(raw, "repeat_baseline", int, path)
    return AblationSpec(
        preset=preset,
        changes=tuple(changes),
        target=_number(raw, "target", float, path),
        steps=_number(raw, "steps", int, path),
        budget=_budget(raw, path),
        settings=tuple(flat_settings(settings, f"{path}: settings")),
        repeat_baseline=1 if repeats is None else repeats,  # 0 is refused by check_spec, not made 1
        name=_text(raw, "name", path),
        description=_text(raw, "description", path) or "",
    )


def shown_setting(setting: str) -> str:
    """A setting as a label shows it (and the run's directory name): `optim.name="lion"` as
    `optim.name=lion`, as a --change is typed; a string with a space or quote stays quoted."""
    key, _, value = setting.partition("=")
    if value.startswith('"'):
        word = json.loads(value)
        if word and not any(c.isspace() or c in "\"'=" for c in word):
            return f"{key}={word}"
    return setting


def _number(raw: dict[str, Any], key: str, kind: type, path: Path) -> Any:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise ConfigError(f"{path}: {key}: expected {'an integer' if kind is int else 'a number'}, got {value!r}")
    return kind(value)


def _budget(raw: dict[str, Any], path: Path) -> float | None:
    """The file's `budget = "5m"` (or a number of seconds) in seconds."""
    value = raw.get("budget")
    if value is None:
        return None
    if isinstance(value, str):
        return parse_duration(value, f"{path}: budget")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(
            f'{path}: budget: a training time, e.g. budget = "5m" (or a number of seconds), got {value!r}'
        )
    return float(value)


def _text(raw: dict[str, Any], key: str, path: Path) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{path}: {key}: expected a string, got {value!r}")
    return value


def check_spec(spec: AblationSpec) -> None:
    """Everything a series needs before its first run: the preset loads, the target and steps
    make sense, every change is new and loads with the series' settings. ConfigError (one line)
    naming what to fix."""
    if spec.target is not None and not (math.isfinite(spec.target) and spec.target > 0):
        raise ConfigError(f"--target {spec.target:g}: a val loss above 0, e.g. --target 1.88")
    if spec.budget is not None and not (math.isfinite(spec.budget) and spec.budget > 0):
        raise ConfigError(f"--budget {spec.budget:g}: a training time above 0, e.g. --budget 5m")
    if spec.budget is not None and spec.target is not None:
        raise ConfigError(
            f"--budget {duration_text(spec.budget)} and --target {spec.target:g}: a series compares either "
            "the val bits per byte after the same training time (--budget) or the time to a val loss "
            "(--target); give one"
        )
    if spec.steps is not None and spec.steps < 1:
        raise ConfigError(f"--steps {spec.steps}: at least 1")
    if spec.repeat_baseline < 1:
        raise ConfigError(f"--repeat-baseline {spec.repeat_baseline}: at least 1 (2 or more measure the noise)")
    if not spec.changes:
        raise ConfigError("no change to measure: add --change KEY=VALUE (repeatable), or [[change]] tables in the file")
    if spec.name is not None and (
        not spec.name or "/" in spec.name or spec.name.startswith(".") or not spec.name.isprintable()
    ):  # printed in every progress line: no terminal escapes in it
        raise ConfigError(f"--name {spec.name!r}: a plain directory name, e.g. --name muon-vs-adamw")
    # what every run is measured to is the series' own: a run of its own steps or target is another series
    measured = {
        "train.max_steps": ("--steps", spec.steps),
        "train.stop_at_val": ("--target", spec.target),
        BUDGET_KEY: ("--budget", spec.budget),
    }
    for where, texts in [("--set", spec.settings), *((f"--change {c.label!r}", c.settings) for c in spec.changes)]:
        for text in texts:
            option, value = measured.get(text.partition("=")[0], ("", None))
            if value is not None:
                raise ConfigError(
                    f"{where}: {text.partition('=')[0]} is the series' {option} {value:g}, the same for every "
                    f"run; drop it, or change {option} (another series)"
                )
    load(spec, [], f"--preset {spec.preset}")  # the preset's own file first: its errors are its own
    common = spec.common_settings()
    baseline = load(spec, common, "--set" if spec.settings else "the baseline")
    periodic(spec, baseline, "--set" if spec.settings else f"--preset {spec.preset}")
    seen: dict[tuple[str, ...], str] = {}
    for change in spec.changes:
        keys = [text.partition("=")[0] for text in change.settings]
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:  # the last would win unsaid: 'a=1 a=2' reads as a change of a to 2
            raise ConfigError(f"--change {change.label!r}: {twice} is given twice; give each key once in a change")
        key = tuple(settled(change.settings))
        if key in seen:
            raise ConfigError(f"--change {change.label!r}: the same settings as {seen[key]!r}; give each change once")
        seen[key] = change.label
        changed = load(spec, [*common, *change.settings], f"--change {change.label!r}")
        periodic(spec, changed, f"--change {change.label!r}")
        if changed == baseline:
            raise ConfigError(
                f"--change {change.label!r}: changes nothing, the baseline {spec.preset} has it "
                "already; change another value (--repeat-baseline K runs the baseline again)"
            )


def periodic(spec: AblationSpec, config: dict[str, Any], what: str) -> None:
    """A run measured to a target needs evaluations on the way: it stops at the first at or
    below the target, and with none before its end it would train every step to reach it."""
    if spec.target is not None and not config["eval"]["interval"]:
        raise ConfigError(
            f"{what}: eval.interval is 0 (evaluated only at the end), so no run could stop at "
            f"--target {spec.target:g}; --set eval.interval=N evaluates every N steps"
        )


def load(spec: AblationSpec, settings: list[str], what: str) -> dict[str, Any]:
    """The config of the preset with `settings` (as a dict), or a ConfigError naming `what`."""
    try:
        return load_preset(spec.preset, settings, list(spec.presets_dirs)).to_dict()
    except ConfigError as e:
        text = str(e)
        if text.startswith("unknown preset") or "no such preset file" in text:
            raise ConfigError(f"--preset {spec.preset}: {text}") from None
        # "/path/preset.toml: optim.name: expected ..." is about this change's value
        head, sep, rest = text.partition(": ")
        if sep and (head.endswith(".toml") or head == spec.preset):
            text = rest
        raise ConfigError(f"{what}: {text.removeprefix('--set ')}") from None
