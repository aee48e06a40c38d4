"""`build_run`: every part of a run built once, in one place, from its config.

In the order that keeps a refused run from leaving anything behind: what trains (data, model,
optimizer), then the checkpointer with the states a checkpoint keeps and the resume restored,
then the run directory (`open_run_dir`, the handle's: its sinks), then the loop's instruments
and the parts that use them. Each part gets what it uses as explicit arguments.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from engine.checkpoint import store as ckpt
from engine.checkpoint.checkpointer import Checkpointer, Nested, RunDescription
from engine.config.run_config import RunConfig
from engine.config.timeline import SettingsTimeline
from engine.distributed.command_exchange import RankSync
from engine.distributed.rank_report import RankReporter
from engine.distributed.ranks import RankCommands, RngStates
from engine.distributed.world import World, mean_over_ranks
from engine.events import ThreadsChosen
from engine.optim.optimizers import applied_lr
from engine.rundir.metrics_log import MetricsWriter
from engine.train.cadence import Readings, ValPoint
from engine.train.command_queue import CommandQueue
from engine.train.commands import CommandHandler, StopRequest
from engine.train.config_file import ReplayPlan, start_config
from engine.train.counters import Counters
from engine.train.disk_full import DiskWait
from engine.train.fault_handler import FaultHandler
from engine.train.live_settings import DerivedValues, LiveSettings, resume_as_change
from engine.train.readback import PendingSteps
from engine.train.reporter import Reporter
from engine.train.run import Run
from engine.train.setup import build, instrument
from engine.train.thread_tuner import ThreadChoice, thread_tuner


def build_run(
    cfg: RunConfig,
    *,
    device: torch.device,
    world: World,
    sync: RankSync,
    resume_state: dict[str, Any] | None,
    run_dir: Path | None,
    data_path: str | None,
    notes: list[str],
    counters: Counters,
    reporter: Reporter,
    metrics: MetricsWriter,
    queue: CommandQueue,
    stopping: StopRequest,
    should_stop: Callable[[], bool],
    preparation_should_stop: Callable[[], bool],
    rank_report: RankReporter,
    replay_plan: ReplayPlan,
    interactive: bool,
    open_run_dir: Callable[[], tuple[Path, list[ValPoint]]],
) -> Run:
    """The run of `cfg` on `device` (this rank's, its world joined), resumed from
    `resume_state` when given; what a person should know of it is appended to `notes`
    (RunStarted's). `open_run_dir()` creates or reopens the run directory once everything is
    accepted and returns it with the run's evaluations so far."""
    group, emit = sync.group, reporter.emit
    parts = build(
        cfg, device=device, world=world, data_path=data_path, emit=emit,
        should_stop=preparation_should_stop, resume_state=resume_state,
    )  # fmt: skip
    if parts.parallel.note:
        notes.append(parts.parallel.note)  # RunStarted's notes: said at the start
    started = start_config(resume_state) if resume_state is not None else copy.deepcopy(cfg)
    disk = DiskWait(
        metrics=metrics, world=world, group=group, reporter=reporter, counters=counters,
        queue=queue, max_steps=cfg.train.max_steps,
    )  # fmt: skip
    timeline = SettingsTimeline()  # the changes made so far: in each checkpoint, config.toml's
    states = {
        "scaler": Nested("scaler", parts.scaler),
        "counters": counters,  # step, lr_scale, train_time_s, tokens, best_val
        "rngs": RngStates(
            world=world, group=group, device_type=device.type, batches=parts.train_batches,
            sample_generator=parts.sample_generator, seed=cfg.train.seed,
        ),  # fmt: skip
        "run": RunDescription(cfg, parts.data, started),  # config, tokenizer, corpus
        "replay": replay_plan,  # a replayed run's changes still to make
        # (a checkpoint from before the timeline has none)
        "settings": Nested("settings_changes", timeline, missing=[]),
    }
    checkpointer = Checkpointer(
        run_dir=run_dir, world=world, group=group, settings=cfg.checkpoint,
        sharded=parts.parallel.mode == "fsdp", model=parts.model, optimizer=parts.current_optimizer,
        optim=cfg.optim, device_type=device.type, states=states, counters=counters,
        reporter=reporter, disk=disk,
    )  # fmt: skip
    if resume_state is not None:
        notes.extend(checkpointer.restore(resume_state))
        notes.extend(resume_as_change(resume_state, cfg, counters, timeline))
        # An older checkpoint starts a new branch: the newer ones must not be pruned into it,
        # nor picked by the next --resume RUN_DIR.
        assert run_dir is not None  # a resume's directory is its checkpoint's
        aside, moved = ckpt.set_aside_newer(run_dir, counters.step)
        if aside is not None:
            notes.append(
                f"resumed at step {counters.step} from an older checkpoint: "
                f"{', '.join(moved)} moved to {aside} (kept); this run continues the new branch"
            )
    # the LR the optimizer holds until the first step writes its own (a replay's old LR)
    counters.current_lr = applied_lr(parts.optimizer)
    opened, val_points = open_run_dir()
    checkpointer.run_dir = opened  # a fresh run's, created just now
    instruments = instrument(cfg, parts, world=world, report=reporter)
    live = LiveSettings(
        cfg=cfg, counters=counters, optimizer=parts.current_optimizer, model=parts.model, device_type=device.type,
        ranks=world.world_size, micro_batch=lambda: parts.train_batches.batch_size,
        # what the run derived from the config, derived again after a change of settings
        follow=DerivedValues(
            spikes=parts.spikes, disk=disk, instruments=instruments, device=device,
            ranks=world.world_size, batches=parts.train_batches,
        ),
        emit=emit, timeline=timeline,
    )  # fmt: skip
    pending = PendingSteps(
        cfg=cfg, counters=counters, reduce=partial(mean_over_ranks, world=world),
        spikes=parts.spikes, peak_meter=instruments.peak_meter,
        flops_per_token=instruments.flops_per_token, ranks=world.world_size, emit=emit,
    )  # fmt: skip
    faults = FaultHandler(
        cfg=cfg, interactive=interactive, world=world, checkpointer=checkpointer,
        counters=counters, reporter=reporter, stopping=stopping, spikes=parts.spikes,
        model=parts.model, optimizer=parts.current_optimizer, batches=parts.train_batches,
        device_type=device.type, forget_pending=pending.forget, settings_back=live.roll_back_to,
    )  # fmt: skip
    readings = Readings(
        pending=pending, anomaly=faults.anomaly, evaluator=instruments.evaluator,
        data=parts.data, sample_generator=parts.sample_generator, counters=counters,
        reporter=reporter, val_points=val_points,
    )  # fmt: skip
    rank_commands = None
    if world.distributed:
        rank_commands = RankCommands(
            queue=queue, sync=sync, world=world, rank_report=rank_report, device=device,
            step=lambda: counters.step, emit=emit, should_stop=should_stop,
        )  # fmt: skip
    commands = CommandHandler(
        queue=queue, reporter=reporter, counters=counters, stopping=stopping,
        should_stop=should_stop, cfg=cfg, optimizer=parts.current_optimizer, checkpointer=checkpointer, disk=disk,
        rollback=faults.rollback, flush=readings.flush, sample=readings.sample,
        evaluate=readings.evaluate, rank_commands=rank_commands, live=live,
    )  # fmt: skip

    def threads_chosen(choice: ThreadChoice) -> None:
        times = {str(n): t for n, t in choice.step_times_s.items()}
        emit(
            ThreadsChosen(
                step=counters.step,
                threads=choice.threads,
                previous=choice.previous,
                step_times_s=times,
                reason=choice.reason,
            )
        )

    # on this thread, the one that trains: where build set the count it starts from
    threads = thread_tuner(cfg.train.threads, device.type, world.distributed, threads_chosen)
    return Run(
        cfg=cfg, run_dir=opened, resumed=resume_state is not None, world=world,
        counters=counters, reporter=reporter, stopping=stopping, should_stop=should_stop,
        rank_report=rank_report, replay_plan=replay_plan, start_config=started, parts=parts,
        instruments=instruments, disk=disk, checkpointer=checkpointer, live=live,
        pending=pending, faults=faults, readings=readings, commands=commands, threads=threads,
    )  # fmt: skip
