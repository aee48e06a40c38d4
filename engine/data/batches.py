"""Where a run's (x, y) batches come from: random training windows, and evaluation windows (the
same at every eval). Training draws from its own generator, saved in the checkpoint, so a resume
draws the very batches the run would have; batches made ahead by a background thread never move
that saved state. Under a `ShapeSchedule` a change of shape discards what was made ahead.
"""

from __future__ import annotations

import functools
import math
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from engine.data.shape_schedule import ShapeSchedule, micro_batch_sizes

PREFETCH_DEPTH = 3  # batches made ahead: enough to hide a slow read, little memory held


def _windows(tokens: np.ndarray, starts: np.ndarray, block_size: int) -> torch.Tensor:
    """Rows of `block_size + 1` tokens beginning at `starts`, as int64 on the CPU."""
    return torch.from_numpy(tokens[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))


def to_device(rows: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Rows moved to `device`: through pinned memory and a non-blocking copy on CUDA (the copy
    overlaps compute), a plain move elsewhere (pinning needs CUDA)."""
    if device.type == "cuda":
        return rows.pin_memory().to(device, non_blocking=True)
    return rows.to(device)


def draw_rows(
    tokens: np.ndarray,
    block_size: int,
    batch_size: int,
    device: torch.device,
    generator: torch.Generator,
) -> torch.Tensor:
    """`batch_size` random windows of `block_size + 1` tokens on `device`, advancing
    `generator`."""
    starts = torch.randint(len(tokens) - block_size - 1, (batch_size,), generator=generator)
    return to_device(_windows(tokens, starts.numpy(), block_size), device)


def prefetch_device(device: torch.device) -> torch.device:
    """Where the prefetch thread leaves its batches: on the GPU for CUDA (pinned memory and a
    non-blocking copy, safe from another thread); on the CPU otherwise, the training thread
    moving them (MPS and other backends are not known to be safe to use from two threads)."""
    return device if device.type == "cuda" else torch.device("cpu")


def _x_y(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return rows[:, :-1], rows[:, 1:]


@dataclass
class _Prepared:
    """A batch made ahead, with the generator state right after it was drawn (where the next
    batch starts), or the error making it raised (raised again in the training thread)."""

    rows: torch.Tensor | None
    state_after: torch.Tensor | None
    error: BaseException | None = None


class _Prefetcher:
    """A thread that fills a bounded queue with batches drawn from `generator`. It owns the
    generator while it runs: nobody else touches it until `stop()` has joined the thread."""

    def __init__(
        self,
        draw: Callable[[], torch.Tensor],
        generator: torch.Generator,
        depth: int,
    ) -> None:
        self.queue: queue.Queue[_Prepared] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._fill, args=(draw, generator), name="cockpit-batch-prefetch", daemon=True
        )
        self._thread.start()

    def _fill(
        self, draw: Callable[[], torch.Tensor], generator: torch.Generator
    ) -> None:
        while not self._stop.is_set():
            try:
                rows = draw()
            except BaseException as e:  # noqa: BLE001 - handed to the training thread as is
                self.queue.put(_Prepared(None, None, e))
                return
            self.queue.put(_Prepared(rows, generator.get_state()))

    def stop(self) -> None:
        """End the thread and drop what it made: emptying the queue frees a blocked put, and
        after the stop flag it puts at most one more batch before it sees the flag."""
        self._stop.set()
        while self._thread.is_alive():
            self._drain()
            self._thread.join(timeout=0.05)
        self._drain()

    def _drain(self) -> None:
        try:
            while True:
                self.queue.get_nowait()
        except queue.Empty:
            pass


class _ConsumedRng:
    """`BatchSampler.generator` as a checkpoint sees it: get_state/set_state of the position of
    the next batch the training loop takes, wherever the prefetch thread has got to."""

    def __init__(self, sampler: BatchSampler) -> None:
        self._sampler = sampler

    def get_state(self) -> torch.Tensor:
        return self._sampler.rng_state()

    def set_state(self, state: torch.Tensor) -> None:
        self._sampler.set_rng_state(state)


class BatchSampler:
    """Random (x, y) windows from a token array, from its own generator so resume is exact.

    `prefetch`: batches made ahead by a thread (None: PREFETCH_DEPTH for a memory-mapped corpus,
    none in memory; 0: none); `close()` stops it. `schedule`: each step's shape (`at_step`)."""

    def __init__(
        self,
        tokens: np.ndarray,
        block_size: int,
        batch_size: int,
        device: torch.device,
        seed: int,
        prefetch: int | None = None,
        schedule: ShapeSchedule | None = None,
    ) -> None:
        self.tokens = tokens
        self.block_size = block_size
        self._batch_size = batch_size
        self._schedule = schedule if schedule is not None and schedule.on else None
        self._step = 0
        self._shape = self._scheduled_shape(0)  # (sequences, tokens) of the next batches
        self.device = device
        self._generator = torch.Generator().manual_seed(seed)
        self._consumed_state = self._generator.get_state()  # before the next batch taken
        self.prefetch = (
            (PREFETCH_DEPTH if isinstance(tokens, np.memmap) else 0) if prefetch is None else prefetch
        )
        self._prefetcher: _Prefetcher | None = None
        self._finalizer: weakref.finalize | None = None

    # ---------------------------------------------------------------- what a checkpoint saves
    @property
    def generator(self) -> _ConsumedRng:
        """The generator's state as of the next batch `next()` returns (checkpoints use it)."""
        return _ConsumedRng(self)

    def rng_state(self) -> torch.Tensor:
        return self._consumed_state.clone()

    def set_rng_state(self, state: torch.Tensor) -> None:
        """Continue from `state` (a restore or rollback): batches made ahead are discarded."""
        self._discard_prefetched()
        self._generator.set_state(state)
        self._consumed_state = self._generator.get_state()

    # ---------------------------------------------------------------- the micro-batch size
    @property
    def batch_size(self) -> int:
        """The micro-batch once a batch-size schedule has ramped (all along without one)."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, size: int) -> None:
        """A new size (an out-of-memory retry halves it): batches made ahead at the old size
        are discarded, and the next one is drawn from where the loop had got to."""
        self._batch_size = size
        self._reshape(self._scheduled_shape(self._step))

    @property
    def shape(self) -> tuple[int, int]:
        """(sequences, tokens per sequence) of the batches `next()` returns now."""
        return self._shape

    def at_step(self, step: int) -> None:
        """The batches from now on are step `step`'s (the number of steps done before it): of
        the schedule's shape at that step. Nothing changes without a schedule."""
        self._step = step
        shape = self._scheduled_shape(step)
        if shape != self._shape:
            self._reshape(shape)

    def micro_batches(self, micro_steps: int) -> tuple[int, ...]:
        """Sequences of each of the `micro_steps` micro-batches of `at_step`'s step: together
        the schedule's sequences for this sampler. Split from a micro-batch the schedule does
        not name (an out-of-memory retry's half: micro_batch_sizes), they may differ (1 + 2 of
        a scheduled 3), and a 0 is a micro-step with nothing to take."""
        sequences, _ = self._shape
        if self._schedule is None or self._batch_size == self._schedule.batch_size:
            return (sequences,) * micro_steps
        scheduled = self._schedule.batch_at(self._step) * self._batch_size * micro_steps
        if scheduled % self._schedule.batch_size:
            # not whole (a rank's share that launch refuses): the share rounded up, as drawn
            return (sequences,) * micro_steps
        return micro_batch_sizes(scheduled // self._schedule.batch_size, micro_steps)

    def take(self, sequences: int) -> None:
        """The next batches have `sequences` sequences (one of `micro_batches`), drawn from the
        loop's position on; nothing changes when they have already."""
        if sequences != self._shape[0]:
            self._reshape((sequences, self._shape[1]))

    def _scheduled_shape(self, step: int) -> tuple[int, int]:
        if self._schedule is None:
            return self._batch_size, self.block_size
        batch = self._schedule.batch_at(step)
        if self._batch_size != self._schedule.batch_size:
            # this sampler's share of the configured micro-batch (a rank's split of it, or an
            # out-of-memory retry's half), rounded up: never an empty batch (`micro_batches`
            # says what each micro-step of the step takes, exactly the schedule's)
            batch = math.ceil(batch * self._batch_size / self._schedule.batch_size)
        return batch, self._schedule.seq_at(step)

    def _reshape(self, shape: tuple[int, int]) -> None:
        """Batches of `shape` from the loop's position on (those made ahead are dropped)."""
        self._discard_prefetched()
        self._generator.set_state(self._consumed_state)
        self._shape = shape

    # ---------------------------------------------------------------- batches
    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        sequences, seq_len = self._shape
        if self.prefetch <= 0:
            rows = draw_rows(self.tokens, seq_len, sequences, self.device, self._generator)
            self._consumed_state = self._generator.get_state()
            return _x_y(rows)
        if self._prefetcher is None:
            # The thread holds the parts it draws with, not the sampler: an unclosed sampler can
            # still be garbage-collected, and its finalizer stops the thread.
            draw = functools.partial(
                draw_rows,
                self.tokens,
                seq_len,
                sequences,
                prefetch_device(self.device),
                self._generator,
            )
            self._prefetcher = _Prefetcher(draw, self._generator, self.prefetch)
            self._finalizer = weakref.finalize(self, self._prefetcher.stop)
        prepared = self._prefetcher.queue.get()
        if prepared.error is not None:
            # The thread has ended: the next call starts again from the last batch taken.
            self.set_rng_state(self._consumed_state)
            raise prepared.error
        self._consumed_state = prepared.state_after
        rows = prepared.rows
        if rows.device.type != self.device.type:
            rows = rows.to(self.device)
        return _x_y(rows)

    def close(self) -> None:
        """Stop the prefetch thread (if any); `next()` would start a new one."""
        self._discard_prefetched()
        self._generator.set_state(self._consumed_state)

    def _discard_prefetched(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # stops the thread, once
        self._prefetcher = None
        self._finalizer = None


def eval_starts(
    n_tokens: int,
    block_size: int,
    *,
    full: bool,
    windows: int,
    seed: int,
    max_windows: int | None = None,
) -> np.ndarray:
    """Start positions of the windows an evaluation reads from a split of `n_tokens` tokens.

    full: every non-overlapping window, in order (the same answer every time); with
    `max_windows`, at most that many of them, evenly spread over the split (a bounded
    evaluation of a large split still sees all of it). Otherwise `windows` random windows from
    a generator seeded with `seed`: the same ones at every eval.
    """
    if full:
        starts = np.arange(0, n_tokens - block_size - 1, block_size)
        if max_windows is not None and len(starts) > max_windows:
            starts = starts[np.linspace(0, len(starts) - 1, max_windows).astype(np.int64)]
        return starts
    g = torch.Generator().manual_seed(seed)
    return torch.randint(n_tokens - block_size - 1, (windows,), generator=g).numpy()


def full_split_windows(n_tokens: int, block_size: int) -> int:
    """How many non-overlapping windows a whole-split evaluation of `n_tokens` tokens reads."""
    return len(range(0, n_tokens - block_size - 1, block_size))


def eval_batches(
    tokens: np.ndarray,
    block_size: int,
    batch_size: int,
    device: torch.device,
    *,
    full: bool,
    batches: int,
    seed: int,
    max_windows: int | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The (x, y) batches of an evaluation of `tokens`: `batches` batches of fixed random
    windows, or with `full` every non-overlapping window in order, at most `max_windows` of
    them (the last batch may be smaller)."""
    starts = eval_starts(
        len(tokens),
        block_size,
        full=full,
        windows=batches * batch_size,
        seed=seed,
        max_windows=max_windows,
    )
    for i in range(0, len(starts), batch_size):
        rows = _windows(tokens, starts[i : i + batch_size], block_size).to(device)
        yield rows[:, :-1], rows[:, 1:]
