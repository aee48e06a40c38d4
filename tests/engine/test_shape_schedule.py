"""The batch-size schedule and the sequence-length warmup: the schedule's values against hand
computed ones, the config's checks, the sampler's shapes (with and without prefetching), and real
tiny runs: off is the run without the settings, a resume mid-ramp is bit-exact, the tokens and
the plan follow the shapes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny_overrides

from engine.config import split_micro_batch
from engine.config.live import live_change
from engine.config.loading import config_from_dict
from engine.config.presets import load_preset
from engine.config.run_config import ConfigError
from engine.data.batches import BatchSampler
from engine.data.shape_schedule import (
    ShapeSchedule,
    batch_size_at,
    ramped,
    recorded_changes,
    seq_len_at,
    tokens_through,
)
from engine.plan.fixes import suggest_fixes
from engine.plan.flops import flops_per_token, flops_per_token_at
from engine.plan.planner import plan_memory
from engine.plan.report import format_plan, schedule_lines
from engine.rundir.history import read_curves
from engine.rundir.summary_facts import RunSummary
from engine.train.trainer import Trainer

CPU = torch.device("cpu")
TINY = tiny_overrides("model.dropout=0.1", quiet=True)
# micro-batches 2 -> 4 sequences over 6 steps, sequences 4 -> 16 tokens over 8
RAMPS = [
    "train.batch_start=2",
    "train.batch_ramp_steps=6",
    "train.seq_start=4",
    "train.seq_warmup_steps=8",
]


# ---------------------------------------------------------------------- the schedule
def test_a_ramp_grows_linearly_in_multiples_of_its_start() -> None:
    # 4 -> 12 over 10 steps: 4 + 8 * step // 10, rounded down to a multiple of 4
    assert [ramped(s, start=4, final=12, steps=10) for s in range(12)] == [
        4, 4, 4, 4, 4, 8, 8, 8, 8, 8, 12, 12,
    ]  # fmt: skip
    # a final size that is no multiple of the start is reached at the ramp's end
    assert [ramped(s, start=5, final=12, steps=7) for s in range(8)] == [5, 5, 5, 5, 5, 10, 10, 12]
    assert ramped(3, start=0, final=12, steps=10) == 12  # off


def test_batch_and_sequence_at_a_step() -> None:
    assert batch_size_at(0, start=2, ramp_steps=6, final=4) == 2
    assert batch_size_at(5, start=2, ramp_steps=6, final=4) == 2  # 2 + 2*5//6 = 3 -> 2
    assert batch_size_at(6, start=2, ramp_steps=6, final=4) == 4
    assert [seq_len_at(s, start=4, warmup_steps=8, final=16) for s in range(9)] == [
        4, 4, 4, 8, 8, 8, 12, 12, 16,
    ]  # fmt: skip


def test_the_schedule_counts_tokens_and_lists_its_changes() -> None:
    schedule = ShapeSchedule(
        batch_size=4, block_size=16, grad_accum=2, batch_start=2, batch_ramp_steps=6,
        seq_start=4, seq_warmup_steps=8,
    )  # fmt: skip
    assert schedule.on and schedule.ramp_ends == 8
    # (batch, seq) by step: (2,4) x3, (2,8) x3, (4,12) x2, then (4,16); x 2 micro-batches
    per_step = [16, 16, 16, 32, 32, 32, 96, 96, 128, 128]
    assert [schedule.tokens_at(s) for s in range(10)] == per_step
    assert schedule.tokens_before(10) == sum(per_step)
    assert schedule.tokens_before(100) == sum(per_step) + 90 * 128
    assert schedule.changes(100) == ((0, 16), (3, 32), (6, 96), (8, 128))
    assert schedule.changes(5) == ((0, 16), (3, 32))  # the run ends before the rest
    assert schedule.describe() == (
        "batch 2 -> 4 sequences over 6 steps, sequences 4 -> 16 tokens over 8 steps"
    )
    # the same counts from the changes alone (what RunStarted records)
    changes = schedule.changes(100)
    assert [tokens_through(changes, s) for s in (0, 4, 10, 100)] == [
        schedule.tokens_before(s) for s in (0, 4, 10, 100)
    ]
    assert tokens_through(((0, 100), (10, 200), (20, 400)), 15) == 10 * 100 + 5 * 200
    off = ShapeSchedule(batch_size=4, block_size=16, grad_accum=2)
    assert not off.on and off.changes(100) == () and off.describe() == ""
    assert off.tokens_before(10) == 10 * 128


def test_shorter_sequences_cost_less_attention_per_token() -> None:
    cfg = load_preset("tiny", TINY).model
    full = flops_per_token(1000, cfg)
    assert flops_per_token_at(full, cfg, cfg.block_size) == full
    # 12 * layers * heads * head size per position attended to
    assert full - flops_per_token_at(full, cfg, 4) == 12 * 1 * 2 * 8 * (16 - 4)


# ---------------------------------------------------------------------- the config
@pytest.mark.parametrize(
    ("train", "expected"),
    [
        ({"batch_start": 8, "batch_ramp_steps": 5}, r"train.batch_start \(8\) must not exceed train.batch_size \(4\)"),
        ({"batch_start": 9, "batch_ramp_steps": 5, "grad_accum": 2},
         r"train.batch_start \(9\) must not exceed train.batch_size x train.grad_accum \(8\)"),
        ({"batch_start": 2}, "train.batch_start needs train.batch_ramp_steps > 0"),
        ({"batch_ramp_steps": 5}, "train.batch_ramp_steps needs train.batch_start"),
        ({"seq_start": 32, "seq_warmup_steps": 5}, r"train.seq_start \(32\) must not exceed model.block_size \(16\)"),
        ({"seq_start": 4}, "train.seq_start needs train.seq_warmup_steps > 0"),
        ({"seq_warmup_steps": 5}, "train.seq_warmup_steps needs train.seq_start"),
        ({"seq_start": -1, "seq_warmup_steps": 5}, r"train.seq_start: expected a value >= 0"),
    ],
)  # fmt: skip
def test_a_schedule_that_cannot_be_is_refused_in_one_line(train, expected) -> None:
    raw = {"model": {"block_size": 16}, "train": {"batch_size": 4, **train}}
    with pytest.raises(ConfigError, match=expected) as err:
        config_from_dict(raw, "preset.toml")
    assert "\n" not in str(err.value) and str(err.value).startswith("preset.toml: ")


def test_a_start_larger_than_a_split_micro_batch_grows_to_it_put_back_together() -> None:
    """What an out-of-memory retry leaves in a run's config: 8 x 1 with a start of 6, halved to
    4 x 2. It is accepted, and the schedule is the run's: 6 -> 8 a micro-batch of 8."""
    assert split_micro_batch(4, 2, 6) == (8, 1)
    assert split_micro_batch(2, 4, 3) == (4, 2)  # the fewest micro-batches that hold it
    assert split_micro_batch(2, 4, 5) == (8, 1)
    assert split_micro_batch(4, 6, 9) == (12, 2)  # 3 of 6: 2 does not hold 9
    assert split_micro_batch(4, 2, 4) == (4, 2)  # not larger: the config's
    assert split_micro_batch(4, 2, 9) is None  # larger than a step
    raw = {"model": {"block_size": 16}, "train": {"batch_size": 4, "grad_accum": 2,
                                                   "batch_start": 6, "batch_ramp_steps": 8}}
    cfg = config_from_dict(raw, "checkpoint")
    schedule = ShapeSchedule.of(cfg)
    assert (schedule.batch_size, schedule.grad_accum) == (8, 1)
    assert [schedule.batch_at(s) for s in (0, 7, 8)] == [6, 6, 8]
    # the plan: the micro-batches of 4 it holds in memory, the whole 8 reached at step 8
    assert schedule_lines(cfg)[1].startswith("  planned at the largest shape, 4 x 16 (from step 8 on)")


# ---------------------------------------------------------------------- the sampler
def memmapped(tmp_path: Path, n: int = 5000) -> np.memmap:
    path = tmp_path / "train.bin"
    (np.arange(n, dtype=np.uint16) % 11).tofile(path)
    return np.memmap(path, dtype=np.uint16, mode="r", shape=(n,))


SCHEDULE = ShapeSchedule(
    batch_size=4, block_size=16, batch_start=2, batch_ramp_steps=6, seq_start=4,
    seq_warmup_steps=8,
)  # fmt: skip


def steps_of(sampler: BatchSampler, steps: range, micro: int = 2) -> list[torch.Tensor]:
    batches = []
    for step in steps:
        sampler.at_step(step)
        batches += [sampler.next()[0].clone() for _ in range(micro)]
    return batches


def test_each_step_is_drawn_at_its_shape_prefetched_or_not(tmp_path) -> None:
    tokens = memmapped(tmp_path)
    plain = BatchSampler(tokens, 16, 4, CPU, seed=3, prefetch=0, schedule=SCHEDULE)
    ahead = BatchSampler(tokens, 16, 4, CPU, seed=3, schedule=SCHEDULE)
    try:
        assert ahead.prefetch > 0
        got = steps_of(ahead, range(12))
        time.sleep(0.02)
        expected = steps_of(plain, range(12))
        shapes = [tuple(x.shape) for x in got]
        assert shapes[::2] == [
            (2, 4), (2, 4), (2, 4), (2, 8), (2, 8), (2, 8), (4, 12), (4, 12), *[(4, 16)] * 4,
        ]  # fmt: skip
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    finally:
        ahead.close()
    deadline = time.monotonic() + 2
    while any(t.name == "cockpit-batch-prefetch" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the prefetch thread outlived the sampler"
        time.sleep(0.01)


def test_a_schedule_that_is_off_draws_what_no_schedule_draws() -> None:
    tokens = np.arange(3000, dtype=np.int64) % 11
    off = ShapeSchedule(batch_size=4, block_size=16)
    plain = BatchSampler(tokens, 16, 4, CPU, seed=5)
    scheduled = BatchSampler(tokens, 16, 4, CPU, seed=5, schedule=off)
    assert all(
        torch.equal(a, b)
        for a, b in zip(steps_of(plain, range(5)), steps_of(scheduled, range(5)), strict=True)
    )


def test_a_halved_micro_batch_takes_half_of_each_scheduled_batch() -> None:
    """An out-of-memory retry (or a rank's split of the micro-batch): its share, rounded up."""
    sampler = BatchSampler(np.arange(3000, dtype=np.int64) % 11, 16, 4, CPU, seed=1, schedule=SCHEDULE)
    sampler.batch_size = 2
    sampler.at_step(0)
    assert sampler.shape == (1, 4)  # 2 sequences of the schedule's, halved
    sampler.at_step(8)
    assert sampler.shape == (2, 16)


# ---------------------------------------------------------------------- real runs
def run(run_dir: Path, *extra: str, split_at: int | None = None, total: int = 12):
    """A tiny run of `total` steps, or stopped at `split_at` and resumed; (steps, trainer)."""
    cfg = load_preset("default", [*TINY, f"train.max_steps={total}", *extra])
    events: list = []
    trainer = Trainer(cfg, run_dir=run_dir, sinks=[events.append], telemetry=False)
    if split_at is not None:
        trainer.sinks.append(lambda e: e.kind == "step" and e.step == split_at and trainer.stop())
    trainer.run()
    if split_at is not None:
        assert trainer.state == "stopped" and trainer.step == split_at
        trainer = Trainer(
            load_preset("default", [*TINY, f"train.max_steps={total}", *extra]),
            resume=run_dir, sinks=[events.append], telemetry=False,
        )  # fmt: skip
        trainer.run()
    assert trainer.state == "finished"
    steps = {e.step: e for e in events if e.kind == "step"}
    started = [e for e in events if e.kind == "run_started"]
    return steps, started, trainer


def test_schedules_that_never_change_the_shape_train_the_run_without_them(tmp_path) -> None:
    """Starts at the configured sizes: the machinery is on, the steps are those of the run
    without the settings, bit for bit."""
    without, started, _ = run(tmp_path / "a")
    same_shape, _, _ = run(
        tmp_path / "b", "train.batch_start=4", "train.batch_ramp_steps=5",
        "train.seq_start=16", "train.seq_warmup_steps=5",
    )  # fmt: skip
    assert [s.loss for s in without.values()] == [s.loss for s in same_shape.values()]
    assert [s.tokens for s in without.values()] == [s.tokens for s in same_shape.values()]
    assert started[0].tokens_schedule == ()


def test_a_ramped_run_counts_the_tokens_of_its_shapes(tmp_path) -> None:
    steps, started, trainer = run(tmp_path, *RAMPS)
    schedule = ShapeSchedule.of(trainer.cfg)
    assert started[0].tokens_schedule == ((0, 8), (3, 16), (6, 48), (8, 64))
    assert [steps[s].tokens for s in range(1, 13)] == [
        schedule.tokens_before(s) for s in range(1, 13)
    ]
    assert trainer.counters.tokens == schedule.tokens_before(12) == 3 * 8 + 3 * 16 + 2 * 48 + 4 * 64
    records = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    (recorded,) = [r for r in records if r["kind"] == "run_started"]
    assert recorded["tokens_schedule"] == [[0, 8], [3, 16], [6, 48], [8, 64]]
    assert [r["tokens"] for r in records if r["kind"] == "step"][-1] == trainer.counters.tokens


def test_the_runs_history_and_summary_count_the_tokens_of_its_shapes(tmp_path) -> None:
    """What the compare view and `cockpit runs` read back: the tokens before each eval, and
    the tokens of a run resumed from an older step before its first new step."""
    _, started, trainer = run(tmp_path, *RAMPS, "eval.interval=4")
    schedule = ShapeSchedule.of(trainer.cfg)
    curves = read_curves(tmp_path)
    assert list(curves.val_step) == [4, 8, 12]
    assert list(curves.val_tokens) == [schedule.tokens_before(s) for s in (4, 8, 12)]
    summary = RunSummary()
    summary.observe_step(12, schedule.tokens_before(12), None, 0.0)
    summary.observe({**started[0].to_record(), "start_step": 4})  # a resume from step 4
    assert summary.facts["tokens"] == schedule.tokens_before(4) == 3 * 8 + 16
    assert recorded_changes([[0, 8], [3, "16"]]) == ()  # a damaged record is read past


def test_a_resume_mid_ramp_is_bit_exact(tmp_path) -> None:
    straight, _, a = run(tmp_path / "a", *RAMPS)
    split, _, b = run(tmp_path / "b", *RAMPS, split_at=4)
    assert [s.loss for s in straight.values()] == [split[s].loss for s in straight]
    assert [s.tokens for s in straight.values()] == [split[s].tokens for s in straight]
    for name, tensor in a.built.parts.model.state_dict().items():
        assert torch.equal(tensor, b.built.parts.model.state_dict()[name]), name


# ---------------------------------------------------------------------- the plan and live settings
def test_the_plan_says_the_schedule_and_plans_its_largest_shape() -> None:
    ramped_cfg = load_preset("tiny", [*TINY, *RAMPS])
    plain_cfg = load_preset("tiny", TINY)
    ramped, plain = plan_memory(ramped_cfg, 65, "cpu", None), plan_memory(plain_cfg, 65, "cpu", None)
    assert ramped.total == plain.total  # the peak is at the configured shape, reached at the end
    text = format_plan(ramped_cfg, ramped, [])
    assert "schedule: batch 2 -> 4 sequences over 6 steps, sequences 4 -> 16 tokens over 8 steps" in text
    assert "planned at the largest shape, 4 x 16 (from step 8 on); step 0 trains 8 tokens" in text
    assert "schedule" not in format_plan(plain_cfg, plain, [])
    # a smaller micro-batch keeps a batch-size schedule valid: it starts as much smaller
    (fix, *_) = suggest_fixes(ramped_cfg, 65, "cpu", 1)
    assert fix.overrides == ("train.batch_size=2", "train.grad_accum=2", "train.batch_start=1")


def test_the_schedules_cannot_change_mid_run_and_say_why() -> None:
    cfg = load_preset("tiny", [*TINY, *RAMPS])
    for key in ("train.batch_start", "train.batch_ramp_steps", "train.seq_start", "train.seq_warmup_steps"):
        answer = live_change(cfg, {key: 3}, 2)
        assert isinstance(answer, str) and answer.startswith(f"set refused: {key} cannot change")
        assert "shapes every step from step 0" in answer and f"--set {key}=" in answer


def test_a_rollback_mid_ramp_trains_the_same_steps_again(tmp_path) -> None:
    """Roll back to step 4 at step 7 (LR unchanged): steps 5-7 again, at their shapes, with
    their batches (the prefetch thread's, made at the shapes after step 7, are dropped)."""
    cfg = load_preset(
        "default",
        [*TINY, *RAMPS, "train.max_steps=9", "train.log_every=1", "checkpoint.interval=4"],
    )
    steps: list = []
    trainer = Trainer(cfg, run_dir=tmp_path, telemetry=False, interactive=False)

    def record(event) -> None:
        if event.kind == "step":
            steps.append((event.step, event.loss, event.tokens))
            if event.step == 7 and len(steps) == 7:
                trainer.rollback(1.0)

    trainer.sinks.append(record)
    assert trainer.run() == "finished"
    assert trainer.built.parts.train_batches.prefetch > 0
    assert [s for s, _, _ in steps] == [*range(1, 8), *range(5, 10)]
    assert steps[7:10] == steps[4:7]  # the same losses and token counts
    assert steps[-1][2] == ShapeSchedule.of(cfg).tokens_before(9)
