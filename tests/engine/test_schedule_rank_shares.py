"""A batch-size schedule over ranks that split each micro-batch (train.grad_accum not a multiple
of the world size): a train.batch_start whose share per rank is not whole sequences is refused
at launch in one line with the starts that do share, so every step the world trains exactly the
sequences the schedule (and the tokens it records) says."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cockpit.cli import main
from engine.config.presets import load_preset
from engine.config.run_config import ConfigError
from engine.data.shape_schedule import ShapeSchedule
from engine.distributed import World, parallel_plan
from engine.distributed.parallel import rank_share_of, schedule_start_refusal, share_step

TINY = ["train.device=cpu"]  # tiny: micro-batches of 8 sequences, grad_accum 1
RAMP = ["train.batch_ramp_steps=10"]


def test_a_ranks_share_of_a_micro_batch_is_whole_sequences_or_none() -> None:
    assert rank_share_of(2, 8, 4) == 1
    assert rank_share_of(6, 8, 4) == 3
    assert rank_share_of(8, 8, 4) == 4
    assert rank_share_of(3, 8, 4) is None  # 1.5 sequences a rank
    assert rank_share_of(4, 12, 3) == 1
    assert rank_share_of(6, 12, 3) is None


@pytest.mark.parametrize(
    ("start", "ranks", "fix"),
    [(3, 2, "--set train.batch_start=2 or 4"), (1, 2, "--set train.batch_start=2"),
     (5, 2, "--set train.batch_start=4 or 6")],
)  # fmt: skip
def test_a_start_the_ranks_cannot_split_is_refused_naming_the_starts_that_do(
    start: int, ranks: int, fix: str
) -> None:
    cfg = load_preset("tiny", [*TINY, f"train.batch_start={start}", *RAMP])
    with pytest.raises(ConfigError) as refused:
        parallel_plan(cfg, World(rank=0, world_size=ranks))
    line = str(refused.value)
    assert "\n" not in line
    assert line.startswith(
        f"train.batch_start={start} cannot be shared by {ranks} ranks: each rank"
    )
    assert "each rank takes 4 of a micro-batch's 8 sequences" in line
    assert line.endswith(fix)
    for good in fix.removeprefix("--set train.batch_start=").split(" or "):  # the fix is taken
        fixed = load_preset("tiny", [*TINY, f"train.batch_start={good}", *RAMP])
        assert parallel_plan(fixed, World(rank=0, world_size=ranks)).micro_batch == 4


def test_ranks_that_take_whole_micro_batches_take_any_start() -> None:
    # grad_accum 2 at world 2: each rank trains one whole micro-batch, at the schedule's size
    cfg = load_preset("tiny", [*TINY, "train.grad_accum=2", "train.batch_start=3", *RAMP])
    assert schedule_start_refusal(cfg, 2, 8) is None
    assert parallel_plan(cfg, World(rank=0, world_size=2)).micro_batch == 8
    assert parallel_plan(cfg, World()).mode == "single"  # one process: nothing to split


def test_a_start_larger_than_the_micro_batch_is_refused_under_torchrun() -> None:
    """A single process's out-of-memory retry split 8 x 1 into 4 x 2 under a start of 6: ranks
    split whole micro-batches, so a world asks for the micro-batch put back together."""
    cfg = load_preset("tiny", [*TINY, "train.batch_size=4", "train.grad_accum=2",
                               "train.batch_start=6", *RAMP])  # fmt: skip
    assert parallel_plan(cfg, World()).mode == "single"
    with pytest.raises(ConfigError) as refused:
        parallel_plan(cfg, World(rank=0, world_size=2))
    line = str(refused.value)
    assert line.startswith("train.batch_start=6 is larger than train.batch_size=4")
    assert line.endswith("use --set train.batch_size=8 --set train.grad_accum=1")
    fixed = load_preset("tiny", [*TINY, "train.batch_size=8", "train.grad_accum=1",
                                 "train.batch_start=6", *RAMP])  # fmt: skip
    assert parallel_plan(fixed, World(rank=0, world_size=2)).micro_batch == 4


def test_every_step_of_a_start_that_splits_splits_into_the_schedules_tokens() -> None:
    """For each world, micro-batch and accumulation where the ranks split micro-batches, and
    each start parallel_plan accepts: each rank's share of every step's micro-batch is whole,
    and the world's sequences a step are the schedule's (tokens_at, what is recorded)."""
    base = load_preset("tiny", TINY)
    accepted = 0
    for ranks in (2, 3, 4):
        for batch in range(1, 13):
            for accum in (1, 2, 3):
                shared = share_step(batch, accum, ranks)
                if shared is None or shared[1] == batch:
                    continue
                micro_steps, micro_batch = shared
                for start in range(1, batch + 1):
                    train = replace(base.train, batch_size=batch, grad_accum=accum,
                                    batch_start=start, batch_ramp_steps=12)  # fmt: skip
                    if schedule_start_refusal(replace(base, train=train), ranks, micro_batch):
                        continue
                    accepted += 1
                    schedule = ShapeSchedule(batch_size=batch, block_size=1, grad_accum=accum,
                                             batch_start=start, batch_ramp_steps=12)  # fmt: skip
                    for step in range(13):
                        share = rank_share_of(schedule.batch_at(step), batch, micro_batch)
                        assert share is not None, (ranks, batch, accum, start, step)
                        assert share * micro_steps * ranks == schedule.tokens_at(step)
    assert accepted > 50  # the loop checked something


def test_cockpit_plan_of_a_world_refuses_the_start_in_one_line(capsys) -> None:
    argv = ["plan", "--preset", "tiny", "--set", "train.device=cpu", "--device-memory", "8GB"]
    assert main([*argv, "--set", "train.batch_start=3", *["--set", *RAMP], "--nproc", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert line.startswith("cockpit: train.batch_start=3 cannot be shared by 2 ranks")
    assert line.endswith("use --set train.batch_start=2 or 4")
