"""Building a RunConfig from plain tables: TOML presets, stored configs and `--set` overrides.

Each value is checked against its field's type and range, then the keys that depend on each
other; every error names the file, the key and what was expected, in one line, so a user can
fix it without a traceback. A stored config is read with the settings it predates filled in as
they were then (`recorded_config`).
"""

from __future__ import annotations

import difflib
import math
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from engine.config.run_config import SECTIONS, TOP_LEVEL_KEYS, ConfigError, RunConfig
from engine.config.user_files import read_small_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _type_name(tp: Any) -> str:
    if get_origin(tp) is list:
        return "a list of strings"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        tp, str(tp)
    )


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check a TOML value against a field type; ints are accepted where floats are expected."""
    if get_origin(tp) is list:
        (item,) = get_args(tp)
        if isinstance(value, list) and all(isinstance(v, item) for v in value):
            return list(value)
    elif tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    elif tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    elif tp is bool and isinstance(value, bool):
        return value
    elif tp is str and isinstance(value, str):
        return value
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")


def _check_range(value: Any, meta: dict[str, Any], where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if "choices" in meta and value not in meta["choices"]:
        choices = ", ".join(repr(c) for c in meta["choices"])
        raise ConfigError(f"{where}: expected one of {choices}, got {value!r}")
    if "min" in meta and value < meta["min"]:
        raise ConfigError(f"{where}: expected a value >= {meta['min']}, got {value!r}")
    if "min_excl" in meta and value <= meta["min_excl"]:
        raise ConfigError(f"{where}: expected a value > {meta['min_excl']}, got {value!r}")
    if "max" in meta and value > meta["max"]:
        raise ConfigError(f"{where}: expected a value <= {meta['max']}, got {value!r}")
    if "below" in meta and value >= meta["below"]:
        raise ConfigError(f"{where}: expected a value < {meta['below']}, got {value!r}")


# Where a user reads every key, for an unknown one with none close to it: the list is too long
# for a message (81 keys), and `presets show` writes each key with its help.
EVERY_KEY = "every key, with its help: cockpit presets show default"


def _unknown_key(
    key: str, known: list[str], where: str, spelled: dict[str, list[str]] | None = None
) -> ConfigError:
    """`spelled`: the names to match `key` against, each with the keys it stands for (a bare
    --set key is matched against the names in the sections, and said as section.name)."""
    spelled = spelled or {k: [k] for k in known}
    close = [k for name in difflib.get_close_matches(key, list(spelled), n=3) for k in spelled[name]]
    close = list(dict.fromkeys(close))[:3]
    if close:
        said = [repr(k) for k in close]
        hint = f"did you mean {' or '.join([', '.join(said[:-1]), said[-1]] if len(said) > 2 else said)}?"
    elif len(known) <= 12:
        hint = f"known keys: {', '.join(known)}"
    else:
        hint = f"no key is like it; {EVERY_KEY}"
    return ConfigError(f"{where}: unknown key '{key}' ({hint})")


def _build_section(cls: type, table: Any, where: str) -> Any:
    if not isinstance(table, dict):
        raise ConfigError(
            f"{where}: expected a table like [{where.rsplit(' ', 1)[-1]}], got {table!r}"
        )
    hints = get_type_hints(cls)
    by_name = {f.name: f for f in fields(cls)}
    values = {}
    for key, raw in table.items():
        if key not in by_name:
            raise _unknown_key(key, list(by_name), where)
        meta = by_name[key].metadata
        if isinstance(raw, bool) and "from_bool" in meta:  # a switch that became a choice
            raw = meta["from_bool"][raw]
        value = _coerce(raw, hints[key], f"{where}.{key}")
        _check_range(value, meta, f"{where}.{key}")
        values[key] = value
    return cls(**values)


# Settings added after runs were first recorded, with the value a run had before they existed:
# a stored config without one was trained that way, whatever today's default is.
RECORDED_DEFAULTS: dict[tuple[str, str], Any] = {
    ("model", "vocab_multiple"): 1,  # before padding, the head had the tokenizer's rows exactly
}


def recorded_config(raw: dict[str, Any]) -> dict[str, Any]:
    """A config a run stored (in a checkpoint or its config.json) with the settings it predates
    filled in as they were then, so its weights rebuild in the shape they were saved in."""
    filled = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for (section, name), value in RECORDED_DEFAULTS.items():
        table = filled.setdefault(section, {})
        if isinstance(table, dict):
            table.setdefault(name, value)
    return filled


def config_from_dict(raw: dict[str, Any], source: str = "config") -> RunConfig:
    """Build and validate a RunConfig from nested dicts; errors start with `source`."""
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key in SECTIONS:
            kwargs[key] = _build_section(SECTIONS[key], value, f"{source}: {key}")
        elif key in ("name", "description"):
            kwargs[key] = _coerce(value, str, f"{source}: {key}")
        elif key == "extends":
            continue  # resolved by the preset loader
        else:
            raise _unknown_key(key, [*TOP_LEVEL_KEYS, *SECTIONS], source)
    cfg = RunConfig(**kwargs)
    validate(cfg, source)
    return cfg


def validate(cfg: RunConfig, source: str = "config") -> None:
    """Checks that involve more than one key."""
    m = cfg.model
    if m.n_embd % m.n_head:
        raise ConfigError(
            f"{source}: model.n_embd ({m.n_embd}) must be divisible by model.n_head ({m.n_head})"
        )
    if m.recompute_blocks > m.n_layer:
        raise ConfigError(
            f"{source}: model.recompute_blocks ({m.recompute_blocks}) exceeds model.n_layer "
            f"({m.n_layer}); 0 recomputes every block"
        )
    if 2 * m.value_embeds > m.n_layer:
        raise ConfigError(
            f"{source}: model.value_embeds ({m.value_embeds}) needs {2 * m.value_embeds} blocks "
            f"(each table feeds one of the first and one of the last), model.n_layer is {m.n_layer}"
        )
    if m.unet_skips and m.n_layer < 2:
        raise ConfigError(f"{source}: model.unet_skips needs at least 2 blocks (model.n_layer is 1)")
    if m.pos_emb == "rotary" and (m.n_embd // m.n_head) % 2:
        raise ConfigError(f"{source}: rotary embeddings need an even head size (n_embd / n_head)")
    if cfg.schedule.min_lr > cfg.optim.lr:
        raise ConfigError(
            f"{source}: schedule.min_lr ({cfg.schedule.min_lr:g}) must not exceed optim.lr ({cfg.optim.lr:g})"
        )
    if cfg.schedule.decay_start >= cfg.train.max_steps:
        raise ConfigError(
            f"{source}: schedule.decay_start ({cfg.schedule.decay_start}) must be below "
            f"train.max_steps ({cfg.train.max_steps}); 0 starts the decay from decay_fraction"
        )
    _validate_shape_schedule(cfg, source)
    if not cfg.sample.prompts:
        raise ConfigError(f'{source}: sample.prompts must hold at least one prompt ("\\n" is fine)')


def split_micro_batch(batch_size: int, grad_accum: int, batch_start: int) -> tuple[int, int] | None:
    """(micro-batch, accumulation) a batch-size schedule grows to when `batch_start` is larger
    than the micro-batch: the micro-batch an out-of-memory retry split, put back together (a run
    at 8 x 1 with a start of 6, halved to 4 x 2, grows to 8 x 1, its 6 sequences at step 0 as
    3 + 3). The fewest of the accumulation's micro-batches that hold the start; None when all
    of them together do not (the start is then larger than a step)."""
    if batch_start <= batch_size:
        return batch_size, grad_accum
    for k in range(2, grad_accum + 1):
        if grad_accum % k == 0 and batch_size * k >= batch_start:
            return batch_size * k, grad_accum // k
    return None


def _validate_shape_schedule(cfg: RunConfig, source: str) -> None:
    """The batch-size schedule and the sequence-length warmup: each a start with its ramp,
    growing up to the configured size."""
    t = cfg.train
    batch_key, batch_final = "train.batch_size", t.batch_size
    if t.grad_accum > 1 and t.batch_start > t.batch_size:
        # a micro-batch split since the run started (an out-of-memory retry halves it and
        # doubles the accumulation): the ramp grows to it put back together (split_micro_batch),
        # and the checkpoint's config must resume
        batch_key, batch_final = "train.batch_size x train.grad_accum", t.batch_size * t.grad_accum
    ramps = (
        ("batch_start", t.batch_start, "batch_ramp_steps", t.batch_ramp_steps,
         batch_key, batch_final, "the micro-batch at step 0"),
        ("seq_start", t.seq_start, "seq_warmup_steps", t.seq_warmup_steps,
         "model.block_size", cfg.model.block_size, "the sequence length at step 0"),
    )  # fmt: skip
    for start_key, start, ramp_key, ramp, final_key, final, what in ramps:
        if start > final:
            raise ConfigError(
                f"{source}: train.{start_key} ({start}) must not exceed {final_key} ({final}), "
                "the size it grows to"
            )
        if start and not ramp:
            raise ConfigError(
                f"{source}: train.{start_key} needs train.{ramp_key} > 0, the steps it grows over"
            )
        if ramp and not start:
            raise ConfigError(f"{source}: train.{ramp_key} needs train.{start_key} ({what})")


# ---------------------------------------------------------------------------------------------
# --set key=value overrides


def parse_override(text: str) -> tuple[str, str, Any]:
    """Parse 'section.key=value' (or 'key=value' when the key is unique) into (section, key, value).

    The value is read as a TOML value, so 3e-4, true, "text" and ["a", "b"] all work; a bare word
    that is not valid TOML is taken as a string (so --set data.source=tinyshakespeare works).
    """
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, for example --set optim.lr=3e-4")
    key, _, value_text = text.partition("=")
    key = key.strip()
    if "." in key:
        section, _, name = key.partition(".")
        if section not in SECTIONS:
            raise _unknown_key(section, list(SECTIONS), f"--set {key}")
    else:
        owners = [s for s, cls in SECTIONS.items() if key in {f.name for f in fields(cls)}]
        if len(owners) != 1:
            if owners:
                options = " or ".join(f"{s}.{key}" for s in owners)
                raise ConfigError(f"--set {key}: ambiguous key, write {options}")
            every = [f"{s}.{f.name}" for s, cls in SECTIONS.items() for f in fields(cls)]
            spelled: dict[str, list[str]] = {k: [k] for k in every}  # `optim`: optim.lr
            for qualified in every:
                spelled.setdefault(qualified.partition(".")[2], []).append(qualified)
            raise _unknown_key(key, every, "--set", spelled)
        section, name = owners[0], key
    if name not in {f.name for f in fields(SECTIONS[section])}:
        raise _unknown_key(name, [f.name for f in fields(SECTIONS[section])], f"--set {section}")
    try:
        value = tomllib.loads(f"v = {value_text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = value_text.strip()
    return section, name, value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of a raw preset dict with --set overrides applied."""
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    for text in overrides:
        section, name, value = parse_override(text)
        merged.setdefault(section, {})[name] = value
    return merged


def merge_tables(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """Child keys override base keys, one level deep per section (used by `extends`)."""
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for key, value in child.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key].update(value)
        else:
            merged[key] = value
    return merged


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(path)
    try:
        # a FIFO or a device (--preset /dev/zero) is refused, and a file only read so far
        return tomllib.loads(read_small_text(path, "a preset"))
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such preset file; check the path or run `cockpit presets`"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: malformed TOML ({e}); fix the syntax at that line") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file; a preset must be TOML text") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the preset ({e.strerror})") from None
