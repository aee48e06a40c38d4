"""Fitting weights found on disk to the run that starts from them: the shape they give its
model (a smaller block_size a crop), the refusals of a tokenizer, corpus or model they do not
fit, each one line, and the copy into a fresh model.
"""

from __future__ import annotations

from typing import Any

from engine.checkpoint.init_weights import SHAPE_KEYS, WeightsSource
from engine.config.run_config import ModelConfig
from engine.export.nanogpt import SAME_AS_GPT2 as GPT2_BPE  # tiktoken's names for GPT-2's BPE
from engine.export.weights_source import VOCAB_ROWS


def shaped_overrides(source: WeightsSource, user: dict[str, Any]) -> dict[str, Any]:
    """The model.* values a run from `source` trains with, given what the user set (`--set
    model.KEY=VALUE`): the source's shape, with a smaller block_size kept (the learned
    positions cut, as nanoGPT's crop_block_size). A conflicting setting is refused in one line."""
    shaped = dict(source.shape)
    for key, value in user.items():
        if key not in SHAPE_KEYS or value == source.shape[key]:
            continue
        theirs = source.shape[key]
        if key == "block_size" and isinstance(value, int) and 0 < value < theirs:
            shaped[key] = value  # a crop: fewer positions of the same table
            continue
        fix = (
            f"drop that --set, or a block_size below {theirs} crops the positions"
            if key == "block_size"
            else "drop that --set (the shape is the weights'), or train from scratch without --init-from"
        )
        raise source.refuse(
            f"--set model.{key}={value!r} conflicts with its weights' {key} = {theirs!r}; {fix}"
        )
    return shaped


def apply_shape(model: ModelConfig, source: WeightsSource) -> list[str]:
    """Give `model` the source's shape (a block_size below the source's is kept: a crop) and
    record the source as an absolute path; the changes, one line each."""
    cropped = {"block_size": model.block_size} if model.block_size < source.shape["block_size"] else {}
    shaped = shaped_overrides(source, cropped)
    changed = [
        f"model.{key}: {getattr(model, key)!r} -> {value!r} (the weights')"
        for key, value in shaped.items()
        if getattr(model, key) != value
    ]
    for key, value in shaped.items():
        setattr(model, key, value)
    model.init_from = str(source.path)
    if model.recompute_blocks > model.n_layer:
        model.recompute_blocks = 0
    return changed


def check_tokenizer_name(source: WeightsSource, tokenizer: str) -> None:
    """Refuse a corpus tokenizer (data.tokenizer) whose ids are not the weights'."""
    theirs = source.tokenizer["name"]
    if theirs == tokenizer or (theirs in GPT2_BPE and tokenizer in GPT2_BPE):
        return
    wanted = "r50k_base" if theirs in GPT2_BPE else theirs
    what = "GPT-2's BPE" if theirs in GPT2_BPE else f"the {theirs} tokenizer"
    raise source.refuse(
        f"its weights read {what} token ids but data.tokenizer is {tokenizer!r}; "
        f"use --set data.tokenizer={wanted}"
    )


def check_vocabulary(source: WeightsSource, tokenizer: Any, corpus: str) -> None:
    """Refuse a corpus whose prepared tokenizer (`tokenizer`) is not the weights': another
    character set would give the same ids other characters."""
    check_tokenizer_name(source, tokenizer.name)
    theirs = source.tokenizer
    if theirs["name"] == "char":
        old, new = theirs.get("chars", ""), tokenizer.chars
        if old != new:
            changed = sum(a != b for a, b in zip(old, new, strict=False)) + abs(len(old) - len(new))
            raise source.refuse(
                f"the characters of {corpus} are not its weights' ({changed} of {len(old)} ids "
                f"would change meaning, {len(old)} -> {len(new)} characters); fine-tune a char "
                "model on a corpus of the same characters"
            )
    elif tokenizer.vocab_size != source.vocab_size:
        raise source.refuse(
            f"{tokenizer.name} has {tokenizer.vocab_size} tokens, its weights {source.vocab_size}"
        )


def expected_shapes(model: Any) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def check_tensors(source: WeightsSource, tensors: dict[str, Any], model: Any) -> None:
    """Refuse tensors that do not fit `model` (names, shapes), before anything is copied."""
    vocab, block = source.vocab_size, model.cfg.block_size
    tied = model.cfg.tie_embeddings
    for name, shape in expected_shapes(model).items():
        got = tensors.get(name)
        if got is None and tied and name == "lm_head.weight":
            continue  # the head is the embedding
        if got is None:
            raise source.refuse(f"its weights have no {name}, which this model needs ({_shown(shape)})")
        have = tuple(got.shape)
        if name in VOCAB_ROWS or name == "wpe.weight":
            rows = vocab if name in VOCAB_ROWS else block
            fits = len(have) == 2 and have[1] == shape[1] and have[0] >= rows
            wanted = f"at least ({rows}, {shape[1]})"
        else:
            fits, wanted = have == shape, _shown(shape)
        if not fits:
            raise source.refuse(
                f"its tensor {name} is {_shown(have)} where its shape says {wanted}: it does not "
                "load as the model it describes"
            )
    extra = sorted(set(tensors) - set(expected_shapes(model)))
    if extra:
        raise source.refuse(f"its weights hold {extra[0]}, which a GPT-2-shaped model has not")


def check_fits(source: WeightsSource, model: ModelConfig) -> None:
    """Refuse a source whose tensors do not load as the model `model` describes, reading as
    little as it can (before a run starts)."""
    import torch

    from engine.model.gpt import GPT

    with torch.device("meta"):  # the shapes, no memory
        empty = GPT(model, source.vocab_size, initialise=False)
    check_tensors(source, source.read(lazy=True), empty)


def _shown(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ")"


def load_into(model: Any, source: WeightsSource) -> None:
    """Copy the source's weights into `model` (a fresh GPT of the source's shape): the
    tokenizer's rows of the embedding and head (the padded rows keep a fresh model's values,
    and stay out of the loss and sampling), the first block_size positions."""
    import torch

    tensors = source.read()
    check_tensors(source, tensors, model)
    vocab, block = source.vocab_size, model.cfg.block_size
    with torch.no_grad():
        for name, target in model.state_dict().items():
            got = tensors.get(name)
            if got is None:
                continue  # the tied head: the embedding's tensor
            if name in VOCAB_ROWS:
                target[:vocab].copy_(got[:vocab])
            elif name == "wpe.weight":
                target.copy_(got[:block])
            else:
                target.copy_(got)
