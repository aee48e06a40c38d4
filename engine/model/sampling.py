"""Text from a trained model as it is generated: the token-by-token loop `cockpit sample` streams.

No UI here: `stream_text` yields pieces of text, and the caller prints them. BPE tokens are byte
sequences that can end inside a UTF-8 character, so the pieces come from an incremental UTF-8
decoder: a piece holds only complete characters, and nothing once yielded changes later.
"""

from __future__ import annotations

import codecs
import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from engine.data.tokenizers import CharTokenizer, Tokenizer


class PromptError(ValueError):
    """A prompt this model cannot take; the message is meant for the user as is."""


@dataclass(frozen=True)
class SamplingOptions:
    max_new_tokens: int
    temperature: float  # 0 = greedy (argmax), no random numbers drawn
    top_k: int  # 0 = no top-k


@dataclass(frozen=True)
class EncodedPrompt:
    ids: list[int]  # what the model is fed: the prompt's tokens, cropped to block_size
    cropped: int  # tokens dropped from the left of a prompt longer than block_size


def token_bytes_function(tokenizer: Tokenizer) -> Callable[[int], bytes]:
    """The UTF-8 bytes one token stands for."""
    if isinstance(tokenizer, CharTokenizer):
        return lambda token: tokenizer.decode([token]).encode("utf-8", "surrogatepass")
    import tiktoken

    # tiktoken caches encodings: this is the tokenizer's own, not a second copy.
    return tiktoken.get_encoding(tokenizer.name).decode_single_token_bytes


def decode_stream(ids: Iterable[int], token_bytes: Callable[[int], bytes]) -> Iterator[str]:
    """The text of `ids` in pieces, one per token that completes at least one character.

    Bytes that end inside a character wait for the tokens that complete it; bytes that can
    never be valid UTF-8 become U+FFFD at once (no later token can change them); an unfinished
    character at the very end becomes U+FFFD too.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for token in ids:
        piece = decoder.decode(token_bytes(token))
        if piece:
            yield piece
    tail = decoder.decode(b"", final=True)
    if tail:
        yield tail


def unknown_characters(tokenizer: Tokenizer, prompt: str) -> list[str]:
    """Characters of `prompt` a char-level model has no token for (none for BPE)."""
    if not isinstance(tokenizer, CharTokenizer):
        return []
    known = set(tokenizer.chars)
    return sorted({c for c in prompt if c not in known})


def start_token(tokenizer: Tokenizer) -> int:
    """What an empty prompt feeds the model: BPE's end-of-text token (where documents start),
    else a newline, else the first character of the vocabulary."""
    if isinstance(tokenizer, CharTokenizer):
        return tokenizer.chars.index("\n") if "\n" in tokenizer.chars else 0
    import tiktoken

    return int(tiktoken.get_encoding(tokenizer.name).eot_token)


def encode_prompt(tokenizer: Tokenizer, prompt: str, block_size: int) -> EncodedPrompt:
    """The prompt's tokens for the model; a PromptError for characters a char model never saw."""
    unknown = unknown_characters(tokenizer, prompt)
    if unknown:
        shown = " ".join(repr(c) for c in unknown[:20]) + (" ..." if len(unknown) > 20 else "")
        raise PromptError(
            f"the prompt has characters this model never saw: {shown}; a char-level model's "
            f"vocabulary is its run's corpus characters ({tokenizer.vocab_size} of them): "
            "leave those out"
        )
    ids = tokenizer.encode(prompt) or [start_token(tokenizer)]
    cropped = max(0, len(ids) - block_size)
    return EncodedPrompt(ids=ids[cropped:], cropped=cropped)


def generate_tokens(
    model: Any,
    ids: list[int],
    options: SamplingOptions,
    device: torch.device,
    generator: torch.Generator | None,
    autocast: contextlib.AbstractContextManager[Any] | None = None,
) -> Iterator[int]:
    """Token ids after `ids`, one at a time as the model produces them: the tokenizer's ids
    only (the model's `next_token` never picks a row of its padded vocabulary)."""
    block_size = model.cfg.block_size
    idx = torch.tensor([ids[-block_size:]], dtype=torch.long, device=device)
    for _ in range(options.max_new_tokens):
        with torch.no_grad(), autocast or contextlib.nullcontext():
            next_id = model.next_token(idx, options.temperature, options.top_k or None, generator)
        idx = torch.cat((idx, next_id), dim=1)[:, -block_size:]  # the model sees no more anyway
        yield int(next_id.item())


def stream_text(
    model: Any,
    tokenizer: Tokenizer,
    ids: list[int],
    options: SamplingOptions,
    device: torch.device,
    generator: torch.Generator | None,
    autocast: contextlib.AbstractContextManager[Any] | None = None,
) -> Iterator[str]:
    """The continuation of `ids` as pieces of complete text, each as soon as it is known."""
    tokens = generate_tokens(model, ids, options, device, generator, autocast)
    yield from decode_stream(tokens, token_bytes_function(tokenizer))
