"""Weights found on disk to start a run from, as a source's reader found them: a
`WeightsSource`, with what they fix (the model's shape, `SHAPE_KEYS`, and its tokenizer) and a
reader of its tensors; GPT-2's shape, which a Hugging Face GPT-2 and a nanoGPT checkpoint share.
Torch-free: the tensors are read only when asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.checkpoint.init_source import InitFromError

if TYPE_CHECKING:
    import torch

GPT2_VOCAB = 50257
# The ModelConfig fields the weights decide: their change would make them another model.
SHAPE_KEYS = (
    "n_layer", "n_head", "n_embd", "block_size", "bias", "pos_emb", "norm", "qk_norm", "mlp",
    "tie_embeddings", "logit_softcap", "value_embeds", "unet_skips",
)  # fmt: skip


@dataclass
class WeightsSource:
    """Weights found on disk, with what they fix: read by `open_source`, loaded by `load_into`."""

    given: str  # as the config or the command line gave it
    path: Path  # absolute: what the run records as model.init_from
    file: Path  # the file the tensors are read from
    kind: str  # "Hugging Face GPT-2", "nanoGPT", "cockpit checkpoint", "cockpit safetensors"
    shape: dict[str, Any]  # SHAPE_KEYS -> the weights' values
    tokenizer: dict[str, Any]  # a tokenizer's to_meta(): {"name", "vocab_size"(, "chars")}
    step: int | None  # the step the source was saved at, when it says
    # the tensors under cockpit's names; lazy=True: what shows their shapes at the least cost
    # (a safetensors header's, a memory-mapped file's), for a check before the run starts
    read: Callable[..., dict[str, torch.Tensor]]

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer["vocab_size"])

    def refuse(self, why: str) -> InitFromError:
        return InitFromError(f"--init-from {self.given}: {why}")

    def note(self) -> str:
        """One line for the run's start: where its weights come from."""
        at = f" at step {self.step}" if self.step else ""
        s = self.shape
        return (
            f"weights from {self.kind} {self.file}{at} ({s['n_layer']} layers, {s['n_embd']} "
            f"wide, {self.tokenizer['name']} vocab {self.vocab_size}); step 0, a fresh optimizer"
        )


def gpt2_shape(**given: Any) -> dict[str, Any]:
    """GPT-2's switches (learned positions, LayerNorm, no QK-norm, no soft-cap, none of the
    speedrun's parts) and the shape."""
    off = {"qk_norm": False, "logit_softcap": 0.0, "value_embeds": 0, "unet_skips": False}
    return {"pos_emb": "learned", "norm": "layernorm", **off, **given}
