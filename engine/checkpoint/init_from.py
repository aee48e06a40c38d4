"""Starting a run from weights that already exist (`model.init_from`, `--init-from SOURCE`): a
Hugging Face GPT-2 directory or cached name (never downloaded), a nanoGPT ckpt.pt, a cockpit run,
checkpoint or .safetensors export. The weights fix the model's shape and tokenizer; the run
starts at step 0. Files are read weights-only or as safetensors: a source's code never runs.
"""

from __future__ import annotations

from pathlib import Path

from engine.checkpoint import names
from engine.checkpoint.init_cockpit import (
    cockpit_checkpoint,
    holds_checkpoints,
    is_cockpit_export,
    run_checkpoint,
    safetensors_export,
)
from engine.checkpoint.init_files import load_torch_file, sniffs_safetensors
from engine.checkpoint.init_hf import HF_WEIGHTS, hf_directory
from engine.checkpoint.init_nanogpt import NANOGPT_CKPT, nanogpt_checkpoint
from engine.checkpoint.init_source import (
    REQUIRED,
    WHAT_IT_MAY_BE,
    refusal,
    refuse_unless_regular,
    required_refusal,
    source_path,
)
from engine.checkpoint.init_weights import WeightsSource


def open_source(given: str) -> WeightsSource:
    """What `given` holds: its kind, shape and tokenizer, its tensors read only when asked for."""
    if given == REQUIRED:
        raise required_refusal()
    path = source_path(given)
    if path.is_dir() and path.suffix == names.SHARDED:  # a sharded run's ckpt-N.dcp or best.dcp
        return cockpit_checkpoint(given, path, path)
    if path.is_dir():
        if (path / "metrics.jsonl").is_file() or holds_checkpoints(path):
            return cockpit_checkpoint(given, path, run_checkpoint(given, path))
        if (path / "config.json").is_file():
            return hf_directory(given, path, path)
        if (path / NANOGPT_CKPT).is_file():
            return _torch_file(given, path, path / NANOGPT_CKPT)
        raise refusal(
            given,
            "a directory with no config.json (not a Hugging Face model), no ckpt.pt (nanoGPT) and "
            f"no checkpoint (not a cockpit run); give {WHAT_IT_MAY_BE}",
        )
    refuse_unless_regular(given, path)  # a FIFO, a device: refused before it is opened
    if path.suffix == ".safetensors" or sniffs_safetensors(path):  # an export named otherwise too
        if (path.parent / "config.json").is_file() and not is_cockpit_export(path):
            return hf_directory(given, path, path.parent, path)
        return safetensors_export(given, path)
    if path.name in HF_WEIGHTS and (path.parent / "config.json").is_file():
        return hf_directory(given, path, path.parent, path)
    return _torch_file(given, path, path)


def _torch_file(given: str, folder_or_file: Path, file: Path) -> WeightsSource:
    state = load_torch_file(given, file)
    if isinstance(state, dict) and "model_args" in state and "model" in state:
        return nanogpt_checkpoint(given, folder_or_file, file, state)
    if isinstance(state, dict) and "config" in state and "model" in state and "tokenizer" in state:
        return cockpit_checkpoint(given, folder_or_file, file)
    raise refusal(
        given,
        f"{file.name} is not a checkpoint cockpit can start from (no model_args and model, as "
        f"nanoGPT saves; no config and model, as cockpit does); give {WHAT_IT_MAY_BE}",
    )
