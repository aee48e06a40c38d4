"""An out-of-memory retry during a batch-size ramp trains exactly the schedule's sequences.

Halving the micro-batch splits each scheduled batch over twice the micro-steps; a scheduled 3
sequences of 8 once became 2 micro-steps of 2 (4 sequences), so the run trained more than its
recorded tokens_schedule said. Now the halves take 1 + 2.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import torch
from tiny import tiny_overrides

from engine.config.presets import load_preset
from engine.data.batches import BatchSampler
from engine.data.shape_schedule import (
    ShapeSchedule,
    micro_batch_sizes,
    ramped_micro_batch,
    tokens_through,
)
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.rundir.summary import load_summary_file
from engine.train.step import StepParts, train_step
from engine.train.trainer import Trainer

CPU = torch.device("cpu")

SMALL = tiny_overrides(
    "train.batch_size=8",
    "train.grad_accum=1",
    "train.batch_start=3",
    "train.batch_ramp_steps=8",
    "eval.interval=0",
    "sample.interval=0",
    "train.max_steps=10",
)


def test_micro_batch_sizes_split_a_steps_sequences_as_evenly_as_they_go() -> None:
    assert micro_batch_sizes(3, 2) == (1, 2)
    assert micro_batch_sizes(6, 2) == (3, 3)
    assert micro_batch_sizes(7, 4) == (1, 2, 2, 2)
    assert micro_batch_sizes(1, 2) == (0, 1)  # nothing for the first: it is skipped
    assert micro_batch_sizes(3, 4) == (0, 1, 1, 1)
    assert micro_batch_sizes(8, 1) == (8,)


def test_the_ramp_grows_to_the_micro_batch_the_run_started_with() -> None:
    assert ramped_micro_batch(4, 2, 8) == (8, 1)  # halved once by an out-of-memory retry
    assert ramped_micro_batch(2, 12, 8) == (8, 3)  # twice, from 8 x 3
    assert ramped_micro_batch(8, 1, 8) == (8, 1)  # never halved
    assert ramped_micro_batch(16, 1, 8) == (16, 1)  # a resume that set a larger micro-batch
    assert ramped_micro_batch(4, 1, 8) == (4, 1)  # 4 a step is not a whole micro-batch of 8


class CountingOom:
    """The model's forward, recording each call's sequences; out of memory at call `at`."""

    def __init__(self, trainer: Trainer, at: int) -> None:
        self.inner = trainer.built.instruments.step.forward
        self.at, self.calls, self.sequences = at, 0, []

    def __call__(self, x, y=None):
        self.calls += 1
        if self.calls == self.at:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        self.sequences.append(x.shape[0])
        return self.inner(x, y)


def oom_once_set_up(trainer: Trainer, at: int) -> CountingOom:
    """The trainer set up, its forward replaced by a CountingOom out of memory at call `at`."""
    trainer.set_up()
    trainer.built.instruments.step.forward = counter = CountingOom(trainer, at=at)
    return counter


def run_to_step_10(trainer: Trainer) -> None:
    trainer.run()
    assert trainer.state == "finished" and trainer.step == 10


def resumed_after_a_retry_at_step_2(tmp_path, overrides: list[str], events: list) -> Trainer:
    """A run out of memory at step 2 (8 x 1 halved to 4 x 2), stopped at step 4, and the
    Trainer that resumes it (not yet set up), its events into `events`."""
    first = Trainer(load_preset("default", overrides), run_dir=tmp_path, telemetry=False)
    oom_once_set_up(first, at=3)
    first.sinks.append(lambda e: e.kind == "step" and e.step == 4 and first.stop())
    first.run()
    assert first.state == "stopped"
    assert (first.cfg.train.batch_size, first.cfg.train.grad_accum) == (4, 2)
    return Trainer(
        load_preset("default", overrides), resume=tmp_path, telemetry=False, sinks=[events.append]
    )


def test_an_out_of_memory_retry_mid_ramp_trains_the_schedule_s_sequences(tmp_path) -> None:
    cfg = load_preset("default", SMALL)
    schedule = ShapeSchedule.of(cfg)
    # the ramp by hand: 3 + 5 * step // 8 rounded down to a multiple of 3, then 8 from step 8
    assert [schedule.batch_at(s) for s in range(10)] == [3, 3, 3, 3, 3, 6, 6, 6, 8, 8]
    events: list = []
    trainer = Trainer(cfg, run_dir=tmp_path, telemetry=False, sinks=[events.append])
    counter = oom_once_set_up(trainer, at=3)  # the third step (step 2) runs out of memory
    run_to_step_10(trainer)
    assert (trainer.cfg.train.batch_size, trainer.cfg.train.grad_accum) == (4, 2)
    seen = counter.sequences
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


def test_a_resume_after_the_retry_trains_and_records_the_schedule_the_run_started_with(
    tmp_path,
) -> None:
    """The checkpoint's config holds the halved micro-batch (4 x 2): the resume ramps to the 8
    the run started with, as recorded, not from 3 to 4 (6 sequences a step at step 4)."""
    events: list = []
    resumed = resumed_after_a_retry_at_step_2(tmp_path, SMALL, events)
    counter = oom_once_set_up(resumed, at=0)  # never out of memory: it counts the sequences
    run_to_step_10(resumed)
    # step 4: 3 (1 + 2), steps 5-7: 6 (3 + 3), steps 8-9: 8 (4 + 4)
    assert counter.sequences == [1, 2, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4]
    schedule = ShapeSchedule.of(load_preset("default", SMALL))
    tokens = 16 * sum(schedule.batch_at(s) for s in range(10))
    assert resumed.counters.tokens == tokens == schedule.tokens_before(10)
    started = next(e for e in events if e.kind == "run_started")
    assert started.tokens_schedule == schedule.changes(10) == ((0, 48), (5, 96), (8, 128))
    steps = {e.step: e.tokens for e in events if e.kind == "step"}
    assert steps == {s: schedule.tokens_before(s) for s in range(5, 11)}
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["tokens"] for r in records if r["kind"] == "step"][-1] == tokens
    summary = load_summary_file(tmp_path)
    assert summary is not None and summary.facts["tokens"] == tokens


def test_a_resume_after_the_retry_of_a_start_larger_than_the_half_trains_on(tmp_path) -> None:
    """A start of 6, the micro-batch of 8 halved to 4 x 2: the checkpoint's config has a start
    larger than its micro-batch, and its resume was refused ("train.batch_start (6) must not
    exceed train.batch_size (4)"). It resumes, ramping 6 -> 8 as the run started."""
    ramp = [*SMALL, "train.batch_start=6"]
    events: list = []
    resumed = resumed_after_a_retry_at_step_2(tmp_path, ramp, events)
    counter = oom_once_set_up(resumed, at=0)
    run_to_step_10(resumed)
    # steps 4-7: the start's 6 as 3 + 3; steps 8-9: 8 as 4 + 4
    assert counter.sequences == [3, 3] * 4 + [4, 4] * 2
    started = next(e for e in events if e.kind == "run_started")
    assert started.tokens_schedule == ((0, 6 * 16), (8, 8 * 16))
    assert resumed.counters.tokens == 16 * (6 * 8 + 8 * 2)


def test_unequal_halves_weigh_as_their_sequences_in_the_step_s_loss_and_gradient() -> None:
    """1 + 2 of a scheduled 3: the step's loss and gradient are those of the 3 sequences as
    one batch (each half weighted by its sequences, not 1/2 each)."""
    cfg = load_preset("tiny", ["model.n_layer=1", "model.n_embd=16", "model.block_size=8"])
    cfg.optim.lr = 0.0  # the step applies nothing: its gradient is compared below
    cfg.optim.grad_clip = 0.0  # as it is, unclipped
    torch.manual_seed(0)
    model = GPT(cfg.model, 11)
    schedule = ShapeSchedule(batch_size=4, block_size=8, batch_start=3, batch_ramp_steps=8)
    sampler = BatchSampler(np.arange(500, dtype=np.int64) % 11, 8, 4, CPU, seed=1, schedule=schedule)
    sampler.batch_size = 2  # an out-of-memory retry's half: 2 micro-steps a step
    seen: list[torch.Tensor] = []
    grads: list[torch.Tensor] = []

    def forward(x, y=None):
        seen.append(torch.cat([x, y[:, -1:]], 1))
        return model(x, y)

    parts = StepParts(
        cfg=cfg, model=model, forward=forward, scaler=torch.amp.GradScaler("cpu", enabled=False),
        autocast=contextlib.nullcontext(), batches=sampler, device=CPU, dtype=torch.float32,
        micro_steps=2, grad_sync=lambda last: contextlib.nullcontext(),
    )  # fmt: skip
    optimizer = build_optimizer(model, cfg.optim, "cpu")
    # the step's gradient, as it stands before the step clears it
    optimizer.zero_grad = lambda **k: grads.extend(p.grad.clone() for p in model.parameters())
    outcome = train_step(parts, optimizer, step=0, lr_schedule_factor=1.0, report_memory=False)
    assert [len(rows) for rows in seen] == [1, 2]
    rows = torch.cat(seen)
    model.zero_grad()
    _, whole = model(rows[:, :-1], rows[:, 1:])
    whole.backward()
    assert torch.allclose(outcome.pending.loss, whole.detach(), atol=1e-6)
    for got, expected in zip(grads, model.parameters(), strict=True):
        assert torch.allclose(got, expected.grad, atol=1e-6)
