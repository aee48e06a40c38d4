"""Muon's update in float32, its Newton-Schulz iterations batched over same-shape matrices."""

from __future__ import annotations

import math
from typing import Any

import torch

from engine.model.refused_step import assign_unless_refused, found_inf_mask


def newton_schulz(
    x: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float
) -> torch.Tensor:
    """Muon's quintic Newton-Schulz orthogonalisation of a batch of matrices (b, m, n), in the
    dtype given: the same iteration as torch.optim.Muon's, batched instead of one by one."""
    a, b, c = coefficients
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral norm <= 1
    for _ in range(steps):
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if tall else x


def muon_lr_scale(adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """torch.optim.Muon's per-matrix LR adjustment (its rule, restated: it is private there)."""
    rows, cols = shape[:2]
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    if adjust_lr_fn in (None, "original"):
        return math.sqrt(max(1.0, rows / cols))
    return 1.0


class BatchedMuon(torch.optim.Muon):
    """torch.optim.Muon with its Newton-Schulz iterations in float32, batched over the matrices
    of one shape (a model's blocks repeat the same few shapes).

    The library runs them matrix by matrix in bfloat16, the right choice on a GPU; on a CPU
    without bfloat16 matrix units that is the slowest part of a small model's step. Same state
    ("momentum_buffer"), coefficients, Nesterov momentum, decoupled weight decay and LR
    adjustment, so checkpoints move freely between the two.

    Unlike torch.optim.Muon it reads a `found_inf` tensor attribute (1.0: the gradients are not
    finite), as torch's fused AdamW does, and then leaves every weight and momentum buffer as it
    was, without a host read."""

    skips_on_found_inf = True

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        skip = found_inf_mask(self)
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            lr, momentum = float(group["lr"]), group["momentum"]
            grads = [p.grad for p in params]
            bufs = []
            for p in params:
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                bufs.append(state["momentum_buffer"])
            if skip is None:
                torch._foreach_lerp_(bufs, grads, 1 - momentum)
            else:  # the new buffers beside the old, kept only where the step is not refused
                stepped = [b.lerp(g, 1 - momentum) for b, g in zip(bufs, grads, strict=True)]
                for b, new in zip(bufs, stepped, strict=True):
                    assign_unless_refused(b, new, skip)
            updates = (
                [g.lerp(b, momentum) for g, b in zip(grads, bufs, strict=True)]
                if group["nesterov"]
                else bufs
            )
            by_shape: dict[tuple[int, ...], list[int]] = {}
            for i, u in enumerate(updates):
                by_shape.setdefault(tuple(u.shape), []).append(i)
            for shape, members in by_shape.items():
                batch = torch.stack([updates[i] for i in members]).float()
                ortho = newton_schulz(
                    batch, group["ns_coefficients"], group["ns_steps"], group["eps"]
                )
                step_lr = lr * muon_lr_scale(group["adjust_lr_fn"], torch.Size(shape))
                for j, i in enumerate(members):
                    p = params[i]
                    if skip is None:
                        p.mul_(1 - lr * group["weight_decay"])
                        p.add_(ortho[j].to(p.dtype), alpha=-step_lr)
                        continue
                    moved = p.mul(1 - lr * group["weight_decay"])
                    assign_unless_refused(p, moved.add_(ortho[j].to(p.dtype), alpha=-step_lr), skip)
        return None
