"""Run health: how far an optimizer step moved the weights, relative to their size.

Sampled every `HEALTH_EVERY` steps on a cheap subset (the attention output projections: d*d
per layer, not every weight), because each sample clones those matrices before the step.
"""

from __future__ import annotations

import torch

HEALTH_EVERY = 50  # steps between update-to-weight ratio samples (each clones a few matrices)

# The watched weights as they are now, and the copies taken before the optimizer step.
Watch = tuple[list[torch.Tensor], list[torch.Tensor]]


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
