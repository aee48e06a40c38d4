"""A batch-size schedule and a sequence-length warmup under torchrun (2 ranks, gloo, this CPU):
every rank trains each step at the schedule's shape, and the world's tokens are the schedule's."""

from __future__ import annotations

from pathlib import Path

import torch
from launch import TINY, checked, rank_records, records, run, weights

from engine.data.shape_schedule import ShapeSchedule

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
