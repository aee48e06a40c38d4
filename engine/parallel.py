"""How a model trains across ranks: data parallel (DDP) or sharded (FSDP2), chosen per run.

`parallel_plan` checks the choice against the world and the config (one-line ConfigErrors);
`wrap_for_training` returns what the step trains with: the forward that synchronises gradients,
the forward evaluations and samples use, and the context that skips the gradient all-reduce on
every micro-step but the last (as nanoGPT does). A single process gets its model back unwrapped.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from engine.config import ConfigError, RunConfig
from engine.distributed import World

PARALLEL_MODES = ("auto", "ddp", "fsdp")
# FSDP shards every matrix across ranks: an optimizer that needs a whole matrix at once (Muon's
# orthogonalisation, Adafactor's row and column factors) would see only its rank's rows.
FSDP_OPTIMIZERS = ("adamw", "lion")


@dataclass(frozen=True)
class ParallelPlan:
    mode: str  # "single", "ddp" or "fsdp"
    micro_steps: int  # micro-batches per optimizer step on each rank


def parallel_plan(cfg: RunConfig, world: World, fits_one_device: bool = True) -> ParallelPlan:
    """The mode this run trains in and each rank's share of the gradient accumulation, so that
    the effective batch (`tokens_per_step`) is the same at every world size."""
    accum, n = cfg.train.grad_accum, world.world_size
    if not world.distributed:
        return ParallelPlan("single", accum)
    if accum % n:
        shared = accum + (-accum) % n  # the next multiple of the world size
        batch = cfg.train.batch_size
        keep = (
            f" --set train.batch_size={batch * accum // shared} (the same batch)"
            if (batch * accum) % shared == 0
            else ""
        )
        raise ConfigError(
            f"train.grad_accum={accum} cannot be shared by {n} ranks (each takes grad_accum/{n} "
            f"micro-batches of a step); use --set train.grad_accum={shared}{keep}"
        )
    mode = cfg.train.parallel
    if mode == "auto":
        mode = "ddp" if fits_one_device else "fsdp"
    if n == 1:
        mode = "ddp"  # sharding over one rank saves nothing: a world of one is data parallel
    if mode == "fsdp" and cfg.optim.name not in FSDP_OPTIMIZERS:
        raise ConfigError(
            f"train.parallel=fsdp shards every matrix across ranks, and optim.name="
            f"{cfg.optim.name} needs whole matrices; use --set optim.name=adamw (or lion), "
            "or train.parallel=ddp"
        )
    return ParallelPlan(mode, accum // n)


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
    eval_forward: Callable[..., Any] = torch.compile(model) if compile_model else model
    if plan.mode != "ddp":
        # single process: as before; FSDP: the sharded module is its own forward, and it
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
