"""Measuring a model while it trains: the loss on each split, and text sampled from prompts.

`Evaluator` holds what both need (the model, its compiled forward, the autocast context, the
device, the run's config) and returns plain values; the Trainer turns them into `Eval` and
`Sample` events. Both put the model in eval mode and back in train mode, even on an error.
A whole-split evaluation (eval.full_val) reads at most FULL_VAL_MAX_TOKENS of the val split.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from engine.config.run_config import RunConfig
from engine.data.batches import eval_batches, full_split_windows
from engine.data.preparation import PreparedData
from engine.data.tokenizers import Tokenizer
from engine.distributed.world import World, sum_over_ranks
from engine.model.gpt import GPT
from engine.model.sampling import start_token, unknown_characters

# Evaluation windows are drawn from their own seed, apart from training's and sampling's.
EVAL_SEED_OFFSET = 3
# The most val tokens a whole-split evaluation reads (a constant, not a config key). A corpus of
# billions of tokens can have a val split of hundreds of millions: reading it all at every eval
# is an epoch, not an evaluation.
FULL_VAL_MAX_TOKENS = 10_000_000


def bits_per_byte(loss: float, tokens: int, text_bytes: int) -> float | None:
    """A mean loss per token (nats) in bits per byte of text, as nanochat reports it: over
    ln 2, times the split's tokens per byte. None where it has no value: a loss that is not
    finite, or a split without text."""
    if not math.isfinite(loss) or tokens <= 0 or text_bytes <= 0:
        return None
    return loss / math.log(2) * tokens / text_bytes


def full_val_windows(n_tokens: int, block_size: int, max_tokens: int) -> tuple[int, bool]:
    """(windows a whole-split evaluation of `n_tokens` reads, whether that is the whole
    split) under a bound of `max_tokens` tokens."""
    bound = max(1, max_tokens // block_size)
    every = full_split_windows(n_tokens, block_size)
    return min(every, bound), every <= bound


@dataclass
class Evaluator:
    model: GPT
    forward: Callable[..., Any]  # the model, or its torch.compile'd wrapper
    autocast: contextlib.AbstractContextManager[Any]
    device: torch.device
    cfg: RunConfig  # read at each call: an out-of-memory retry halves cfg.train.batch_size
    world: World = field(default_factory=World)
    # under DDP, batches are split over the ranks and the sums reduced (a sharded model
    # evaluates every batch on every rank: its forwards are collectives)
    split_over_ranks: bool = False
    full_val_max_tokens: int = field(default_factory=lambda: FULL_VAL_MAX_TOKENS)
    # What the last `losses` read of the val split: all of it (Eval.full_split), or a bounded
    # part of a whole-split evaluation (`capped_note` says so once).
    val_full: bool = field(default=False, init=False)
    _cap_note: str | None = field(default=None, init=False)
    _cap_noted: bool = field(default=False, init=False)
    _prompts_noted: bool = field(default=False, init=False)

    @torch.no_grad()
    def split_loss(
        self, tokens: np.ndarray, *, full: bool, max_windows: int | None = None
    ) -> float:
        """Mean loss over the evaluation windows of one split; a full evaluation reads at most
        `max_windows` windows."""
        cfg = self.cfg
        world = self.world
        split = self.split_over_ranks and world.distributed  # round-robin shares
        total = torch.zeros((), device=self.device)
        count = 0
        for i, (x, y) in enumerate(eval_batches(
            tokens,
            cfg.model.block_size,
            cfg.eval.batch_size or cfg.train.batch_size,
            self.device,
            full=full,
            batches=cfg.eval.batches,
            seed=cfg.train.seed + EVAL_SEED_OFFSET,
            max_windows=max_windows,
        )):
            if split and i % world.world_size != world.rank:
                continue
            with self.autocast:
                _, loss = self.forward(x, y)
            n = x.size(0)
            total += loss.float() * n  # summed on the device: one sync at the end
            count += n
        if split:
            sums = sum_over_ranks(torch.stack([total, total.new_tensor(float(count))]), world)
            total, count = sums[0], sums[1]
        return float(total / count)

    def losses(self, data: PreparedData) -> tuple[float, float]:
        """(train loss, val loss); the val split in full when eval.full_val is set, up to
        `full_val_max_tokens` tokens (windows spread evenly over it); `val_full` says which."""
        full, block = self.cfg.eval.full_val, self.cfg.model.block_size
        windows, whole = full_val_windows(len(data.val), block, self.full_val_max_tokens)
        self.model.eval()
        try:
            train = self.split_loss(data.train, full=False)
            val = self.split_loss(data.val, full=full, max_windows=windows)
        finally:
            self.model.train()
        self.val_full = full and whole
        if full and not whole and self._cap_note is None:
            self._cap_note = (
                f"the val split has {len(data.val):,} tokens: each full evaluation reads "
                f"{windows * block:,} of them ({windows:,} windows spread over the split; "
                f"the bound is FULL_VAL_MAX_TOKENS in engine/model/evaluation.py)"
            )
        return train, val

    def bits_per_byte(
        self, data: PreparedData, train_loss: float, val_loss: float
    ) -> tuple[float | None, float | None]:
        """(train, val) losses in bits per byte of their split's text; None where the split's
        bytes are not known (counted once, on the first call)."""
        counts = data.split_bytes()
        if counts is None:
            return None, None
        train_bytes, val_bytes = counts
        return (
            bits_per_byte(train_loss, len(data.train), train_bytes),
            bits_per_byte(val_loss, len(data.val), val_bytes),
        )

    def capped_note(self) -> str | None:
        """Once per run, after the first whole-split evaluation that read only part of the
        split: a line saying so (an info alert); None otherwise."""
        if self._cap_note is None or self._cap_noted:
            return None
        self._cap_noted = True
        return self._cap_note

    @torch.no_grad()
    def samples(
        self, tokenizer: Tokenizer, generator: torch.Generator
    ) -> Iterator[tuple[str, str]]:
        """(prompt, generated text) for each configured prompt, one at a time as generated;
        the prompt as the model was given it: a char-level model has no token for a character
        its corpus never had, so those are left out (prompt_note says which, once)."""
        s = self.cfg.sample
        self.model.eval()
        try:
            for prompt in s.prompts:
                ids = tokenizer.encode(prompt)
                given = tokenizer.decode(ids) if ids else ""
                ids = ids or [start_token(tokenizer)]  # BPE: end-of-text
                idx = torch.tensor([ids], dtype=torch.long, device=self.device)
                with self.autocast:
                    out = self.model.generate(
                        idx, s.max_new_tokens, s.temperature, s.top_k or None, generator
                    )
                yield given, tokenizer.decode(out[0, len(ids) :].tolist())
        finally:
            self.model.train()

    def prompt_note(self, tokenizer: Tokenizer) -> str | None:
        """Once per run: the configured sample prompts that lost characters this model has no
        token for, and what it was given instead (an info alert); None when none did."""
        if self._prompts_noted:
            return None
        self._prompts_noted = True
        lost = []
        for prompt in self.cfg.sample.prompts:
            if unknown := unknown_characters(tokenizer, prompt):
                given = tokenizer.decode(tokenizer.encode(prompt))
                chars = " ".join(repr(c) for c in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
                lost.append(f"{prompt!r} is given as {given!r} (no token for {chars})")
        if not lost:
            return None
        return (
            f"sample prompts: {'; '.join(lost)}: a char-level model knows only its corpus's "
            f"characters; the samples record the prompt it was given"
        )
