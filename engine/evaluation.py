"""Measuring a model while it trains: the loss on each split, and text sampled from prompts.

`Evaluator` holds what both need (the model, its compiled forward, the autocast context, the
device, the run's config) and returns plain values; the Trainer turns them into `Eval` and
`Sample` events. Both put the model in eval mode and back in train mode, even on an error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from engine.batches import eval_batches
from engine.config import RunConfig
from engine.data import PreparedData, Tokenizer
from engine.model import GPT
from engine.sampling import start_token

# Evaluation windows are drawn from their own seed, apart from training's and sampling's.
EVAL_SEED_OFFSET = 3


@dataclass
class Evaluator:
    model: GPT
    forward: Callable[..., Any]  # the model, or its torch.compile'd wrapper
    autocast: contextlib.AbstractContextManager[Any]
    device: torch.device
    cfg: RunConfig  # read at each call: an out-of-memory retry halves cfg.train.batch_size

    @torch.no_grad()
    def split_loss(self, tokens: np.ndarray, *, full: bool) -> float:
        """Mean loss over the evaluation windows of one split (engine/batches.py)."""
        cfg = self.cfg
        total, count = 0.0, 0
        for x, y in eval_batches(
            tokens,
            cfg.model.block_size,
            cfg.eval.batch_size or cfg.train.batch_size,
            self.device,
            full=full,
            batches=cfg.eval.batches,
            seed=cfg.train.seed + EVAL_SEED_OFFSET,
        ):
            with self.autocast:
                _, loss = self.forward(x, y)
            n = x.size(0)
            total += loss.float() * n  # summed on the device: one sync at the end
            count += n
        return float(total / count)

    def losses(self, data: PreparedData) -> tuple[float, float]:
        """(train loss, val loss); the val split in full when eval.full_val is set."""
        self.model.eval()
        try:
            train = self.split_loss(data.train, full=False)
            val = self.split_loss(data.val, full=self.cfg.eval.full_val)
        finally:
            self.model.train()
        return train, val

    @torch.no_grad()
    def samples(
        self, tokenizer: Tokenizer, generator: torch.Generator
    ) -> Iterator[tuple[str, str]]:
        """(prompt, generated text) for each configured prompt, one at a time as generated."""
        s = self.cfg.sample
        self.model.eval()
        try:
            for prompt in s.prompts:
                ids = tokenizer.encode(prompt) or [start_token(tokenizer)]  # BPE: end-of-text
                idx = torch.tensor([ids], dtype=torch.long, device=self.device)
                with self.autocast:
                    out = self.model.generate(
                        idx, s.max_new_tokens, s.temperature, s.top_k or None, generator
                    )
                yield prompt, tokenizer.decode(out[0, len(ids) :].tolist())
        finally:
            self.model.train()
