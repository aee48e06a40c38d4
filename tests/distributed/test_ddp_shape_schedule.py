"""A batch-size schedule and a sequence-length warmup under torchrun (2 ranks, gloo, this CPU):
every rank trains each step at the schedule's shape, and the world's tokens are the schedule's."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from launch import TINY, checked, rank_records, records, run, weights

from engine.data.shape_schedule import ShapeSchedule, recorded_changes, tokens_through

STEPS = 10
RAMPS = [
    "--set", "train.batch_start=2", "--set", "train.batch_ramp_steps=6",
    "--set", "train.seq_start=8", "--set", "train.seq_warmup_steps=8",
]  # fmt: skip


def test_every_rank_trains_each_step_at_the_schedules_shape(tmp_path: Path) -> None:
    run_dir = tmp_path / "two"
    checked(run(*TINY, *RAMPS, "--set", f"train.max_steps={STEPS}", "--set",
                "checkpoint.interval=0", "--run-dir", str(run_dir)))  # fmt: skip
    # tiny: block 32; TINY: micro-batches of 4, 2 a step (one per rank)
    schedule = ShapeSchedule(
        batch_size=4, block_size=32, grad_accum=2, batch_start=2, batch_ramp_steps=6,
        seq_start=8, seq_warmup_steps=8,
    )  # fmt: skip
    expected = [schedule.tokens_before(s) for s in range(1, STEPS + 1)]
    # each rank counts its own batches' tokens times the world size: both its shape's
    for rank in (0, 1):
        assert [r["tokens"] for r in rank_records(run_dir, rank, "step")] == expected, rank
    assert [r["tokens"] for r in records(run_dir / "metrics.jsonl", "step")] == expected
    (started,) = records(run_dir / "metrics.jsonl", "run_started")
    assert started["tokens_schedule"] == [[0, 32], [3, 64], [6, 192], [8, 256]]
    first, second = weights(run_dir, 0), weights(run_dir, 1)
    assert all(torch.equal(first[k], second[k]) for k in first)  # bit-identical replicas


def test_ranks_that_split_each_micro_batch_record_the_tokens_they_trained(tmp_path: Path) -> None:
    """train.grad_accum=1 at world 2: each rank takes 4 of every micro-batch's 8 sequences, so
    of the schedule's 2, 4, 6 and 8 it takes 1, 2, 3 and 4. The tokens recorded (each step,
    the summary `cockpit runs` reads, and the schedule a resume or the ETA counts from) are the
    sequences the ranks took times their lengths, counted batch by batch on every rank."""
    run_dir = tmp_path / "split"
    steps = 8
    checked(run(*TINY, "--set", "train.grad_accum=1", "--set", "train.batch_size=8",
                "--set", "train.batch_start=2", "--set", "train.batch_ramp_steps=6",
                "--set", "train.seq_start=8", "--set", "train.seq_warmup_steps=4",
                "--set", f"train.max_steps={steps}", "--set", "checkpoint.interval=0",
                "--run-dir", str(run_dir), BATCHES_CHECK="1"))  # fmt: skip
    taken = [json.loads((run_dir / f"batches-{rank}.json").read_text()) for rank in (0, 1)]
    assert taken[0] == taken[1]  # every rank at the same shape, one batch a step
    assert [sequences for _, sequences, _ in taken[0]] == [1, 1, 2, 2, 3, 3, 4, 4]
    by_hand = [0] * steps
    for batches in taken:
        for step, sequences, length in batches:
            by_hand[step] += sequences * length
    through = [sum(by_hand[:s]) for s in range(1, steps + 1)]
    assert [r["tokens"] for r in records(run_dir / "metrics.jsonl", "step")] == through
    assert json.loads((run_dir / "summary.json").read_text())["tokens"] == through[-1]
    (started,) = records(run_dir / "metrics.jsonl", "run_started")
    changes = recorded_changes(started["tokens_schedule"])
    assert [tokens_through(changes, s) for s in range(1, steps + 1)] == through
