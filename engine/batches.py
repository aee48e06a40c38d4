"""Where a run's (x, y) batches come from: random training windows, and evaluation windows.

Both cut `block_size + 1` tokens at a set of start positions: x is the first block_size tokens,
y the same shifted by one. Training draws its starts from its own generator (saved in the
checkpoint, so a resume draws the very batches the run would have drawn); evaluation uses the
same windows at every eval, so its curve compares like with like.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch


def _windows(tokens: np.ndarray, starts: np.ndarray, block_size: int) -> torch.Tensor:
    """Rows of `block_size + 1` tokens beginning at `starts`, as int64 on the CPU."""
    return torch.from_numpy(tokens[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))


class BatchSampler:
    """Random (x, y) windows from a token array, from its own generator so resume is exact."""

    def __init__(
        self, tokens: np.ndarray, block_size: int, batch_size: int, device: torch.device, seed: int
    ) -> None:
        self.tokens = tokens
        self.block_size = block_size
        self.batch_size = batch_size
        self.device = device
        self.generator = torch.Generator().manual_seed(seed)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(
            len(self.tokens) - self.block_size - 1, (self.batch_size,), generator=self.generator
        )
        rows = _windows(self.tokens, starts.numpy(), self.block_size)
        if self.device.type == "cuda":
            rows = rows.pin_memory().to(self.device, non_blocking=True)
        else:
            rows = rows.to(self.device)
        return rows[:, :-1], rows[:, 1:]


def eval_starts(
    n_tokens: int, block_size: int, *, full: bool, windows: int, seed: int
) -> np.ndarray:
    """Start positions of the windows an evaluation reads from a split of `n_tokens` tokens.

    full: every non-overlapping window, in order (the same answer every time). Otherwise
    `windows` random windows from a generator seeded with `seed`: the same ones at every eval.
    """
    if full:
        return np.arange(0, n_tokens - block_size - 1, block_size)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(n_tokens - block_size - 1, (windows,), generator=g).numpy()


def eval_batches(
    tokens: np.ndarray,
    block_size: int,
    batch_size: int,
    device: torch.device,
    *,
    full: bool,
    batches: int,
    seed: int,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The (x, y) batches of an evaluation of `tokens`: `batches` batches of fixed random
    windows, or with `full` every non-overlapping window in order (the last batch may be
    smaller)."""
    starts = eval_starts(
        len(tokens), block_size, full=full, windows=batches * batch_size, seed=seed
    )
    for i in range(0, len(starts), batch_size):
        rows = _windows(tokens, starts[i : i + batch_size], block_size).to(device)
        yield rows[:, :-1], rows[:, 1:]
