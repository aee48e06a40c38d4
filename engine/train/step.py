"""One optimizer step with gradient accumulation; the one writer of the optimizer's LRs.

The optimizer is passed per call (a rollback or resume replaces it). Nothing is read back to
the host: a non-finite gradient refuses its update on the device (a `found_inf` flag, as
GradScaler hands the fused AdamW), and every later update is held back with it until the
read-back, which finds the weights as they were before the refused step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from engine.config.run_config import RunConfig
from engine.data.batches import BatchSampler
from engine.events import MemoryBreakdown
from engine.optim.optimizers import applied_lr, set_lr_factor
from engine.optim.refused_step import step_unless_refused
from engine.plan import memory
from engine.train.readback import PendingStep

# Run health: how far an optimizer step moved the weights, relative to their size, sampled
# every HEALTH_EVERY steps on a cheap subset (the attention output projections: d*d per layer,
# not every weight), because each sample clones those matrices before the step.
HEALTH_EVERY = 50  # steps between update-to-weight ratio samples (each clones a few matrices)

# The watched weights as they are now, and the copies taken before the optimizer step.
Watch = tuple[list[torch.Tensor], list[torch.Tensor]]


def lr_at_factor(optimizer: Any, factor: float) -> float:
    """The LR `applied_lr` reads once a step applied `factor` (the LR the app shows)."""
    groups = optimizer.param_groups
    if not groups:
        return 0.0
    plain = [g for g in groups if g.get("lr_setting") == "optim.lr"]
    return float((plain or groups)[-1]["base_lr"] * factor)


def update_ratio(before: list[torch.Tensor], after: list[torch.Tensor]) -> torch.Tensor:
    """||w_after - w_before|| / ||w_before|| over a set of tensors, on their device."""
    delta = torch.stack(
        [(a.detach() - b).float().pow(2).sum() for a, b in zip(after, before, strict=True)]
    ).sum()
    norm = torch.stack([b.float().pow(2).sum() for b in before]).sum()
    return delta.sqrt() / norm.sqrt().clamp_min(1e-12)


def watch_before_step(model: torch.nn.Module, step: int) -> Watch | None:
    """At a sampled step, copy the watched weights before the optimizer moves them."""
    if step % HEALTH_EVERY != 0:
        return None
    watched = [block.attn.c_proj.weight for block in model.blocks]
    return watched, [w.detach().clone() for w in watched]


def ratio_after_step(watch: Watch | None) -> torch.Tensor | None:
    """The update ratio of a watched step (on the device, not read back), else None."""
    if watch is None:
        return None
    watched, before = watch
    ratio = update_ratio(before, watched)
    # sharded weights: the world's ratio, whole, read back with the plain tensors of the step
    return ratio.full_tensor() if hasattr(ratio, "full_tensor") else ratio


@dataclass
class StepParts:
    """What a step trains with, read on every call: `forward` may be wrapped after it is
    built (tests poison it). The optimizer is passed apart because a restore replaces it."""

    cfg: RunConfig  # its grad clip and finite check, and the memory breakdown's shapes
    model: torch.nn.Module
    forward: Callable[..., Any]  # the model, or its compiled or data-parallel forward
    scaler: torch.amp.GradScaler
    autocast: contextlib.AbstractContextManager[Any]
    batches: BatchSampler
    device: torch.device
    dtype: torch.dtype
    micro_steps: int  # micro-batches per update on this rank (its share under torchrun)
    # the context of micro-step `last`: under DDP gradients are averaged on the last one only
    grad_sync: Callable[[bool], contextlib.AbstractContextManager[Any]]


@dataclass
class StepOutcome:
    """The step, its values still on the device (`pending`: its `held_back` flag says whether
    the update was applied, known at the read-back); `memory` is the breakdown when asked for."""

    pending: PendingStep
    memory: MemoryBreakdown | None = None


def train_step(
    parts: StepParts,
    optimizer: Any,
    step: int,
    lr_schedule_factor: float,
    report_memory: bool,
    held_back: torch.Tensor | None = None,
) -> StepOutcome:
    """Accumulate `parts.micro_steps` micro-batches and apply one update at LR factor
    `lr_schedule_factor`; `step` is the number of steps done before this one. `held_back` is
    the last step's flag when it is not read back yet: 1.0 there (an update refused since the
    last read-back) holds this update back too."""
    cfg = parts.cfg
    start_allocated = memory.step_start_allocated(parts.device) if report_memory else 0
    set_lr_factor(optimizer, lr_schedule_factor)
    lr = applied_lr(optimizer)
    accum, grad_sync = parts.micro_steps, parts.grad_sync
    loss_sum = None
    data_time = 0.0
    tokens = 0
    parts.batches.at_step(step)  # a batch-size or sequence-length schedule: this step's shape
    # the sequences of each micro-batch: all alike, but for an out-of-memory retry's halves of a
    # scheduled batch (1 + 2 of 3), which take the schedule's sequences exactly
    sizes = parts.batches.micro_batches(accum)
    sequences = sum(sizes)
    for micro, size in enumerate(sizes):
        if not size:
            continue  # fewer sequences than micro-steps (never the last)
        t_data = time.perf_counter()
        parts.batches.take(size)
        x, y = parts.batches.next()
        data_time += time.perf_counter() - t_data
        tokens += x.numel()  # the shape's, known on the host
        with grad_sync(micro == accum - 1):
            with parts.autocast:
                # with targets the model returns no logits: the loss is computed in chunks;
                # each micro-batch weighs as its sequences (1/accum when all are alike)
                loss = parts.forward(x, y)[1] / (sequences / size)
            parts.scaler.scale(loss).backward()
        loss_sum = loss.detach() if loss_sum is None else loss_sum + loss.detach()
    grad_norm = None
    if cfg.optim.grad_clip > 0 or cfg.train.check_finite:
        parts.scaler.unscale_(optimizer)
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(parts.model.parameters(), clip)
        if hasattr(grad_norm, "full_tensor"):  # sharded parameters: the world's norm, whole
            grad_norm = grad_norm.full_tensor()
    watch = watch_before_step(parts.model, step)  # run health, sampled
    held = None
    # fp16's GradScaler skips non-finite steps itself (and lowers its scale); otherwise a
    # non-finite gradient must never reach the weights, refused on the device (no host sync)
    if cfg.train.check_finite and not parts.scaler.is_enabled():
        held = (~torch.isfinite(grad_norm)).float()
        if held_back is not None:
            held = torch.maximum(held, held_back)
        step_unless_refused(optimizer, held)
    else:
        parts.scaler.step(optimizer)
        parts.scaler.update()
    ratio = ratio_after_step(watch)
    breakdown = None
    if report_memory:
        breakdown = memory.memory_breakdown(
            parts.model, optimizer, cfg, parts.device, parts.dtype, step, start_allocated
        )
    optimizer.zero_grad(set_to_none=True)
    return StepOutcome(
        pending=PendingStep(
            step + 1, loss_sum, grad_norm, lr, data_time, ratio, held, tokens, x.shape[1]
        ),
        memory=breakdown,
    )
