"""Setting a run up, in the order that keeps a refused run from leaving anything behind.

Accept the resume (checkpoint, config), build what trains (`RunParts`: data, model, optimizer,
samplers), and only once the run directory exists instrument the loop (`Instruments`: forward,
evaluator, FLOPs, peak) and announce the run. Each function takes what it uses and returns
what it built; the Trainer keeps the results.
"""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.checkpoint import store as ckpt
from engine.checkpoint.init_from import open_source
from engine.checkpoint.init_source import REQUIRED, required_refusal
from engine.checkpoint.resume import plan_resume
from engine.checkpoint.source_fit import apply_shape, check_tokenizer_name, load_into
from engine.checkpoint.source_fit import check_vocabulary as check_source_vocabulary
from engine.config.run_config import RunConfig
from engine.data.batches import BatchSampler
from engine.data.preparation import PreparedData, check_length, prepare
from engine.data.resumed_corpus import check_vocabulary
from engine.data.shape_schedule import ShapeSchedule
from engine.distributed.parallel import (
    ParallelPlan,
    parallel_plan,
    per_rank_batch,
    wrap_for_training,
)
from engine.distributed.sharded import shard_model
from engine.distributed.world import World, rank_seed
from engine.events import Event
from engine.files import atomic_write_text
from engine.model.evaluation import Evaluator
from engine.model.float8 import convert_to_float8
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.plan.fixes import check_fits
from engine.plan.flops import Peak, PeakMeter, float8_flop_share, flops_per_token, peak_meter
from engine.plan.planner import MemoryPlan, plan_memory
from engine.rundir.metrics_log import read_history
from engine.rundir.sinks import summary_writer_class
from engine.train.config_file import start_config
from engine.train.counters import Counters
from engine.train.device import (
    allow_tf32,
    autocast_context,
    cpu_bfloat16_note,
    device_capacity,
    select_dtype,
)
from engine.train.faults import SpikeDetector
from engine.train.reporter import Reporter
from engine.train.run_started import run_started
from engine.train.step import StepParts
from engine.train.threads import apply_threads


@dataclass(frozen=True)
class AcceptedResume:
    """A checkpoint accepted to resume from, with the configuration the run continues with."""

    state: dict[str, Any]  # the checkpoint, loaded whole ("_path": where from)
    config: RunConfig  # the run's own configuration, with the overrides that may change
    run_dir: Path
    notes: list[str]  # what the resume changed or kept (RunStarted.notes)
    finished: str | None  # the run has nothing left to train: why (None: it goes on)


def accept_resume(resume_from: Path, overrides: Sequence[str]) -> AcceptedResume:
    """Load the checkpoint at `resume_from` and decide the configuration it continues with."""
    state = ckpt.load_checkpoint(resume_from)
    # A resumed run continues with the configuration it was started with, plus any
    # --set overrides that may change (plan_resume decides, and says what changed).
    plan = plan_resume(state, list(overrides), state["_path"], label=str(resume_from))
    return AcceptedResume(
        state=state,
        config=plan.config,
        run_dir=Path(state["_path"]).parent,
        notes=[*state.get("_notes", ()), *plan.notes],  # a format conversion first
        finished=plan.finished,
    )


@dataclass
class CurrentOptimizer:
    """The run's optimizer of the moment: a restore replaces it, so the parts that use it hold
    this and read `optimizer` each time (engine.checkpoint's OptimizerHolder)."""

    optimizer: Any


@dataclass
class RunParts:
    """What a run trains with, built by `build`."""

    device: torch.device
    dtype: torch.dtype
    data: PreparedData
    parallel: ParallelPlan
    memory_plan: MemoryPlan
    model: GPT
    current_optimizer: CurrentOptimizer
    scaler: torch.amp.GradScaler
    autocast: contextlib.AbstractContextManager[Any]
    train_batches: BatchSampler
    sample_generator: torch.Generator
    spikes: SpikeDetector
    shape_schedule: ShapeSchedule  # each step's shape
    # how the run was set up (RunStarted's notes): init_from's source, float8's layers, a
    # bfloat16 the CPU emulates
    setup_notes: tuple[str, ...] = ()

    @property
    def optimizer(self) -> Any:
        """The optimizer of the moment."""
        return self.current_optimizer.optimizer


def build(
    cfg: RunConfig,
    *,
    device: torch.device,
    world: World,
    data_path: str | None,
    emit: Callable[[Event], None],
    should_stop: Callable[[], bool],
    resume_state: dict[str, Any] | None,
) -> RunParts:
    """Seeds, corpus, model, optimizer, samplers, on `device` (this rank's, its world joined).
    Nothing of a checkpoint is restored here, but its vocabulary is checked against the corpus.
    A new run with `model.init_from` takes its shape from those weights and starts from them."""
    if cfg.log.tensorboard:
        summary_writer_class()  # a missing package refused before anything is on disk
    dtype = select_dtype(cfg.train.dtype, device)
    setup_notes = [note] if (note := cpu_bfloat16_note(dtype, device)) else []
    allow_tf32(device)
    apply_threads(cfg.train.threads, device.type)  # on the training thread
    random.seed(cfg.train.seed)
    np.random.seed(cfg.train.seed)
    torch.manual_seed(cfg.train.seed)
    weights = None
    if resume_state is None and cfg.model.init_from:  # a resume's weights are its checkpoint's
        if cfg.model.init_from == REQUIRED:
            raise required_refusal(cfg.name)
        weights = open_source(cfg.model.init_from)  # refused before the corpus is prepared
        check_tokenizer_name(weights, cfg.data.tokenizer)
        setup_notes += [weights.note(), *apply_shape(cfg.model, weights)]

    # The preparation is a phase of the run: its progress goes to the UI and the sinks (the
    # metrics file keeps only the final record) and a stop asked for meanwhile ends it.
    data = prepare(cfg.data, data_path=data_path, progress=emit, should_stop=should_stop)
    if resume_state is not None:
        check_vocabulary(resume_state, data.tokenizer, data.source)
    if weights is not None:
        check_source_vocabulary(weights, data.tokenizer, data.source)
    if data.record["source"] == "path":
        cfg.data.source = data.record["path"]  # config.json names what was trained on
    check_length(data, cfg.model.block_size)
    vocab = data.tokenizer.vocab_size
    # Pre-flight: refuse a configuration that cannot fit before allocating anything.
    capacity = device_capacity(device)
    fits_alone = plan_memory(cfg, vocab, device.type, capacity).fits
    parallel = parallel_plan(cfg, world, fits_one_device=fits_alone)
    # per device, with this world's sharding (FSDP) or gradient buckets (DDP)
    memory_plan = check_fits(
        per_rank_batch(cfg, world.world_size), vocab, device.type, capacity,
        world.world_size, parallel.mode,
    )  # fmt: skip
    # every rank builds the same initial weights from the same seed
    model = GPT(cfg.model, vocab)
    if weights is not None:
        load_into(model, weights)  # the padded rows keep the seed's values, as a fresh model's
    model = model.to(device)
    # before the optimizer and any wrapping
    if converted := convert_to_float8(model, cfg.train.float8, device):
        how = "emulated in ordinary matmuls (no faster)"
        if cfg.train.float8 == "on":
            how = "on the GPU's float8 tensor cores"
        setup_notes.append(
            f"train.float8: {len(converted)} Linear layers (the MLPs' and the head's) in float8, {how}"
        )
    if parallel.mode == "fsdp":
        shard_model(model, dtype)  # before the optimizer: it holds the shards
    if world.distributed:
        torch.manual_seed(cfg.train.seed + world.rank)  # then each its own dropout
    optimizer = build_optimizer(model, cfg.optim, device.type)
    # a resume's schedule grows to the micro-batch its run started with, which an
    # out-of-memory retry may have halved since (the checkpoint's config holds the half)
    started = start_config(resume_state) if resume_state is not None else None
    schedule = ShapeSchedule.of(cfg, started)
    return RunParts(
        device=device,
        dtype=dtype,
        data=data,
        parallel=parallel,
        memory_plan=memory_plan,
        model=model,
        current_optimizer=CurrentOptimizer(optimizer),
        scaler=torch.amp.GradScaler(device.type, enabled=dtype == torch.float16),
        autocast=autocast_context(device, dtype),
        train_batches=BatchSampler(
            data.train,
            cfg.model.block_size,
            parallel.micro_batch,  # train.batch_size, or its share when split over the ranks
            device,
            rank_seed(cfg.train.seed, world.rank),  # each rank its own batches
            schedule=schedule,  # each step's shape: the same on every rank
        ),
        sample_generator=torch.Generator(device=device).manual_seed(cfg.train.seed + 2),
        spikes=SpikeDetector(cfg.train.spike_sigma),
        setup_notes=tuple(setup_notes),
        shape_schedule=schedule,
    )


@dataclass
class Instruments:
    """The forward pass one update trains with, and what the loop measures and reports with."""

    step: StepParts
    evaluator: Evaluator
    flops_per_token: float
    peak_meter: PeakMeter  # a measured peak is corrected when the model beats it
    peak: Peak  # as it was at the start (RunStarted)
    log_every: int  # steps between two read-backs of the losses


def read_back_every(cfg: RunConfig, device: torch.device) -> int:
    """Steps between two read-backs of the losses: train.log_every, else 1 on CPU (a read-back
    costs nothing there) and 10 on an accelerator (each one waits for the device)."""
    return cfg.train.log_every or (1 if device.type == "cpu" else 10)


def instrument(cfg: RunConfig, parts: RunParts, *, world: World, report: Reporter) -> Instruments:
    """The (wrapped, compiled) forward, evaluator, FLOP counts and peak of a built run."""
    wrapped = wrap_for_training(parts.model, parts.parallel, parts.device, cfg.train.compile)
    evaluator = Evaluator(
        parts.model, wrapped.eval_forward, parts.autocast, parts.device, cfg,
        world=world, split_over_ranks=parts.parallel.mode == "ddp",
    )  # fmt: skip
    # MFU is never above 100%: a measured peak the model beats is measured again
    flops = flops_per_token(parts.model.num_params(), cfg.model)
    float8_share = 0.0
    if cfg.train.float8 == "on":  # emulated float8 runs its matmuls at the compute dtype
        float8_share = float8_flop_share(cfg.model, parts.model.padded_vocab, flops)
    meter = peak_meter(
        parts.device, parts.dtype, on_change=lambda msg: report.alert("info", msg, "peak"),
        float8_share=float8_share,
    )  # fmt: skip
    return Instruments(
        step=StepParts(
            cfg=cfg,
            model=parts.model,
            forward=wrapped.train_forward,
            scaler=parts.scaler,
            autocast=parts.autocast,
            batches=parts.train_batches,
            device=parts.device,
            dtype=parts.dtype,
            micro_steps=parts.parallel.micro_steps,
            grad_sync=wrapped.grad_sync,
        ),
        evaluator=evaluator,
        flops_per_token=flops,
        peak_meter=meter,
        peak=meter.peak,
        log_every=read_back_every(cfg, parts.device),
    )


def announce(
    cfg: RunConfig,
    *,
    run_dir: Path,
    parts: RunParts,
    instruments: Instruments,
    counters: Counters,
    notes: list[str],
    resume_state: dict[str, Any] | None,
    report: Reporter,
    planned_lr: tuple[tuple[int, float], ...] | None = None,
    tokens_schedule: tuple[tuple[int, int], ...] | None = None,
) -> None:
    """config.json and RunStarted; on resume, the curves so far for the UI (rank 0's).
    config.toml, the starting values and the changes, is the run's ConfigFile's. `planned_lr`
    and `tokens_schedule`: the LR and the tokens a step as the run followed them (None: cfg's
    over the whole run)."""
    # replaced whole (a link planted there is replaced, never written through)
    atomic_write_text(run_dir / "config.json", json.dumps(cfg.to_dict(), indent=2))
    report.emit(
        run_started(
            cfg,
            run_dir=run_dir,
            device=parts.device,
            dtype=parts.dtype,
            model=parts.model,
            data=parts.data,
            start_step=counters.step,
            resumed_from=resume_state["_path"] if resume_state else None,
            memory_plan=parts.memory_plan,
            flops_per_token=instruments.flops_per_token,
            peak=instruments.peak,
            notes=[*parts.setup_notes, *notes],
            schedule=parts.shape_schedule,
            train_time_s=counters.train_time_s,
            planned_lr=planned_lr,
            tokens_schedule=tokens_schedule,
        )
    )
    if resume_state is None:
        return
    if resume_state["config"]["optim"]["name"] != cfg.optim.name:
        report.alert(
            "warning",
            f"optimizer switched to {cfg.optim.name} on resume: it starts fresh from the "
            f"checkpoint's weights at step {counters.step}",
            "resume",
        )
    # The curves so far, for the UI only: the metrics file has them already. A damaged
    # line is read past, with one warning (the run goes on).
    damaged = lambda message: report.alert("warning", message, "metrics")  # noqa: E731
    for event in read_history(run_dir / "metrics.jsonl", counters.step, on_damaged=damaged):
        report.events.put(event)
