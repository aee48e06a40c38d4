"""`cockpit export --format hf`: a Hugging Face transformers GPT-2 directory that
`GPT2LMHeadModel.from_pretrained(dir)` loads with the run's logits (Conv1D weights transposed,
zero biases where the run has none, "gelu" exact and "gelu_new" for cockpit's gelu_tanh).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from engine.checkpoint.trained import TrainedModel
from engine.export import ExportResult
from engine.export.place import staged_dir
from engine.export.weights_source import (
    cockpit_name,
    cockpit_version,
    gpt2_name,
    load_gpt2_shaped,
    source_note,
    true_vocab_state,
)
from engine.files import atomic_write_by_name, atomic_write_text

DEFAULT_NAME = "hf"
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json")
CHARS_FILE = "cockpit_chars.json"
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
# Linear layers inside a block: their weights are transposed into Conv1D's layout.
_CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
# Layers with a bias in GPT-2, whatever the run had.
_WITH_BIAS = ("ln_1", "ln_2", *_CONV1D)


def hf_tensors(state: dict[str, torch.Tensor], n_layer: int) -> dict[str, torch.Tensor]:
    """Cockpit's state dict under GPT-2's names and layout, biases filled with zeros where the run
    had none; the tied lm_head is left out (transformers ties it to transformer.wte)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name == "lm_head.weight":
            continue
        is_conv1d = name.endswith(".weight") and any(f".{layer}." in name for layer in _CONV1D)
        out[gpt2_name(name)] = (tensor.t() if is_conv1d else tensor).detach().contiguous()
    for layer in [f"h.{i}.{part}" for i in range(n_layer) for part in _WITH_BIAS] + ["ln_f"]:
        weight, bias = f"transformer.{layer}.weight", f"transformer.{layer}.bias"
        if bias not in out:
            # Conv1D's output size is its weight's last dimension; LayerNorm's its only one.
            out[bias] = torch.zeros(out[weight].shape[-1], dtype=out[weight].dtype)
    return out


def cockpit_tensors(hf_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """GPT-2's tensors (a transformers checkpoint) under cockpit's names and nn.Linear's layout:
    the inverse of `hf_tensors`. The attention's causal-mask buffers some files carry
    (attn.bias, attn.masked_bias) are left out; the tied lm_head, when absent, is wte's."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in hf_state.items():
        if not name.startswith(("transformer.", "lm_head.")):
            name = "transformer." + name  # saved from GPT2Model: no transformer. prefix
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        is_conv1d = name.endswith(".weight") and any(f".{layer}." in name for layer in _CONV1D)
        out[cockpit_name(name)] = tensor.t() if is_conv1d else tensor
    return out


def hf_config(trained: TrainedModel, eot_id: int | None) -> dict[str, Any]:
    model = trained.cfg.model
    dtype = trained.model.wte.weight.dtype  # what the checkpoint holds
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": trained.tokenizer.vocab_size,
        "n_positions": model.block_size,
        "n_embd": model.n_embd,
        "n_layer": model.n_layer,
        "n_head": model.n_head,
        "n_inner": None,  # 4 * n_embd, as cockpit's MLP
        "activation_function": "gelu_new" if model.mlp == "gelu_tanh" else "gelu",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": model.dropout,
        "embd_pdrop": model.dropout,
        "attn_pdrop": model.dropout,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True,
        "bos_token_id": eot_id,
        "eos_token_id": eot_id,
        "use_cache": True,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "cockpit_version": cockpit_version(),
        "cockpit_tokenizer": trained.tokenizer.name,
    }


def _bpe_encoding(name: str) -> Any:
    import tiktoken

    return tiktoken.get_encoding(name)  # the run's tokenizer loaded it, so it is cached


def _write_tokenizer(
    trained: TrainedModel, stage: Path, out: Path
) -> tuple[list[str], list[str], int | None]:
    """The tokenizer files for a GPT-2-style BPE run, written in `stage` (they end up in `out`),
    or the reason there are none: (their names, notes, the end-of-text id)."""
    from engine.export.gpt2_tokenizer import END_OF_TEXT, tokenizer_files, uses_gpt2_bpe

    name = trained.tokenizer.name
    if name == "char":
        atomic_write_text(
            stage / CHARS_FILE, json.dumps(list(trained.tokenizer.chars), ensure_ascii=False)
        )
        note = (
            f"no tokenizer files: transformers has no character-level GPT-2 tokenizer; the run's "
            f"characters (token id = position in the list) are in {out / CHARS_FILE}"
        )
        return [CHARS_FILE], [note], None
    encoding = _bpe_encoding(name)
    eot = encoding._special_tokens.get(END_OF_TEXT)
    if not uses_gpt2_bpe(encoding) or eot is None:
        note = (
            f"no tokenizer files: {name} is not GPT-2's byte-level BPE; encode with "
            f"tiktoken.get_encoding({name!r}) and pass its ids to the model"
        )
        return [], [note], eot
    files = tokenizer_files(encoding, trained.cfg.model.block_size)
    for file_name, text in files.items():
        atomic_write_text(stage / file_name, text)
    note = f"tokenizer: GPT2TokenizerFast.from_pretrained reads the {name} vocabulary from here"
    return list(files), [note], eot


def export(target: Path, out: Path) -> ExportResult:
    from safetensors.torch import save_file

    trained = load_gpt2_shaped(target, "Hugging Face's GPT-2")
    tensors = hf_tensors(true_vocab_state(trained), trained.cfg.model.n_layer)
    # written in a new private folder, renamed into `out` once all are (see place); an earlier
    # export's tokenizer files this one has no new version of are removed then
    with staged_dir(out, stale=(*TOKENIZER_FILES, CHARS_FILE)) as stage:
        # each file with FILE_MODE (save_file alone makes it 0600)
        atomic_write_by_name(
            stage / WEIGHTS_NAME, lambda tmp: save_file(tensors, str(tmp), {"format": "pt"})
        )
        tokenizer_names, tokenizer_notes, eot = _write_tokenizer(trained, stage, out)
        atomic_write_text(stage / CONFIG_NAME, json.dumps(hf_config(trained, eot), indent=2) + "\n")
    notes = [source_note(trained), *tokenizer_notes]
    if not trained.cfg.model.bias:
        notes.append("biases written as zeros: GPT-2 always has them, this run had none")
    written = [out / name for name in (CONFIG_NAME, WEIGHTS_NAME, *tokenizer_names)]
    return ExportResult(written=written, notes=notes)
