"""Typed run configuration, loaded from TOML presets and validated with precise errors.

A preset is a TOML file whose tables map onto the dataclasses below. Every error names the
file, the key and what was expected, in one line, so a user can fix it without a traceback.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(ValueError):
    """A problem with a preset or an override; the message is meant for the user as is."""


def _opt(default: Any, *, help: str = "", **checks: Any) -> Any:
    """A config field with its one-line help and its checks (min, max, below, choices)."""
    meta = {"help": help, **checks}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class DataConfig:
    source: str = _opt(
        "pydoc",
        help="'pydoc' (offline Python docs), 'tinyshakespeare', or a path to a file or folder of "
        "text (.txt, .md, ...), JSON lines (.jsonl, .jsonl.gz, .jsonl.zst) or Parquet (.parquet)",
    )
    tokenizer: str = _opt("char", help="'char' or a tiktoken encoding name such as 'r50k_base'")
    val_fraction: float = _opt(
        0.1, help="last fraction of the corpus held out (unless val_tokens is set)", min=0.0, below=1.0
    )
    val_tokens: int = _opt(
        0,
        help="tokens held out for validation, from the end of the corpus: for large corpora, "
        "e.g. 10_000_000 (0 = use val_fraction)",
        min=0,
    )
    text_field: str = _opt(
        "text", help="JSON lines and Parquet: the field (column) that holds each document's text"
    )
    separator: str = _opt(
        "\n\n",
        help="char-level: the text put between documents (BPE separates them with the "
        "tokenizer's end-of-text token)",
    )


@dataclass
class ModelConfig:
    n_layer: int = _opt(4, help="transformer blocks", min=1)
    n_head: int = _opt(4, help="attention heads per block (must divide n_embd)", min=1)
    n_embd: int = _opt(128, help="width: embedding and residual stream size", min=1)
    block_size: int = _opt(64, help="context length in tokens", min=1)
    dropout: float = _opt(
        0.0, help="dropout probability while training; 0 turns it off", min=0.0, below=1.0
    )
    bias: bool = _opt(False, help="biases in Linear and LayerNorm layers")
    # Modern parts, all off in the nanoGPT-faithful presets.
    pos_emb: str = _opt(
        "learned",
        help="positions: a learned embedding table or rotary (RoPE) in attention",
        choices=("learned", "rotary"),
    )
    norm: str = _opt("layernorm", help="normalisation layers", choices=("layernorm", "rmsnorm"))
    qk_norm: bool = _opt(False, help="RMS-normalise queries and keys before attention")
    mlp: str = _opt(
        "gelu",
        help="MLP activation: gelu (exact), gelu_tanh (GPT-2's tanh approximation, Hugging Face's "
        "gelu_new) or relu2 (ReLU squared)",
        choices=("gelu", "gelu_tanh", "relu2"),
    )
    tie_embeddings: bool = _opt(True, help="share the token embedding matrix with the output head")
    zero_init_proj: bool = _opt(False, help="zero-initialise attention and MLP output projections")
    logit_softcap: float = _opt(0.0, help="tanh soft-cap on logits; 0 turns it off", min=0.0)
    value_embeds: int = _opt(
        0,
        help="value embeddings (modded-nanogpt's): N extra token embedding tables; table i is "
        "added, times a learned scalar, to the attention values of block i and of block "
        "n_layer-N+i (0 = off; at most n_layer/2)",
        min=0,
    )
    unet_skips: bool = _opt(
        False,
        help="U-net skips (modded-nanogpt's): each block of the first half passes its output, "
        "times a learned weight, to the input of its mirror block in the second half",
    )
    grad_checkpoint: str = _opt(
        "none",
        help="recompute activations in backward instead of keeping them: 'mlp' (a block's 4h-wide "
        "MLP activations, half its memory, ~60% of its forward again) or 'full' (the whole "
        "block); true/false mean full/none",
        choices=("none", "mlp", "full"),
        from_bool=("none", "full"),
    )
    recompute_blocks: int = _opt(
        0,
        help="with grad_checkpoint mlp or full: how many blocks recompute, from the first "
        "(0 = every block)",
        min=0,
    )
    vocab_multiple: int = _opt(
        64,
        help="pad the embedding and head rows up to a multiple of this (GPT-2's 50,257 -> 50,304), "
        "for faster head matmuls; the padded rows are never sampled and exports cut them "
        "(1 = no padding)",
        min=1,
        max=4096,
    )
    init_from: str = _opt(
        "",
        help="start from existing weights (step 0, a fresh optimizer): a Hugging Face GPT-2 "
        "directory, a nanoGPT ckpt.pt, or a cockpit run directory, checkpoint or .safetensors "
        "export; the model's shape and tokenizer are theirs. A run records it as an absolute "
        "path; 'required' (a preset's) refuses to start until --init-from names them "
        "('' = from scratch)",
    )

    def __post_init__(self) -> None:
        if isinstance(self.grad_checkpoint, bool):  # a switch before it had modes
            self.grad_checkpoint = "full" if self.grad_checkpoint else "none"

    @property
    def recomputed_blocks(self) -> int:
        """How many blocks, from the first, backward recomputes (0 with grad_checkpoint none)."""
        if self.grad_checkpoint == "none":
            return 0
        return min(self.recompute_blocks or self.n_layer, self.n_layer)


# The highest LR a config, the LR dialog or a running run accepts: a larger LR is a typo, not a
# choice. One constant for all three (torch-free, so the cockpit's dialog can import it).
MAX_LR = 10.0


@dataclass
class OptimConfig:
    name: str = _opt(
        "adamw",
        help="optimizer (muon: Muon for the blocks' matrices, AdamW for the rest)",
        choices=("adamw", "muon", "lion", "adafactor"),
    )
    lr: float = _opt(1e-3, help="peak learning rate", min_excl=0.0, max=MAX_LR)
    weight_decay: float = _opt(
        0.1, help="decoupled weight decay on matrices and embeddings (0 = none)", min=0.0
    )
    beta1: float = _opt(
        0.9,
        help="AdamW/Lion/Adafactor first-moment decay (Adafactor: 0 keeps none)",
        min=0.0,
        below=1.0,
    )
    beta2: float = _opt(
        0.95, help="AdamW/Lion/Adafactor second-moment decay", min=0.0, below=1.0
    )
    eps: float = _opt(1e-8, help="AdamW's and Adafactor's denominator epsilon", min_excl=0.0)
    grad_clip: float = _opt(1.0, help="max gradient norm; 0 turns clipping off", min=0.0)
    muon_lr: float = _opt(0.02, help="Muon's LR for the 2-D block matrices", min_excl=0.0)
    muon_momentum: float = _opt(0.95, help="Muon's (Nesterov) momentum", min=0.0, below=1.0)
    muon_ns: str = _opt(
        "bf16",
        help="Muon's Newton-Schulz: 'bf16' (torch's, per matrix) or 'fp32' (batched by shape; "
        "faster on CPUs)",
        choices=("bf16", "fp32"),
    )


@dataclass
class ScheduleConfig:
    kind: str = _opt(
        "cosine",
        help="LR shape after warmup: cosine decay, warmup-stable-decay, or constant",
        choices=("cosine", "wsd", "constant"),
    )
    warmup_steps: int = _opt(100, help="steps of linear warmup to the peak LR (0 = none)", min=0)
    decay_steps: int = _opt(0, help="cosine: steps until min_lr (0 = max_steps)", min=0)
    min_lr: float = _opt(1e-4, help="LR floor", min=0.0)
    decay_fraction: float = _opt(
        0.2, help="wsd: final fraction of the run spent decaying", min=0.0, max=1.0
    )
    decay_start: int = _opt(
        0,
        help="wsd: the step the decay starts, to max_steps (0 = from decay_fraction); a live "
        "'cool down now' sets it",
        min=0,
    )


@dataclass
class TrainConfig:
    max_steps: int = _opt(2000, help="optimizer steps in the whole run", min=1)
    batch_size: int = _opt(12, help="micro-batch size in sequences", min=1)
    grad_accum: int = _opt(1, help="micro-batches per optimizer step", min=1)
    device: str = _opt("auto", help="'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'")
    dtype: str = _opt(
        "auto",
        help="autocast dtype (auto: bfloat16 on GPUs that have it, else float16; float32 on CPU)",
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    compile: bool = _opt(False, help="torch.compile the model")
    threads: int = _opt(
        0,
        help="CPU threads for torch's arithmetic (0 = auto: on CPU one fewer than the usable cores, at least 1; OMP_NUM_THREADS, if set, and GPUs keep torch's default)",
        min=0,
        max=1024,
    )
    parallel: str = _opt(
        "auto",
        help="under torchrun: ddp (a replica per rank), fsdp (sharded) or auto (ddp when the model fits one device)",
        choices=("auto", "ddp", "fsdp"),
    )
    seed: int = _opt(1337, help="random seed: initial weights, batch order, dropout")
    log_every: int = _opt(0, help="steps between loss read-backs (0 = 1 on CPU, 10 on GPU)", min=0)
    check_finite: bool = _opt(
        True, help="refuse a step whose gradient norm is not finite (on the device, no sync)"
    )
    spike_sigma: float = _opt(
        0.0, help="a loss this many std devs above its moving average is a spike (0 = off)", min=0.0
    )
    on_anomaly: str = _opt(
        "auto",
        help="on NaN or spike: pause, rollback (to the last checkpoint, LR halved) or auto (pause in the app, rollback headless)",
        choices=("auto", "pause", "rollback"),
    )
    max_rollbacks: int = _opt(3, help="rollbacks before a headless run gives up", min=0)


@dataclass
class EvalConfig:
    interval: int = _opt(250, help="steps between evaluations (0 = only at the end)", min=0)
    batches: int = _opt(20, help="batches per split (the same fixed batches at every eval)", min=1)
    full_val: bool = _opt(False, help="evaluate val on the whole split, deterministically")
    batch_size: int = _opt(0, help="eval batch size (0 = train.batch_size)", min=0)


@dataclass
class SampleConfig:
    interval: int = _opt(500, help="steps between samples (0 = never)", min=0)
    prompts: list[str] = _opt(["\n"], help="texts to continue, one sample each")
    max_new_tokens: int = _opt(200, help="tokens generated per sample", min=1)
    temperature: float = _opt(
        0.8, help="sampling temperature (lower is more predictable)", min_excl=0.0
    )
    top_k: int = _opt(200, help="0 = no top-k", min=0)


@dataclass
class CheckpointConfig:
    interval: int = _opt(1000, help="steps between checkpoints (0 = only at the end)", min=0)
    keep_last: int = _opt(3, help="periodic checkpoints kept on disk (older ones deleted)", min=1)
    keep_best: bool = _opt(True, help="also keep the checkpoint with the best val loss")


@dataclass
class LogConfig:
    tensorboard: bool = _opt(
        False,
        help="also write TensorBoard event files to RUN_DIR/tensorboard (needs the tensorboard package)",
    )


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "schedule": ScheduleConfig,
    "train": TrainConfig,
    "eval": EvalConfig,
    "sample": SampleConfig,
    "checkpoint": CheckpointConfig,
    "log": LogConfig,
}
TOP_LEVEL_KEYS = ("name", "description", "extends")


@dataclass
class RunConfig:
    name: str = "custom"
    description: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def tokens_per_step(self) -> int:
        return self.train.batch_size * self.train.grad_accum * self.model.block_size

    @property
    def decay_steps(self) -> int:
        return self.schedule.decay_steps or self.train.max_steps


# ---------------------------------------------------------------------------------------------
# Building a config from plain dicts (TOML tables, checkpoints, --set overrides)


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


def _unknown_key(key: str, known: list[str], where: str) -> ConfigError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else f" (known keys: {', '.join(known)})"
    return ConfigError(f"{where}: unknown key '{key}'{hint}")


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
    if not cfg.sample.prompts:
        raise ConfigError(f'{source}: sample.prompts must hold at least one prompt ("\\n" is fine)')


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
            raise _unknown_key(key, every, "--set")
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
        with path.open("rb") as f:
            return tomllib.load(f)
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
