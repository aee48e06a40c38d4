"""An out-of-memory retry during a batch-size ramp trains exactly the schedule's sequences.

Halving the micro-batch splits each scheduled batch over twice the micro-steps; a scheduled 3
sequences of 8 once became 2 micro-steps of 2 (4 sequences), so the run trained more than its
recorded tokens_schedule said. Now the halves take 1 + 2.
"""

from __future__ import annotations

import json

import torch

from engine.config.presets import load_preset
from engine.data.shape_schedule import ShapeSchedule, micro_batch_sizes, tokens_through
from engine.rundir.summary import load_summary_file
from engine.train.trainer import Trainer

SMALL = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.n_embd=16",
    "model.block_size=16",
    "train.batch_size=8",
    "train.grad_accum=1",
    "train.batch_start=3",
    "train.batch_ramp_steps=8",
    "eval.interval=0",
    "sample.interval=0",
    "eval.batches=2",
    "train.max_steps=10",
]


def test_micro_batch_sizes_split_a_steps_sequences_as_evenly_as_they_go() -> None:
    assert micro_batch_sizes(3, 2) == (1, 2)
    assert micro_batch_sizes(6, 2) == (3, 3)
    assert micro_batch_sizes(7, 4) == (1, 2, 2, 2)
    assert micro_batch_sizes(1, 2) == (0, 1)  # nothing for the first: it is skipped
    assert micro_batch_sizes(3, 4) == (0, 1, 1, 1)
    assert micro_batch_sizes(8, 1) == (8,)


class CountingOom:
    """The model's forward, recording each call's sequences; out of memory at call `at`."""

    def __init__(self, trainer: Trainer, at: int) -> None:
        self.inner, self.at, self.calls, self.sequences = trainer.forward, at, 0, []

    def __call__(self, x, y=None):
        self.calls += 1
        if self.calls == self.at:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        self.sequences.append(x.shape[0])
        return self.inner(x, y)


def test_an_out_of_memory_retry_mid_ramp_trains_the_schedule_s_sequences(tmp_path) -> None:
    cfg = load_preset("default", SMALL)
    schedule = ShapeSchedule.of(cfg)
    # the ramp by hand: 3 + 5 * step // 8 rounded down to a multiple of 3, then 8 from step 8
    assert [schedule.batch_at(s) for s in range(10)] == [3, 3, 3, 3, 3, 6, 6, 6, 8, 8]
    trainer = Trainer(cfg, run_dir=tmp_path, telemetry=False)
    counter: list[CountingOom] = []
    original_setup = trainer._setup

    def setup() -> None:
        original_setup()
        counter.append(CountingOom(trainer, at=3))  # the third step (step 2) runs out of memory
        trainer.forward = counter[0]

    trainer._setup = setup
    events: list = []
    trainer.sinks.append(events.append)
    trainer.run()
    assert trainer.state == "finished" and trainer.step == 10
    assert (trainer.cfg.train.batch_size, trainer.cfg.train.grad_accum) == (4, 2)
    seen = counter[0].sequences
    # steps 0-1 one micro-batch of 3, then two micro-batches a step: 1 + 2, then 3 + 3, then 4 + 4
    assert seen == [3, 3, 1, 2, 1, 2, 1, 2, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4]
    assert sum(seen) == sum(schedule.batch_at(s) for s in range(10)) == 3 * 5 + 6 * 3 + 8 * 2
    started = next(e for e in events if e.kind == "run_started")
    tokens = tokens_through(started.tokens_schedule, 10)
    assert tokens == sum(seen) * 16 == trainer.counters.tokens
    steps = {e.step: e.tokens for e in events if e.kind == "step"}
    assert steps == {s: tokens_through(started.tokens_schedule, s) for s in range(1, 11)}
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["tokens"] for r in records if r["kind"] == "step"][-1] == tokens
    summary = load_summary_file(tmp_path)  # summary.json as the run wrote it
    assert summary is not None and summary.facts["tokens"] == tokens
