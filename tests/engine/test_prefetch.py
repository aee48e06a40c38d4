"""Training batches made ahead by a background thread (engine/data/batches.py), and the bounded
whole-split evaluation (engine/model/evaluation.py). Real memmapped token files, the real step and
Trainer; only CUDA is faked (pinning and the copy are checked as calls)."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny_overrides

import engine.data.batches as batches
import engine.model.evaluation as evaluation
from engine.config.presets import load_preset
from engine.data.batches import BatchSampler, prefetch_device, to_device
from engine.data.preparation import PreparedData
from engine.data.tokenizers import CharTokenizer
from engine.model.evaluation import Evaluator
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.train.step import StepParts, train_step
from engine.train.trainer import Trainer

CPU = torch.device("cpu")
BLOCK = 8
VOCAB = 11
TINY_TRAINER = tiny_overrides("sample.max_new_tokens=4")


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cockpit-batch-prefetch"]


def memmapped_tokens(tmp_path: Path, n: int = 5000) -> np.memmap:
    """A token file on disk opened as the prepared corpus is (np.memmap)."""
    path = tmp_path / "train.bin"
    (np.arange(n, dtype=np.uint16) % VOCAB).tofile(path)
    return np.memmap(path, dtype=np.uint16, mode="r", shape=(n,))


def take(sampler: BatchSampler, n: int) -> list[torch.Tensor]:
    return [sampler.next()[0].clone() for _ in range(n)]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.fixture
def tokens(tmp_path: Path) -> np.memmap:
    return memmapped_tokens(tmp_path)


@pytest.fixture(autouse=True)
def _no_thread_left_behind():
    yield
    deadline = time.monotonic() + 2
    while prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not prefetch_threads(), "a prefetch thread outlived its test"


# ---------------------------------------------------------------------- the sampler
def test_a_memmapped_corpus_is_prefetched_an_array_in_memory_is_not(tokens) -> None:
    assert BatchSampler(tokens, BLOCK, 4, CPU, seed=1).prefetch == batches.PREFETCH_DEPTH
    assert BatchSampler(np.array(tokens), BLOCK, 4, CPU, seed=1).prefetch == 0


def test_prefetched_batches_are_the_batches_drawn_without_prefetch(tokens) -> None:
    plain = BatchSampler(tokens, BLOCK, 4, CPU, seed=7, prefetch=0)
    ahead = BatchSampler(tokens, BLOCK, 4, CPU, seed=7)
    try:
        assert same(take(ahead, 12), take(plain, 12))
        x, y = ahead.next()
        assert x.dtype == torch.int64 and x.shape == (4, BLOCK) and torch.equal(y[:, :-1], x[:, 1:])
    finally:
        ahead.close()


def test_the_saved_state_is_the_next_batch_the_loop_takes_not_the_threads(tokens) -> None:
    plain = BatchSampler(tokens, BLOCK, 4, CPU, seed=3, prefetch=0)
    ahead = BatchSampler(tokens, BLOCK, 4, CPU, seed=3, prefetch=4)
    try:
        take(plain, 5)
        take(ahead, 5)
        time.sleep(0.05)  # the thread fills its queue: the generator itself is 4 batches on
        assert torch.equal(ahead.generator.get_state(), plain.generator.get_state())
        saved = ahead.generator.get_state()
        expected = take(plain, 6)
        resumed = BatchSampler(tokens, BLOCK, 4, CPU, seed=99)
        resumed.generator.set_state(saved)  # what Checkpointer.restore does
        try:
            assert same(take(resumed, 6), expected)
        finally:
            resumed.close()
    finally:
        ahead.close()


def test_a_restore_discards_the_batches_made_ahead(tokens) -> None:
    reference = take(BatchSampler(tokens, BLOCK, 4, CPU, seed=5, prefetch=0), 10)
    ahead = BatchSampler(tokens, BLOCK, 4, CPU, seed=5)
    try:
        take(ahead, 2)
        rollback_to = ahead.generator.get_state()
        take(ahead, 5)
        time.sleep(0.05)
        ahead.generator.set_state(rollback_to)  # a rollback to the checkpoint after batch 2
        assert same(take(ahead, 8), reference[2:])
    finally:
        ahead.close()


def test_a_smaller_micro_batch_discards_the_batches_made_at_the_old_size(tokens) -> None:
    plain = BatchSampler(tokens, BLOCK, 8, CPU, seed=2, prefetch=0)
    ahead = BatchSampler(tokens, BLOCK, 8, CPU, seed=2)
    try:
        assert same(take(ahead, 3), take(plain, 3))
        time.sleep(0.05)
        plain.batch_size = ahead.batch_size = 4  # what FaultHandler.shrink_micro_batch does
        got, expected = take(ahead, 5), take(plain, 5)
        assert all(x.shape == (4, BLOCK) for x in got)
        assert same(got, expected)
    finally:
        ahead.close()


def test_an_error_in_the_thread_is_raised_in_the_loop_then_it_goes_on(tokens, monkeypatch) -> None:
    reference = take(BatchSampler(tokens, BLOCK, 4, CPU, seed=4, prefetch=0), 4)
    ahead = BatchSampler(tokens, BLOCK, 4, CPU, seed=4)
    real_windows = batches._windows
    calls = {"n": 0}

    def failing_third(*args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(5, "Input/output error")
        return real_windows(*args)

    monkeypatch.setattr(batches, "_windows", failing_third)
    try:
        assert same(take(ahead, 2), reference[:2])
        with pytest.raises(OSError, match="Input/output error"):
            ahead.next()
        # the disk is back: the batch that failed is drawn again, and what follows
        assert same(take(ahead, 2), reference[2:])
    finally:
        ahead.close()


def test_close_and_garbage_collection_end_the_thread(tokens) -> None:
    ahead = BatchSampler(tokens, BLOCK, 4, CPU, seed=1)
    ahead.next()
    assert len(prefetch_threads()) == 1
    ahead.close()
    assert not prefetch_threads()
    forgotten = BatchSampler(tokens, BLOCK, 4, CPU, seed=1)
    forgotten.next()
    assert len(prefetch_threads()) == 1
    del forgotten  # never closed: its finalizer stops the thread
    assert not prefetch_threads()


# ---------------------------------------------------------------------- CUDA, faked
def test_pinned_memory_and_a_non_blocking_copy_only_on_cuda(monkeypatch) -> None:
    calls: list[tuple] = []

    def fake_pin(self):
        calls.append(("pin",))
        return self

    def fake_to(self, device, non_blocking=False):
        calls.append(("to", torch.device(device).type, non_blocking))
        return self

    monkeypatch.setattr(torch.Tensor, "pin_memory", fake_pin)
    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    rows = torch.zeros((2, 3), dtype=torch.int64)
    to_device(rows, torch.device("cuda"))
    assert calls == [("pin",), ("to", "cuda", True)]
    calls.clear()
    to_device(rows, CPU)
    assert calls == [("to", "cpu", False)]


def test_only_cuda_batches_are_moved_to_the_device_by_the_thread() -> None:
    assert prefetch_device(torch.device("cuda")) == torch.device("cuda")
    assert prefetch_device(torch.device("cuda:1")) == torch.device("cuda:1")
    for elsewhere in ("cpu", "mps"):  # the training thread moves these itself
        assert prefetch_device(torch.device(elsewhere)) == CPU


# ---------------------------------------------------------------------- the data wait
@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_a_slow_step_hides_the_batch_making(tokens, monkeypatch) -> None:
    """Making a batch takes 10 ms, the model 40 ms: prefetched, the loop hardly waits."""
    real_windows = batches._windows

    def slow_windows(*args):
        time.sleep(0.01)
        return real_windows(*args)

    monkeypatch.setattr(batches, "_windows", slow_windows)
    cfg = load_preset("tiny", ["model.n_layer=1", "model.n_embd=16", f"model.block_size={BLOCK}"])
    torch.manual_seed(0)
    model = GPT(cfg.model, VOCAB)

    def slow_forward(x, y=None):
        time.sleep(0.04)
        return model(x, y)

    def data_waits(prefetch: int) -> list[float]:
        sampler = BatchSampler(tokens, BLOCK, 4, CPU, seed=1, prefetch=prefetch)
        parts = StepParts(
            cfg=cfg,
            model=model,
            forward=slow_forward,
            scaler=torch.amp.GradScaler("cpu", enabled=False),
            autocast=contextlib.nullcontext(),
            batches=sampler,
            device=CPU,
            dtype=torch.float32,
            micro_steps=cfg.train.grad_accum,
            grad_sync=lambda last: contextlib.nullcontext(),
        )
        optimizer = build_optimizer(model, cfg.optim, "cpu")
        try:
            return [
                train_step(parts, optimizer, step, 1.0, False).pending.data_time_s
                for step in range(8)
            ]
        finally:
            sampler.close()

    without, with_prefetch = data_waits(0), data_waits(3)
    assert min(without) >= 0.009  # every batch waited for
    # made while the model ran (the first is a cold start); a loaded machine may delay one
    # hand-over by a GIL switch interval (5 ms), so look at the typical wait and the total
    assert float(np.median(with_prefetch[1:])) < 0.002
    assert sum(with_prefetch[1:]) < 0.3 * sum(without[1:])


# ---------------------------------------------------------------------- a real run
def run_straight_or_split(run_dir: Path, split_at: int | None, total: int = 16):
    """Train `total` steps straight, or stop at `split_at` and resume; (weights, losses)."""
    cfg = load_preset(
        "default",
        [
            *TINY_TRAINER,
            f"train.max_steps={total}",
            "model.dropout=0.1",
            "eval.interval=0",
            "sample.interval=0",
            "checkpoint.interval=0",
        ],
    )
    losses: dict[int, float] = {}

    def record(event) -> None:
        if event.kind == "step":
            losses[event.step] = event.loss

    trainer = Trainer(cfg, run_dir=run_dir, sinks=[record], telemetry=False)
    if split_at is not None:
        trainer.sinks.append(
            lambda e: e.kind == "step" and e.step == split_at and trainer.stop()
        )
    trainer.run()
    # the prepared corpus is memmapped: prefetched
    assert trainer.built.parts.train_batches.prefetch > 0
    if split_at is not None:
        assert trainer.state == "stopped" and trainer.step == split_at
        assert not prefetch_threads()
        trainer = Trainer(cfg, resume=run_dir, sinks=[record], telemetry=False)
        trainer.run()
    assert trainer.state == "finished"
    assert not prefetch_threads()  # the run ended: so did its thread
    return trainer.built.parts.model.state_dict(), losses


def test_resume_with_prefetch_is_bit_exact(tmp_path) -> None:
    straight_weights, straight_losses = run_straight_or_split(tmp_path / "a", None)
    split_weights, split_losses = run_straight_or_split(tmp_path / "b", 8)
    assert straight_losses == split_losses  # identical floats, every step
    for name, tensor in straight_weights.items():
        assert torch.equal(tensor, split_weights[name]), name


# ---------------------------------------------------------------------- bounded full eval
def evaluator_and_data(val_tokens: int) -> tuple[Evaluator, PreparedData]:
    cfg = load_preset("default", [*TINY_TRAINER, "model.block_size=8", "eval.full_val=true"])
    text = "abcdefgh " * 200
    tok = CharTokenizer.from_text(text)
    ids = np.array(tok.encode(text), dtype=np.uint16)
    data = PreparedData(
        train=ids[:400], val=ids[400 : 400 + val_tokens], tokenizer=tok, meta={}, source="test"
    )
    torch.manual_seed(0)
    model = GPT(cfg.model, tok.vocab_size)
    return Evaluator(model, model, contextlib.nullcontext(), CPU, cfg), data


def test_a_full_eval_under_the_bound_reads_the_whole_split() -> None:
    evaluator, data = evaluator_and_data(val_tokens=800)
    evaluator.losses(data)
    assert evaluator.val_full
    assert evaluator.capped_note() is None


def test_a_full_eval_over_the_bound_reads_windows_spread_over_the_split() -> None:
    evaluator, data = evaluator_and_data(val_tokens=1400)
    evaluator.full_val_max_tokens = 80  # 10 windows of 8 tokens, of the 173 in the split
    _, capped = evaluator.losses(data)
    assert not evaluator.val_full
    starts = batches.eval_starts(1400, 8, full=True, windows=0, seed=0, max_windows=10)
    assert len(starts) == 10 and starts[0] == 0 and starts[-1] > 1300  # the whole split, spread
    assert len(set(starts.tolist())) == 10
    evaluator.full_val_max_tokens = 10**9
    _, whole = evaluator.losses(data)
    assert evaluator.val_full and whole != capped
    note = evaluator.capped_note()
    assert note is not None and "1,400 tokens" in note and "80 of them" in note
    assert evaluator.capped_note() is None  # once, not at every eval


def test_a_capped_run_says_so_once_and_its_evals_are_not_whole(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(evaluation, "FULL_VAL_MAX_TOKENS", 64)
    cfg = load_preset(
        "default",
        [
            *TINY_TRAINER,
            "train.max_steps=6",
            "eval.interval=2",
            "eval.full_val=true",
            "sample.interval=0",
            "checkpoint.interval=0",
        ],
    )
    events = []
    assert Trainer(cfg, run_dir=tmp_path, sinks=[events.append], telemetry=False).run() == (
        "finished"
    )
    evals = [e for e in events if e.kind == "eval"]
    assert len(evals) == 3 and not any(e.full_split for e in evals)
    notes = [e for e in events if e.kind == "alert" and e.code == "eval"]
    assert len(notes) == 1 and notes[0].level == "info" and "64 of them" in notes[0].message


def test_a_rollback_replays_the_same_batches_not_the_ones_made_ahead(tmp_path) -> None:
    """Roll back to step 8 at step 12 with the LR unchanged: steps 9-12 again, identically."""
    cfg = load_preset(
        "default",
        [
            *TINY_TRAINER,
            "train.max_steps=14",
            "model.dropout=0.1",
            "train.log_every=1",
            "eval.interval=0",
            "sample.interval=0",
            "checkpoint.interval=8",
        ],
    )
    steps: list[tuple[int, float]] = []
    trainer = Trainer(cfg, run_dir=tmp_path, telemetry=False, interactive=False)

    def record(event) -> None:
        if event.kind == "step":
            steps.append((event.step, event.loss))
            if event.step == 12 and len(steps) == 12:
                trainer.rollback(1.0)

    trainer.sinks.append(record)
    assert trainer.run() == "finished"
    assert [s for s, _ in steps] == [*range(1, 13), *range(9, 15)]
    assert steps[12:16] == steps[8:12]  # the same losses: the same batches, from step 9 on
