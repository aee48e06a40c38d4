"""`cockpit export --format nanogpt`: a ckpt.pt that nanoGPT's sample.py loads with
init_from='resume' (and out_dir pointing at the exported directory).

nanoGPT's GPT is cockpit's with every switch off, under GPT-2's names and nn.Linear's layout;
its LayerNorms and Linears have biases only when bias=True. sample.py decodes with
data/DATASET/meta.pkl when config['dataset'] names one that exists, else with GPT-2's BPE.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import torch

from engine.checkpoint.trained import TrainedModel
from engine.export import ExportError, ExportResult
from engine.export.place import staged_dir
from engine.export.weights_source import (
    cockpit_name,
    cockpit_version,
    gpt2_name,
    load_gpt2_shaped,
    source_note,
    true_vocab_state,
)
from engine.files import atomic_write

DEFAULT_NAME = "nanogpt"
CKPT_NAME = "ckpt.pt"
META_NAME = "meta.pkl"
# Tokenizers whose ids are GPT-2's, the BPE sample.py decodes with when there is no meta.pkl.
SAME_AS_GPT2 = ("r50k_base", "gpt2")


def nanogpt_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Cockpit's state dict under nanoGPT's names; tied tensors stay one tensor."""
    return {gpt2_name(name): tensor.detach() for name, tensor in state.items()}


COMPILED_PREFIX = "_orig_mod."  # what torch.compile puts before a compiled nanoGPT's names


def cockpit_state(nanogpt: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A nanoGPT state dict (a compiled model's too) under cockpit's names: the inverse of
    `nanogpt_state`. The causal-mask buffers of a nanoGPT without flash attention
    (attn.bias, 4-D) are left out."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in nanogpt.items():
        name = name.removeprefix(COMPILED_PREFIX)
        if name.endswith(".attn.bias") and tensor.dim() == 4:
            continue
        out[cockpit_name(name)] = tensor
    return out


def dataset_name(trained: TrainedModel) -> str:
    """A folder name under nanoGPT's data/ for this run's characters: cockpit_SOURCE, so it never
    overwrites nanoGPT's own shakespeare_char."""
    stem = Path(trained.cfg.data.source).stem or "corpus"
    return "cockpit_" + re.sub(r"[^A-Za-z0-9_-]+", "_", stem)


def nanogpt_checkpoint(trained: TrainedModel) -> dict[str, Any]:
    """The dict sample.py reads: plain Python values and tensors only (weights_only loads it)."""
    model, cfg = trained.cfg.model, trained.cfg
    model_args = {
        "n_layer": model.n_layer,
        "n_head": model.n_head,
        "n_embd": model.n_embd,
        "block_size": model.block_size,
        "bias": model.bias,
        "vocab_size": trained.tokenizer.vocab_size,
        "dropout": model.dropout,
    }
    config: dict[str, Any] = {
        **model_args,
        "learning_rate": cfg.optim.lr,
        "weight_decay": cfg.optim.weight_decay,
        "beta1": cfg.optim.beta1,
        "beta2": cfg.optim.beta2,
        "grad_clip": cfg.optim.grad_clip,
        "batch_size": cfg.train.batch_size,
        "gradient_accumulation_steps": cfg.train.grad_accum,
        "max_iters": cfg.train.max_steps,
        "cockpit_version": cockpit_version(),
        "cockpit_tokenizer": trained.tokenizer.name,
        "cockpit_config": cfg.to_dict(),
    }
    if trained.tokenizer.name == "char":
        config["dataset"] = dataset_name(trained)
    best = trained.state.get("best_val")
    return {
        "model": nanogpt_state(true_vocab_state(trained)),
        "model_args": model_args,
        "iter_num": trained.step,
        "best_val_loss": float(best) if isinstance(best, (int, float)) else float("inf"),
        "config": config,
    }


def char_meta(chars: str) -> dict[str, Any]:
    """nanoGPT's meta.pkl for a character vocabulary."""
    return {
        "vocab_size": len(chars),
        "itos": dict(enumerate(chars)),
        "stoi": {ch: i for i, ch in enumerate(chars)},
    }


def export(target: Path, out: Path) -> ExportResult:
    trained = load_gpt2_shaped(target, "nanoGPT's GPT")
    if trained.cfg.model.mlp == "gelu_tanh":
        raise ExportError(
            "model.mlp = 'gelu_tanh': nanoGPT's GPT has the exact GELU, so this model's logits "
            "would change; export --format hf (its gelu_new) or safetensors instead"
        )
    checkpoint = nanogpt_checkpoint(trained)
    name = trained.tokenizer.name
    # written in a new private folder, renamed into `out` once all are (see place); an earlier
    # export's meta.pkl is removed then when this one has none
    with staged_dir(out, stale=(META_NAME,)) as stage:
        atomic_write(stage / CKPT_NAME, lambda f: torch.save(checkpoint, f))
        if name == "char":
            chars = trained.tokenizer.chars
            atomic_write(stage / META_NAME, lambda f: pickle.dump(char_meta(chars), f))
    ckpt_file, meta = out / CKPT_NAME, out / META_NAME
    written, notes = [ckpt_file], [source_note(trained)]
    if name == "char":
        written.append(meta)
        dataset = checkpoint["config"]["dataset"]
        notes.append(
            f"nanoGPT's sample.py reads the characters from data/{dataset}/{META_NAME} in its "
            f"checkout: copy {meta} there"
        )
    elif name in SAME_AS_GPT2:
        notes.append(f"sample.py decodes with GPT-2's BPE (no meta.pkl): the same as {name}")
    else:
        notes.append(
            f"sample.py decodes with GPT-2's BPE, not this run's {name}: its text will be wrong; "
            f"decode the ids with tiktoken.get_encoding({name!r})"
        )
    notes.append(
        f"load with sample.py --init_from=resume --out_dir={out}; train.py cannot resume from it "
        "(no optimizer state)"
    )
    return ExportResult(written=written, notes=notes)
