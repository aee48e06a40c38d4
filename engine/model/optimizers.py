"""Optimizers: AdamW, Muon (+AdamW for the rest), Lion and Adafactor behind one interface.

Every parameter group carries `base_lr`, its LR at the schedule's peak. The trainer sets
`group["lr"] = group["base_lr"] * schedule_factor * user_multiplier` before each step, so the
schedule and the cockpit's LR control scale every group consistently.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from engine.config.run_config import OptimConfig


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al., 2023): sign of an interpolated momentum; one state tensor per param."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = exp_avg.mul(beta1).add_(p.grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)
        return None


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
    adjustment, so checkpoints move freely between the two."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
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
            torch._foreach_lerp_(bufs, grads, 1 - momentum)
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
                    p.mul_(1 - lr * group["weight_decay"])
                    p.add_(ortho[j].to(p.dtype), alpha=-step_lr)
        return None


class MultiOptimizer:
    """Several optimizers stepped together (Muon for matrices, AdamW for everything else)."""

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = optimizers

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [g for opt in self.optimizers for g in opt.param_groups]

    @property
    def state(self) -> dict[Any, Any]:
        return {p: s for opt in self.optimizers for p, s in opt.state.items()}

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizers": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for opt, s in zip(self.optimizers, state["optimizers"], strict=True):
            opt.load_state_dict(s)


def _split_decay(params: list[nn.Parameter]) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """Weight decay applies to matrices and embeddings (>= 2 dims), not to gains and biases."""
    return [p for p in params if p.dim() >= 2], [p for p in params if p.dim() < 2]


def _adamw(groups: list[dict[str, Any]], cfg: OptimConfig, device_type: str) -> torch.optim.AdamW:
    # fused is fastest on CUDA; foreach elsewhere (the default picks it where supported).
    extra = {"fused": True} if device_type == "cuda" else {}
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, **extra)


def build_optimizer(
    model: nn.Module, cfg: OptimConfig, device_type: str
) -> torch.optim.Optimizer | MultiOptimizer:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    decay, no_decay = _split_decay(params)

    def groups(
        lr: float, decay_params: list, no_decay_params: list, wd: float
    ) -> list[dict[str, Any]]:
        out = [
            {"params": decay_params, "weight_decay": wd, "base_lr": lr, "lr": lr},
            {"params": no_decay_params, "weight_decay": 0.0, "base_lr": lr, "lr": lr},
        ]
        return [g for g in out if g["params"]]

    if cfg.name == "adamw":
        opt: Any = _adamw(groups(cfg.lr, decay, no_decay, cfg.weight_decay), cfg, device_type)
    elif cfg.name == "lion":
        opt = Lion(
            groups(cfg.lr, decay, no_decay, cfg.weight_decay),
            lr=cfg.lr,
            betas=(cfg.beta1, cfg.beta2),
        )
    elif cfg.name == "adafactor":
        opt = torch.optim.Adafactor(
            groups(cfg.lr, decay, no_decay, cfg.weight_decay), lr=cfg.lr, eps=(None, 1e-3)
        )
    elif cfg.name == "muon":
        # Muon orthogonalises updates of the 2-D matrices inside the blocks; embeddings, the head
        # and the 1-D gains are not matrices of a linear map in the same sense and use AdamW.
        matrices = [p for n, p in named if p.dim() == 2 and n.startswith("blocks.")]
        ids = {id(p) for p in matrices}
        rest = [p for p in params if id(p) not in ids]
        rest_decay, rest_no_decay = _split_decay(rest)
        muon_class = BatchedMuon if cfg.muon_ns == "fp32" else torch.optim.Muon
        muon = muon_class(
            [
                {
                    "params": matrices,
                    "base_lr": cfg.muon_lr,
                    "lr": cfg.muon_lr,
                    "weight_decay": cfg.weight_decay,
                }
            ],
            lr=cfg.muon_lr,
            momentum=cfg.muon_momentum,
            nesterov=True,
            adjust_lr_fn="match_rms_adamw",
        )
        adam = _adamw(groups(cfg.lr, rest_decay, rest_no_decay, cfg.weight_decay), cfg, device_type)
        opt = MultiOptimizer([muon, adam])
    else:  # the config validates names; this guards programmatic use
        raise ValueError(f"unknown optimizer {cfg.name!r}")
    return opt


def set_lr_factor(optimizer: Any, factor: float) -> None:
    """Apply `factor` (schedule x user multiplier) to every group's peak LR."""
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"] * factor


def applied_lr(optimizer: Any) -> float:
    """The LR of the last group (AdamW's in a Muon run): what the cockpit shows as "the" LR."""
    groups = optimizer.param_groups
    return float(groups[-1]["lr"]) if groups else 0.0
