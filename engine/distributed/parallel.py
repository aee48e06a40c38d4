"""How a model trains across ranks: data parallel (DDP) or sharded (FSDP2), chosen per run.

`parallel_plan` checks the choice against the world and the config (one-line ConfigErrors);
`wrap_for_training` returns what the step trains with: the forward that synchronises gradients,
the forward evaluations and samples use, and the context that skips the gradient all-reduce on
every micro-step but the last (as nanoGPT does). A single process gets its model back unwrapped.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from engine.config import split_micro_batch
from engine.config.run_config import ConfigError, RunConfig
from engine.distributed.world import World

# FSDP shards every matrix across ranks: an optimizer that needs a whole matrix at once (Muon's
# orthogonalisation, Adafactor's row and column factors) would see only its rank's rows.
FSDP_OPTIMIZERS = ("adamw", "lion", "sgd")


@dataclass(frozen=True)
class ParallelPlan:
    mode: str  # "single", "ddp" or "fsdp"
    micro_steps: int  # micro-batches per optimizer step on each rank
    micro_batch: int = 0  # sequences in each of them (0: train.batch_size)
    note: str = ""  # how the step was shared when the micro-batch had to be split


def share_step(batch: int, accum: int, ranks: int) -> tuple[int, int] | None:
    """(micro-steps, micro-batch) for each of `ranks` ranks so that together they take the
    step's batch x accum sequences: the accumulation shared when it divides, else the fewest
    micro-steps whose micro-batch divides (the largest micro-batch); None if the step's
    sequences cannot be shared equally at all."""
    if accum % ranks == 0:
        return accum // ranks, batch
    sequences = batch * accum
    if sequences % ranks:
        return None
    per_rank = sequences // ranks
    steps = next(m for m in range(-(-accum // ranks), per_rank + 1) if per_rank % m == 0)
    return steps, per_rank // steps


def rank_share_of(sequences: int, batch: int, micro_batch: int) -> int | None:
    """A rank's share of a micro-batch of `sequences` when the ranks split each of the
    configured `batch` sequences into micro-batches of `micro_batch` (share_step); None when it
    does not split into whole sequences (a batch-size schedule's start of 3 over 2 ranks)."""
    if sequences * micro_batch % batch:
        return None
    return sequences * micro_batch // batch


def schedule_start_refusal(cfg: RunConfig, ranks: int, micro_batch: int) -> str | None:
    """Why the ranks cannot share a batch-size schedule's train.batch_start when they split
    each micro-batch of train.batch_size into theirs of `micro_batch`, or None when they can.

    The schedule's micro-batches are multiples of the start, and the last train.batch_size, so
    a start whose share is whole makes every step's share whole: the world trains each step
    exactly the sequences the schedule (and RunStarted.tokens_schedule) says."""
    t = cfg.train
    if t.batch_start > t.batch_size:  # a micro-batch an out-of-memory retry split, alone
        whole, accum = split_micro_batch(t.batch_size, t.grad_accum, t.batch_start) or (0, 0)
        return (
            f"train.batch_start={t.batch_start} is larger than train.batch_size={t.batch_size} "
            "(a micro-batch an out-of-memory retry split): ranks share the schedule of a whole "
            f"micro-batch; use --set train.batch_size={whole} --set train.grad_accum={accum}"
        )
    if not t.batch_start or micro_batch == t.batch_size:
        return None
    if rank_share_of(t.batch_start, t.batch_size, micro_batch) is not None:
        return None
    unit = t.batch_size // math.gcd(t.batch_size, micro_batch)  # the smallest start that splits
    below, above = t.batch_start // unit * unit, -(-t.batch_start // unit) * unit
    nearest = " or ".join(str(v) for v in (below, above) if 0 < v <= t.batch_size)
    return (
        f"train.batch_start={t.batch_start} cannot be shared by {ranks} ranks: each rank takes "
        f"{micro_batch} of a micro-batch's {t.batch_size} sequences (train.grad_accum="
        f"{t.grad_accum} is not a multiple of {ranks}), so the schedule's micro-batches must be "
        f"multiples of {unit} sequences; use --set train.batch_start={nearest}"
    )


def per_rank_batch(cfg: RunConfig, world_size: int) -> RunConfig:
    """The config as each rank trains it, for the memory plan: where the ranks share a step by
    splitting its micro-batch (share_step), the smaller micro-batch, the same tokens a step."""
    t = cfg.train
    shared = share_step(t.batch_size, t.grad_accum, world_size) if world_size > 1 else None
    if shared is None or shared[1] == t.batch_size:
        return cfg
    steps, batch = shared
    # a rank's share of a schedule's start (whole: parallel_plan refuses one that is not)
    start = -(-t.batch_start * batch // t.batch_size)
    return replace(
        cfg, train=replace(t, batch_size=batch, grad_accum=steps * world_size, batch_start=start)
    )


def parallel_plan(cfg: RunConfig, world: World, fits_one_device: bool = True) -> ParallelPlan:
    """The mode this run trains in and each rank's share of the step's sequences, so that
    the effective batch (`tokens_per_step`) is the same at every world size."""
    accum, n, batch = cfg.train.grad_accum, world.world_size, cfg.train.batch_size
    if not world.distributed:
        return ParallelPlan("single", accum, batch, note=_world_of_one_note(cfg, world))
    shared = share_step(batch, accum, n)
    if shared is None:
        multiple = accum + (-accum) % n  # the next multiple of the world size
        keep = (
            f" --set train.batch_size={batch * accum // multiple} (the same batch)"
            if (batch * accum) % multiple == 0
            else ""
        )
        raise ConfigError(
            f"train.grad_accum={accum} cannot be shared by {n} ranks (nor can a step's "
            f"{batch * accum} sequences, train.batch_size x grad_accum, be split in {n} "
            f"equal micro-batches); use --set train.grad_accum={multiple}{keep}"
        )
    micro_steps, micro_batch = shared
    refusal = schedule_start_refusal(cfg, n, micro_batch)
    if refusal:
        raise ConfigError(refusal)
    note = ""
    if micro_batch != batch:
        note = (
            f"train.grad_accum={accum} cannot be shared by {n} ranks: each rank takes "
            f"{micro_steps} micro-batch{'es' if micro_steps > 1 else ''} of {micro_batch} "
            f"sequences instead of {accum} of {batch} (the same {batch * accum} sequences a step)"
        )
    mode = cfg.train.parallel
    if mode == "auto":
        mode = "ddp" if fits_one_device else "fsdp"
    if mode == "fsdp" and cfg.optim.name not in FSDP_OPTIMIZERS:
        raise ConfigError(
            f"train.parallel=fsdp shards every matrix across ranks, and optim.name="
            f"{cfg.optim.name} needs whole matrices; use --set optim.name=adamw (or lion), "
            "or train.parallel=ddp"
        )
    return ParallelPlan(mode, micro_steps, micro_batch, note)


def _world_of_one_note(cfg: RunConfig, world: World) -> str:
    """The line a torchrun run of one rank gets when it asked for a parallel mode by name."""
    mode = cfg.train.parallel
    if not world.launched or mode == "auto":
        return ""
    what = "shard its weights over" if mode == "fsdp" else "average its gradients with"
    return (
        f"train.parallel={mode} at world size 1: one rank has no other to {what}, so it trains "
        "as a plain single process (no process group, no wrapper, the same steps)"
    )


@dataclass
class Wrapped:
    """What the loop trains and evaluates with (see module doc)."""

    train_forward: Callable[..., Any]
    eval_forward: Callable[..., Any]
    grad_sync: Callable[[bool], contextlib.AbstractContextManager[Any]]


def _always_sync(_last: bool) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


def wrap_for_training(
    model: torch.nn.Module, plan: ParallelPlan, device: torch.device, compile_model: bool
) -> Wrapped:
    """Wrap `model` for `plan` (FSDP must already have been applied: `shard_model`)."""
    if compile_model:  # its generated code is imported back: never from a folder in /tmp
        from engine.data.cache_dirs import keep_compile_cache_private

        keep_compile_cache_private()
    eval_forward: Callable[..., Any] = torch.compile(model) if compile_model else model
    if plan.mode != "ddp":
        # single process: the model itself; FSDP: the sharded module is its own forward, and it
        # reduces gradients after each backward (the micro-steps' reduce-scatters are kept
        # for the memory they save)
        return Wrapped(eval_forward, eval_forward, _always_sync)
    from torch.nn.parallel import DistributedDataParallel

    # the model's only buffers (rotary tables) are computed alike on every rank: nothing to
    # send at each forward (the keyword that says so depends on the torch version)
    no_buffer_sync = (
        {"forward_sync_buffers": False}
        if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
        else {"broadcast_buffers": False}
    )
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, **no_buffer_sync
    )

    def grad_sync(last: bool) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext() if last else ddp.no_sync()

    train_forward = torch.compile(ddp) if compile_model else ddp
    return Wrapped(train_forward, eval_forward, grad_sync)
