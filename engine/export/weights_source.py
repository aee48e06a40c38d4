"""What the weight formats share: the checkpoint they read, where it came from, the GPT-2 shape
check and GPT-2's tensor names.

nanoGPT and Hugging Face's GPT-2 have one architecture: learned positions, LayerNorm, GELU MLP,
plain attention, a head tied to the token embedding. Cockpit's GPT is that architecture with its
switches off, so a run exports to them only when every switch is off.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from engine.checkpoint.trained import TrainedModel, load_trained
from engine.config.run_config import ModelConfig
from engine.export import ExportError, run_dir_of
from engine.rundir.records import parse_record

# (is the switch on, what the switch is, what GPT-2 has instead)
_GPT2_SWITCHES: tuple[tuple[str, Any, str], ...] = (
    ("pos_emb", lambda c: c.pos_emb == "rotary", "has learned positions"),
    ("norm", lambda c: c.norm == "rmsnorm", "normalises with LayerNorm"),
    ("qk_norm", lambda c: c.qk_norm, "has no QK-norm in its attention"),
    ("mlp", lambda c: c.mlp == "relu2", "has a GELU MLP"),
    ("logit_softcap", lambda c: c.logit_softcap > 0, "has no logit soft-cap"),
    ("value_embeds", lambda c: c.value_embeds > 0, "has no value embeddings"),
    ("unet_skips", lambda c: c.unet_skips, "has no skip connections between blocks"),
    (
        "tie_embeddings",
        lambda c: not c.tie_embeddings,
        "ties its output head to the token embedding",
    ),
)


def load_for_export(target: Path) -> TrainedModel:
    """The trained model a RUN_DIR or CKPT holds (a CheckpointError says why none)."""
    return load_trained(target)


ANY_SHAPE_INSTEAD = "export --format safetensors instead (any model shape, cockpit's own names)"


def load_gpt2_shaped(target: Path, whose: str) -> TrainedModel:
    """The trained model of a RUN_DIR or CKPT for a GPT-2 layout (hf, nanogpt): an ExportError
    when a switch makes it another shape; `whose` is "Hugging Face's GPT-2" or "nanoGPT's GPT"."""
    trained = load_for_export(target)
    refuse_unless_gpt2_shaped(trained.cfg.model, whose)
    return trained


def refuse_unless_gpt2_shaped(
    cfg: ModelConfig, whose: str, instead: str = ANY_SHAPE_INSTEAD
) -> None:
    """An ExportError naming the first switch that makes this model something other than GPT-2.

    whose: "Hugging Face's GPT-2" or "nanoGPT's GPT"; instead: what the user can do."""
    for name, is_on, gpt2_has in _GPT2_SWITCHES:
        if is_on(cfg):
            raise ExportError(
                f"model.{name} = {getattr(cfg, name)!r}: {whose} {gpt2_has}, so this model cannot "
                f"be written in its layout; {instead}"
            )


def gpt2_name(cockpit_name: str) -> str:
    """GPT-2's name (nanoGPT's and transformers' alike) for a cockpit state-dict key."""
    if cockpit_name.startswith("blocks."):
        return "transformer.h." + cockpit_name[len("blocks.") :]
    if cockpit_name.startswith("lm_head."):
        return cockpit_name
    return "transformer." + cockpit_name  # wte, wpe, ln_f


def cockpit_name(gpt2: str) -> str:
    """The cockpit state-dict key for a GPT-2 name: the inverse of `gpt2_name`."""
    if gpt2.startswith("transformer.h."):
        return "blocks." + gpt2[len("transformer.h.") :]
    return gpt2.removeprefix("transformer.")  # wte, wpe, ln_f; lm_head has no prefix


def val_loss_of(trained: TrainedModel) -> float | None:
    """The val loss measured at the checkpoint's step, when the run recorded one."""
    state = trained.state
    best = state.get("best_val")
    if state.get("is_best") and isinstance(best, float) and math.isfinite(best):
        return best
    metrics = run_dir_of(trained.path) / "metrics.jsonl"
    found = None
    try:
        with metrics.open("rb") as lines:  # bytes: a damaged (not UTF-8) line is read past
            for line in lines:
                if b'"eval"' not in line:
                    continue
                try:
                    record = parse_record(line)
                except ValueError:
                    continue  # a line cut short by a crash, or damaged
                if record.get("kind") == "eval" and record.get("step") == trained.step:
                    found = record.get("val_loss")
    except OSError:
        return None
    return float(found) if isinstance(found, (int, float)) else None


def source_note(trained: TrainedModel) -> str:
    """One line: which checkpoint was exported, its step and val loss."""
    loss = val_loss_of(trained)
    measured = f"val loss {loss:.4f}" if loss is not None else "val loss not measured at this step"
    return f"exported from {trained.path} (step {trained.step}, {measured})"


def cockpit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cockpit")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def distinct_tensors(
    state: dict[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The state dict with each shared tensor kept once, under its first name, and
    {dropped name: kept name} for the ones left out (tied embeddings)."""
    kept: dict[str, torch.Tensor] = {}
    first_name: dict[tuple[Any, ...], str] = {}
    tied: dict[str, str] = {}
    for name, tensor in state.items():
        key = (
            tensor.untyped_storage().data_ptr(),
            tensor.storage_offset(),
            tuple(tensor.shape),
            tensor.stride(),
        )
        if key in first_name:
            tied[name] = first_name[key]
        else:
            first_name[key] = name
            kept[name] = tensor
    return kept, tied


VOCAB_ROWS = ("wte.weight", "lm_head.weight")  # the tensors with a row per vocabulary entry


def true_vocab_state(trained: TrainedModel) -> dict[str, torch.Tensor]:
    """The model's state dict with the embedding and head cut to the tokenizer's rows.

    The padded rows (`model.vocab_multiple`) are there for the matmuls' alignment and are
    never produced, so an exported model has its tokenizer's vocabulary, as the formats that
    read it expect. Tied tensors stay one tensor (cut once)."""
    model = trained.model
    state = model.state_dict()
    cut: dict[int, torch.Tensor] = {}  # the full tensor's storage -> its cut copy
    for name in VOCAB_ROWS:
        if name in state:
            full = state[name]
            where = full.untyped_storage().data_ptr()  # state_dict detaches: new objects
            if where not in cut:
                cut[where] = full[: model.vocab_size].clone()
            state[name] = cut[where]
    return state
