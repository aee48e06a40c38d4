"""Setting a run up, in the order that keeps a refused run from leaving anything behind.

The Trainer's `_setup` calls these in turn: accept the resume (checkpoint, config, corpus),
build (device, seeds, data, model, optimizer, samplers, restored state), and only then create
the run directory, instrument the loop (forward, evaluator, FLOPs, peak) and announce the run.
Each sets the trainer's attributes the loop reads.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from engine.checkpoint import store as ckpt
from engine.checkpoint.resume import plan_resume
from engine.config.to_toml import config_to_toml
from engine.control.server import serve_run
from engine.data.batches import BatchSampler
from engine.data.preparation import check_length, prepare
from engine.data.resumed_corpus import check_vocabulary, resume_data_path
from engine.distributed.parallel import parallel_plan, per_rank_batch, wrap_for_training
from engine.distributed.sharded import shard_model
from engine.distributed.world import from_main, init_world, rank_device, rank_seed, roster
from engine.files import atomic_write_text
from engine.model.evaluation import Evaluator
from engine.model.gpt import GPT
from engine.model.optimizers import build_optimizer
from engine.plan.fixes import check_fits
from engine.plan.flops import flops_per_token, peak_meter
from engine.plan.planner import plan_memory
from engine.rundir.layout import create_run_dir, default_run_dir
from engine.rundir.metrics_log import read_history
from engine.rundir.sinks import log_sinks, summary_writer_class
from engine.rundir.summary import SummarySink
from engine.train.device import (
    allow_tf32,
    autocast_context,
    device_capacity,
    select_device,
    select_dtype,
)
from engine.train.faults import SpikeDetector
from engine.train.run_started import run_started
from engine.train.threads import apply_threads

REPLAY_HEADER = (
    "The configuration this run trained with, every key resolved.\n"
    "`cockpit train --preset THIS_FILE` starts the same run afresh;\n"
    "`cockpit train --resume RUN_DIR` continues this one."
)

if TYPE_CHECKING:
    from engine.train.trainer import Trainer


def accept_resume(run: Trainer) -> dict[str, Any] | None:
    """The checkpoint to resume from (None for a fresh run), with its config and corpus."""
    if run.resume_from is None:
        return None
    state = ckpt.load_checkpoint(run.resume_from)
    # A resumed run continues with the configuration it was started with, plus any
    # --set overrides that may change (engine/checkpoint/resume.py decides, and says what changed).
    plan = plan_resume(state, run.resume_overrides, state["_path"], label=str(run.resume_from))
    run.cfg = plan.config
    run.resume_notes = [*state.get("_notes", ()), *plan.notes]  # a format conversion first
    run.run_dir = Path(state["_path"]).parent
    if plan.finished is not None:
        run._already_finished = plan.finished
        run.step = int(state["step"])
        return state
    # The corpus belongs to the weights: the recorded one, a verified copy, or a refusal
    # (before anything on disk is touched).
    run.data_path, data_notes = resume_data_path(
        state, run.cfg.data, run.data_path, run.allow_data_change
    )
    run.resume_notes.extend(data_notes)
    return state

def build(run: Trainer, state: dict[str, Any] | None) -> None:
    """Device, seeds, corpus, model, optimizer, samplers; a resumed run's state restored."""
    cfg = run.cfg

    run.device = rank_device(select_device(cfg.train.device), run.world)
    run.sync.group = init_world(run.world, run.device)  # under torchrun: join the others
    if run.world.distributed:
        run.ranks = roster(run.world, run.sync.group)
    if cfg.log.tensorboard:
        summary_writer_class()  # a missing package refused before anything is on disk
    run.dtype = select_dtype(cfg.train.dtype, run.device)
    allow_tf32(run.device)
    apply_threads(cfg.train.threads, run.device.type)  # on the training thread (engine/train/threads.py)
    random.seed(cfg.train.seed)
    np.random.seed(cfg.train.seed)
    torch.manual_seed(cfg.train.seed)

    # The preparation is a phase of the run: its progress goes to the UI and the sinks (the
    # metrics file keeps only the final record) and a stop asked for meanwhile ends it.
    run.data = prepare(
        cfg.data,
        data_path=run.data_path,
        progress=run.emit,
        should_stop=run.preparation_should_stop,
    )
    if state is not None:
        check_vocabulary(state, run.data.tokenizer, run.data.source)
    if run.data.record["source"] == "path":
        cfg.data.source = run.data.record["path"]  # config.json names what was trained on
    check_length(run.data, cfg.model.block_size)
    vocab = run.data.tokenizer.vocab_size
    # Pre-flight: refuse a configuration that cannot fit before allocating anything.
    capacity = device_capacity(run.device)
    fits_alone = plan_memory(cfg, vocab, run.device.type, capacity).fits
    run.parallel = parallel_plan(cfg, run.world, fits_one_device=fits_alone)
    if run.parallel.note:
        run.resume_notes.append(run.parallel.note)  # RunStarted's notes: said at the start
    # per device, with this world's sharding (FSDP) or gradient buckets (DDP)
    planned_as = run.parallel.mode if run.world.world_size > 1 else "single"  # a world of one
    run.memory_plan = check_fits(
        per_rank_batch(cfg, run.world.world_size), vocab, run.device.type, capacity,
        run.world.world_size, planned_as,
    )  # fmt: skip
    # every rank builds the same initial weights from the same seed
    run.model = GPT(cfg.model, vocab).to(run.device)
    if run.parallel.mode == "fsdp":
        shard_model(run.model, run.dtype)  # before the optimizer: it holds the shards
    if run.world.distributed:
        torch.manual_seed(cfg.train.seed + run.world.rank)  # then each its own dropout
    run.optimizer = build_optimizer(run.model, cfg.optim, run.device.type)
    run.scaler = torch.amp.GradScaler(run.device.type, enabled=run.dtype == torch.float16)
    run.autocast = autocast_context(run.device, run.dtype)
    run.train_batches = BatchSampler(
        run.data.train,
        cfg.model.block_size,
        run.parallel.micro_batch,  # train.batch_size, or its share when split over the ranks
        run.device,
        rank_seed(cfg.train.seed, run.world.rank),  # each rank its own batches
    )
    run.sample_generator = torch.Generator(device=run.device).manual_seed(cfg.train.seed + 2)
    run.spikes = SpikeDetector(cfg.train.spike_sigma)
    if state is not None:
        run.checkpointer.restore(state)
        # An older checkpoint starts a new branch: the newer ones must not be pruned into
        # it, nor picked by the next --resume RUN_DIR.
        aside, moved = ckpt.set_aside_newer(run.run_dir, run.step)
        if aside is not None:
            run.resume_notes.append(
                f"resumed at step {run.step} from an older checkpoint: {', '.join(moved)} "
                f"moved to {aside} (kept); this run continues the new branch"
            )

def open_run_dir(run: Trainer) -> None:
    """Only now, with the corpus, config and checkpoint all accepted, is anything written:
    a run refused before this point leaves no directory and no record behind. Under torchrun
    rank 0 owns the directory; the others learn its name (it holds the checkpoints they load)."""
    run.run_dir = from_main(run.run_dir or default_run_dir(run.cfg), run.world, run.sync.group)
    if not run.world.is_main:
        return
    create_run_dir(run.run_dir)
    # One engine per directory (a ConfigError naming the other one, before anything else is
    # written), and the control socket viewers attach to; a sink, closed with the run.
    history = read_history(run.run_dir / "metrics.jsonl", run.step) if run.resume_from else []
    run.control = serve_run(
        run.run_dir, run, lambda message: run._alert("warning", message, "socket"), history,
        emit=run.emit,
    )
    run.sinks.append(run.control)
    ckpt.remove_partial_saves(run.run_dir)  # a save killed mid-write left its temp file
    run.metrics.open(run.run_dir / "metrics.jsonl")
    run.log_sinks = log_sinks(run.cfg, run.run_dir, start_step=run.step)  # TensorBoard...
    run.sinks.extend(run.log_sinks)
    run.sinks.append(SummarySink(run.run_dir, run.world.world_size))  # summary.json: `cockpit runs`

def instrument(run: Trainer) -> None:
    """The forward pass, evaluator, FLOP counts and peak that the loop reports with."""
    cfg = run.cfg
    wrapped = wrap_for_training(run.model, run.parallel, run.device, cfg.train.compile)
    run.forward, run.grad_sync = wrapped.train_forward, wrapped.grad_sync
    run.micro_steps = run.parallel.micro_steps
    run.evaluator = Evaluator(
        run.model, wrapped.eval_forward, run.autocast, run.device, cfg,
        world=run.world, split_over_ranks=run.parallel.mode == "ddp",
    )  # fmt: skip
    run.flops_per_token = flops_per_token(run.model.num_params(), cfg.model)
    # a measured peak is corrected when the model beats it (MFU never above 100%)
    run.peak_meter = peak_meter(
        run.device, run.dtype, on_change=lambda msg: run._alert("info", msg, "peak")
    )
    run.peak = run.peak_meter.peak  # as it was at the start (RunStarted)
    run.log_every = cfg.train.log_every or (1 if run.device.type == "cpu" else 10)

def announce(run: Trainer, state: dict[str, Any] | None) -> None:
    """config.json and RunStarted; on resume, the curves so far for the UI (rank 0's)."""
    cfg = run.cfg
    if not run.world.is_main:
        return
    # replaced whole (a link planted at either name is replaced, never written through)
    atomic_write_text(run.run_dir / "config.json", json.dumps(cfg.to_dict(), indent=2))
    # the same config as TOML: `cockpit train --preset RUN_DIR/config.toml` replays the run
    atomic_write_text(run.run_dir / "config.toml", config_to_toml(cfg, header=REPLAY_HEADER))
    run.emit(
        run_started(
            cfg,
            run_dir=run.run_dir,
            device=run.device,
            dtype=run.dtype,
            model=run.model,
            data=run.data,
            start_step=run.step,
            resumed_from=state["_path"] if state else None,
            memory_plan=run.memory_plan,
            flops_per_token=run.flops_per_token,
            peak=run.peak,
            notes=run.resume_notes,
            train_time_s=run.train_time_s,
        )
    )
    if state is not None and state["config"]["optim"]["name"] != cfg.optim.name:
        run._alert(
            "warning",
            f"optimizer switched to {cfg.optim.name} on resume: it starts fresh from the "
            f"checkpoint's weights at step {run.step}",
            "resume",
        )
    if state is not None:
        # The curves so far, for the UI only: the metrics file has them already. A damaged
        # line is read past, with one warning (the run goes on).
        damaged = lambda message: run._alert("warning", message, "metrics")  # noqa: E731
        for event in read_history(run.run_dir / "metrics.jsonl", run.step, on_damaged=damaged):
            run.events.put(event)
