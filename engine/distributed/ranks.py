"""What concerns a run's ranks under torchrun: the same commands at the same step on every rank,
every rank's batch order and RNG for a checkpoint, and the line naming a lost rank."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engine.checkpoint import store as ckpt
from engine.data.batches import BatchSampler
from engine.distributed.command_exchange import Command, RankSync
from engine.distributed.rank_report import RankReporter
from engine.distributed.world import World, gather_to_all, lost_ranks, rank_seed
from engine.train.command_queue import PAUSED_POLL_S, CommandQueue

if TYPE_CHECKING:
    from engine.events import Event


def rank_lost_message(
    *,
    ranks: list[tuple[str, int]],
    world: World,
    step: int,
    last_checkpoint: Path | None,
    run_dir: Path | None,
    stop_asked: str | None,
) -> str:
    """A collective failed: which rank is gone, the last checkpoint, how to go on."""
    last = f"last checkpoint {last_checkpoint.name}" if last_checkpoint else "no checkpoint was saved"
    # a stop asked for (torchrun's SIGTERM once a rank died, a user's) wanted a checkpoint that
    # needs every rank: say it was not written rather than let "saving a checkpoint" stand
    unsaved = (
        f"the checkpoint the stop ({stop_asked}) asked for could not be saved without it; "
        if stop_asked is not None
        else ""
    )
    return (
        f"{lost_ranks(ranks, world.rank)}: the run stopped at step {step}; "
        f"{unsaved}{last}; torchrun --max-restarts resumes it, or start it again with --resume "
        f"{run_dir}"
    )


class RngStates:
    """The run's random states in a checkpoint: the global RNGs, the batch order and the
    sampler's generator; under torchrun every rank's own batch order and RNG too (rank 0's
    are the plain keys), for an exact resume at the same world size."""

    def __init__(
        self,
        *,
        world: World,
        group: Any,
        device_type: str,
        batches: BatchSampler,
        sample_generator: torch.Generator,
        seed: int,
    ) -> None:
        self.world = world
        self.group = group
        self.device_type = device_type
        self.batches = batches
        self.sample_generator = sample_generator
        self.seed = seed

    def state_dict(self) -> dict[str, Any]:
        """Every rank calls it at the same save: the ranks' states are gathered."""
        state: dict[str, Any] = {
            "rng": ckpt.global_rng_state(self.device_type),
            "batch_rng": self.batches.generator.get_state(),
            "world_size": self.world.world_size,
        }
        if self.world.distributed:
            mine = (self.batches.generator.get_state(), ckpt.global_rng_state(self.device_type))
            every = gather_to_all(mine, self.world, self.group)
            state["batch_rng_by_rank"] = [b for b, _ in every]
            state["rng_by_rank"] = [r for _, r in every]
        state["sample_rng"] = self.sample_generator.get_state()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        ckpt.restore_global_rng(state["rng"], self.device_type)
        by_rank = state.get("batch_rng_by_rank")
        rank = self.world.rank
        if by_rank is not None and state.get("world_size") == self.world.world_size:
            self.batches.generator.set_state(by_rank[rank])  # each rank its own order
            ckpt.restore_global_rng(state["rng_by_rank"][rank], self.device_type)
        elif self.world.distributed:
            # another world size: each rank starts an order of its own from this step
            seed = rank_seed(self.seed, rank) + int(state["step"])
            self.batches.set_rng_state(torch.Generator().manual_seed(seed).get_state())
        else:
            self.batches.generator.set_state(state["batch_rng"])  # rank 0's order
        sample_rng = state["sample_rng"]
        if self.device_type == "cpu":
            sample_rng = sample_rng.to(self.sample_generator.device)
        self.sample_generator.set_state(sample_rng)


class RankCommands:
    """The same commands at the same step on every rank: rank 0's queue and every rank's stop
    go through one exchange per boundary, which also carries rank 0's call for the ranks'
    report. A single process never builds one."""

    def __init__(
        self,
        *,
        queue: CommandQueue,
        sync: RankSync,
        world: World,
        rank_report: RankReporter,
        device: torch.device,
        step: Callable[[], int],
        emit: Callable[[Event], None],
        should_stop: Callable[[], bool],
    ) -> None:
        self.queue = queue
        self.sync = sync
        self.world = world
        self.rank_report = rank_report
        self.device = device
        self.step = step
        self.emit = emit
        self.should_stop = should_stop

    def take(self, paused: bool) -> list[Command]:
        """The commands every rank carries out now; while `paused`, rank 0 waits up to
        PAUSED_POLL_S for one (the others wait in the exchange)."""
        local = self.queue.take_all(PAUSED_POLL_S if paused and self.world.is_main else 0.0)
        if self.should_stop():  # the app is closing: keep the run
            local.append(("stop", (True, "quit")))
        commands = self.sync.exchange(local, self.world.is_main and self.rank_report.due())
        if self.sync.report_due:  # on every rank, whatever the commands then do
            report = self.rank_report.gather(self.device, self.sync.group, self.step())
            if report is not None:
                self.emit(report)
        return commands
