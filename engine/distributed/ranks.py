"""The parts of a run that concern its ranks under torchrun: the same commands at the same step on
every rank, every rank's batch order and RNG for a checkpoint, and the line naming a lost rank.
Functions of the Trainer (as engine/train/setup.py's are); a single process never calls the first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.checkpoint import store as ckpt
from engine.distributed.world import gather_to_all, lost_ranks
from engine.events import RunState
from engine.train.command_queue import PAUSED_POLL_S

if TYPE_CHECKING:
    from engine.train.trainer import Trainer


def rank_lost_message(run: Trainer) -> str:
    """A collective failed: which rank is gone, the last checkpoint, how to go on."""
    saved = run.last_checkpoint
    last = f"last checkpoint {saved.name}" if saved else "no checkpoint was saved"
    # a stop asked for (torchrun's SIGTERM once a rank died, a user's) wanted a checkpoint that
    # needs every rank: say it was not written rather than let "saving a checkpoint" stand
    unsaved = (
        f"the checkpoint the stop ({run._stop_asked}) asked for could not be saved without it; "
        if run._stop_asked is not None
        else ""
    )
    return (
        f"{lost_ranks(run.ranks, run.world.rank)}: the run stopped at step {run.step}; "
        f"{unsaved}{last}; torchrun --max-restarts resumes it, or start it again with --resume "
        f"{run.run_dir}"
    )


def rank_states(run: Trainer) -> dict[str, Any]:
    if not run.world.distributed:
        return {}
    mine = (run.train_batches.generator.get_state(), ckpt.global_rng_state(run.device.type))
    every = gather_to_all(mine, run.world, run.sync.group)
    return {"batch_rng_by_rank": [b for b, _ in every], "rng_by_rank": [r for _, r in every]}


def apply_commands_on_every_rank(run: Trainer) -> None:
    """The same commands at the same step on every rank (engine/distributed/command_exchange.py); while
    paused, the ranks exchange every PAUSED_POLL_S until resumed or stopped."""
    while True:
        paused = run.state == RunState.PAUSED
        local = run._commands.take_all(PAUSED_POLL_S if paused and run.world.is_main else 0.0)
        if run._should_stop():  # the app is closing: keep the run
            local.append(("stop", (True, "quit")))
        commands = run.sync.exchange(local, run.world.is_main and run.rank_report.due())
        if run.sync.report_due:  # on every rank, whatever the commands then do
            report = run.rank_report.gather(run.device, run.sync.group, run.step)
            if report is not None:
                run.emit(report)
        for command in commands:
            run.command_handler.carry_out(*command)
            if run._stop_requested is not None:
                return
        if run.state != RunState.PAUSED:
            return
