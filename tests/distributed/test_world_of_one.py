"""`torchrun --nproc-per-node 1` is a plain run: no process group, no DDP wrapper, no per-step
command exchange, and the same losses, run directory, metrics and checkpoints as the same config
started without torchrun. A parallel mode asked for by name gets one line saying why it is moot."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from launch import TINY, checked, records, run, single

from engine.config import load_preset
from engine.distributed.command_exchange import RankSync
from engine.distributed.parallel import parallel_plan, wrap_for_training
from engine.distributed.world import World, init_world

TORCHRUN_ONE = {
    "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "abc",
    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
}  # fmt: skip
STEPS = ["--set", "train.max_steps=12", "--set", "checkpoint.interval=6"]
# what differs between two runs of the same config whatever launched them
TIMING = {"time", "elapsed_s", "step_time_s", "tokens_per_s", "mfu", "wall_time", "t"}


def test_a_world_of_one_under_torchrun_is_a_single_process() -> None:
    world = World.from_env(TORCHRUN_ONE)
    assert world.launched and not world.distributed
    assert init_world(world, torch.device("cpu")) is None  # no process group joined
    assert not torch.distributed.is_initialized()
    assert RankSync(world).exchange([("pause", None)]) == [("pause", None)]  # no collective


@pytest.mark.parametrize("mode", ["auto", "ddp", "fsdp"])
def test_any_parallel_mode_at_world_1_trains_unwrapped(mode: str) -> None:
    cfg = load_preset("tiny", [f"train.parallel={mode}", "optim.name=muon"])  # muon: no refusal
    plan = parallel_plan(cfg, World.from_env(TORCHRUN_ONE), fits_one_device=False)
    assert plan.mode == "single" and plan.micro_steps == cfg.train.grad_accum
    model = torch.nn.Linear(2, 2)
    assert wrap_for_training(model, plan, torch.device("cpu"), False).train_forward is model
    if mode == "auto":
        assert plan.note == ""  # nothing asked for, nothing to say: the plain run's notes
    else:
        assert plan.note.startswith(f"train.parallel={mode} at world size 1: ")
        assert "trains as a plain single process" in plan.note
    # without torchrun the same config says nothing (a plain run never did)
    assert parallel_plan(cfg, World(), fits_one_device=False).note == ""


def comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING}


def test_torchrun_with_one_rank_trains_exactly_as_a_plain_run(tmp_path: Path) -> None:
    plain, launched = tmp_path / "plain", tmp_path / "torchrun"
    with ThreadPoolExecutor(2) as pool:  # side by side: the launches are mostly start-up
        both = [
            pool.submit(single, *TINY, *STEPS, "--run-dir", str(plain), WORLD_CHECK="1"),
            pool.submit(run, *TINY, *STEPS, "--run-dir", str(launched), nproc=1, WORLD_CHECK="1"),
        ]
        for result in both:
            checked(result.result())

    for run_dir in (plain, launched):
        seen = json.loads((run_dir / "world-0.json").read_text())
        assert seen == {"process_group": False, "forward": "GPT", "exchanges": 0}, run_dir
    assert sorted(p.name for p in plain.iterdir()) == sorted(p.name for p in launched.iterdir())

    def losses(run_dir: Path) -> list[float]:
        return [r["loss"] for r in records(run_dir / "metrics.jsonl", "step")]

    assert len(losses(plain)) == 12 and losses(launched) == losses(plain)  # bit for bit
    started = [records(d / "metrics.jsonl", "run_started")[-1] for d in (plain, launched)]
    assert started[0]["notes"] == started[1]["notes"]
    kinds = [[r["kind"] for r in records(d / "metrics.jsonl")] for d in (plain, launched)]
    assert kinds[0] == kinds[1]

    for name in sorted(p.name for p in plain.glob("ckpt-*.pt")):
        one, other = (torch.load(d / name, weights_only=True) for d in (plain, launched))
        assert one.keys() == other.keys() and one["world_size"] == other["world_size"] == 1
        assert all(torch.equal(one["model"][k], other["model"][k]) for k in one["model"])
