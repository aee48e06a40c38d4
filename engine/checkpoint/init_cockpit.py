"""Cockpit's own files as a source of weights: a run directory (its best checkpoint, else its
latest, as `cockpit sample` picks), a checkpoint (a file or a sharded .dcp directory) and a
.safetensors export (its model config and tokenizer in its metadata).
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.checkpoint import names
from engine.checkpoint.init_files import load_safetensors, safetensors_header
from engine.checkpoint.init_source import InitFromError, refusal
from engine.checkpoint.init_weights import SHAPE_KEYS, WeightsSource
from engine.config.loading import recorded_config
from engine.config.run_config import SECTIONS, ConfigError, ModelConfig

if TYPE_CHECKING:
    import torch


def holds_checkpoints(path: Path) -> bool:
    return bool(names.list_checkpoints(path)) or any(
        (path / n).exists() for n in (names.BEST_NAME, names.BEST_SHARDED)
    )


def run_checkpoint(given: str, run_dir: Path) -> Path:
    from engine.checkpoint.checkpoint_error import CheckpointError
    from engine.checkpoint.trained import resolve_checkpoint

    try:
        return resolve_checkpoint(run_dir)
    except CheckpointError as e:
        raise refusal(given, str(e)) from None


def is_cockpit_export(file: Path) -> bool:
    try:
        _, metadata = safetensors_header(str(file), file)
    except InitFromError:
        return False
    return metadata.get("producer") == "cockpit"


def _model_config(given: str, raw: Any, where: str) -> ModelConfig:
    """A source's recorded [model] table as this cockpit's ModelConfig."""
    from engine.config.loading import config_from_dict

    table = recorded_config({"model": raw if isinstance(raw, dict) else {}})["model"]
    known = {f.name for f in fields(SECTIONS["model"])}
    try:
        return config_from_dict({"model": {k: v for k, v in table.items() if k in known}}, where).model
    except ConfigError as e:
        raise refusal(given, str(e)) from None


def _shape_and_tokenizer(
    given: str, model_raw: Any, tokenizer: Any, where: str, no_tokenizer: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model shape and tokenizer a cockpit file records; refused in one line (`no_tokenizer`)
    where it records no tokenizer the corpus can be checked against."""
    model = _model_config(given, model_raw, where)
    if not isinstance(tokenizer, dict) or not isinstance(tokenizer.get("vocab_size"), int):
        raise refusal(given, no_tokenizer)
    return {key: getattr(model, key) for key in SHAPE_KEYS}, dict(tokenizer)


def cockpit_checkpoint(given: str, where: Path, file: Path) -> WeightsSource:
    from engine.checkpoint.checkpoint_error import CheckpointError
    from engine.checkpoint.store import load_checkpoint

    try:
        state = load_checkpoint(file, mmap=True)
    except CheckpointError as e:
        raise refusal(given, str(e)) from None
    shape, tokenizer = _shape_and_tokenizer(
        given, state["config"].get("model"), state.get("tokenizer"), str(file),
        f"{file}: the checkpoint records no tokenizer to check the corpus against",
    )  # fmt: skip

    def read(lazy: bool = False) -> dict[str, torch.Tensor]:
        if state.get("_sharded"):
            from engine.distributed.sharded import dcp_model_state

            return dcp_model_state(file)
        return state["model"]

    return WeightsSource(
        given=given,
        path=where,
        file=file,
        kind="cockpit checkpoint",
        shape=shape,
        tokenizer=tokenizer,
        step=int(state.get("step", 0)),
        read=read,
    )


def safetensors_export(given: str, file: Path) -> WeightsSource:
    _, metadata = safetensors_header(given, file)
    if metadata.get("producer") != "cockpit" or "model_config" not in metadata:
        raise refusal(
            given,
            f"{file.name} is a safetensors file cockpit did not export (no model config in its "
            "metadata); for a Hugging Face model give its directory, with config.json",
        )
    try:
        model_raw = json.loads(metadata["model_config"])
        tokenizer = json.loads(metadata["tokenizer_meta"])
        tied = json.loads(metadata.get("tied_weights", "{}"))
        step = int(metadata.get("step", "0"))
    except (KeyError, ValueError, TypeError):
        raise refusal(given, f"{file.name}: its cockpit metadata does not read") from None
    shape, tokenizer = _shape_and_tokenizer(
        given, model_raw, tokenizer, str(file), f"{file.name}: its metadata records no tokenizer"
    )

    def read(lazy: bool = False) -> dict[str, torch.Tensor]:
        tensors = load_safetensors(given, file, lazy)
        for dropped, kept in (tied.items() if isinstance(tied, dict) else ()):
            if kept in tensors:
                tensors[dropped] = tensors[kept]
        return tensors

    return WeightsSource(
        given=given,
        path=file,
        file=file,
        kind="cockpit safetensors",
        shape=shape,
        tokenizer=tokenizer,
        step=step,
        read=read,
    )
