"""A nanoGPT ckpt.pt as a source of weights: its `model_args` and `model` (engine.export.nanogpt's
mapping, inverted), and its tokenizer: GPT-2's BPE, or the characters of a meta.pkl beside it
(read as plain data: any object with code is refused).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.checkpoint.checkpoint_error import DAMAGED_FILE_ERRORS
from engine.checkpoint.init_source import refusal
from engine.checkpoint.init_weights import GPT2_VOCAB, WeightsSource, gpt2_shape
from engine.export.nanogpt import SAME_AS_GPT2 as GPT2_BPE  # tiktoken's names for GPT-2's BPE

if TYPE_CHECKING:
    import torch

NANOGPT_PADDED_VOCAB = 50304  # nanoGPT's GPT-2 vocabulary padded for speed when trained from scratch
NANOGPT_CKPT = "ckpt.pt"
NANOGPT_META = "meta.pkl"


class _PlainData(pickle.Unpickler):
    """An unpickler for meta.pkl (dicts of ints and strings): any object with code is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def nanogpt_checkpoint(given: str, where: Path, file: Path, state: dict[str, Any]) -> WeightsSource:
    args = state["model_args"]
    if not isinstance(args, dict) or not isinstance(state["model"], dict):
        raise refusal(given, f"{file.name}: model_args and model are not nanoGPT's dicts")
    shape: dict[str, Any] = {}
    for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
        value = args.get(key)
        if type(value) is not int or value < 1:
            raise refusal(given, f"{file.name}: model_args {key} = {value!r}: expected a whole number >= 1")
        shape[key] = value
    vocab = shape.pop("vocab_size")
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    tokenizer = _nanogpt_tokenizer(given, file, config, vocab)
    model = state["model"]
    return WeightsSource(
        given=given,
        path=where,
        file=file,
        kind="nanoGPT",
        shape=gpt2_shape(**shape, bias=bool(args.get("bias", False)), mlp="gelu", tie_embeddings=True),
        tokenizer=tokenizer,
        step=state["iter_num"] if type(state.get("iter_num")) is int else None,
        read=lambda lazy=False: _cockpit_state_of_nanogpt(model),  # memory-mapped already
    )


def _cockpit_state_of_nanogpt(model: dict[str, Any]) -> dict[str, torch.Tensor]:
    from engine.export.nanogpt import cockpit_state

    return cockpit_state(model)


def _nanogpt_tokenizer(given: str, file: Path, config: dict[str, Any], vocab: int) -> dict[str, Any]:
    """GPT-2's BPE for GPT-2's vocabulary (nanoGPT pads it to 50304 from scratch); characters from
    the meta.pkl beside the file (cockpit's export writes one there; nanoGPT keeps it in
    data/DATASET/)."""
    named = config.get("cockpit_tokenizer")
    meta = file.parent / NANOGPT_META
    if meta.is_file() and named in (None, "char"):
        try:
            with meta.open("rb") as f:
                loaded = _PlainData(f).load()
            itos = loaded["itos"]
            chars = "".join(itos[i] for i in range(len(itos)))
        except DAMAGED_FILE_ERRORS as e:  # not a pickle, or not a dict of characters
            raise refusal(given, f"{meta} is not nanoGPT's meta.pkl of characters ({type(e).__name__})") from None
        if len(chars) > vocab:
            raise refusal(given, f"{meta} has {len(chars)} characters, more than the model's {vocab} rows")
        return {"name": "char", "chars": chars, "vocab_size": len(chars)}
    if isinstance(named, str) and named != "char":
        return {"name": named, "vocab_size": _tiktoken_vocab(given, named, vocab)}
    if vocab in (GPT2_VOCAB, NANOGPT_PADDED_VOCAB):
        return {"name": GPT2_BPE[0], "vocab_size": GPT2_VOCAB}
    raise refusal(
        given,
        f"a vocabulary of {vocab} is not GPT-2's BPE and no {NANOGPT_META} beside {file.name} names "
        f"its characters: copy the dataset's {NANOGPT_META} (nanoGPT's data/DATASET/) there",
    )


def _tiktoken_vocab(given: str, name: str, rows: int) -> int:
    """A tiktoken encoding's vocabulary (GPT-2's without loading it)."""
    if name in GPT2_BPE:
        return GPT2_VOCAB
    from engine.data import DataError
    from engine.data.tokenizers import TiktokenTokenizer

    try:
        return TiktokenTokenizer(name).vocab_size
    except DataError as e:
        raise refusal(given, str(e)) from None
