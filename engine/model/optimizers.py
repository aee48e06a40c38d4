"""Optimizers: AdamW, Muon (+AdamW for the rest), Lion and Adafactor behind one interface.

Every parameter group carries `base_lr`, its LR at the schedule's peak. The trainer sets
`group["lr"] = group["base_lr"] * schedule_factor * user_multiplier` before each step, so the
schedule and the cockpit's LR control scale every group consistently.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from engine.config.run_config import OptimConfig
from engine.model.adafactor import Adafactor
from engine.model.lion import Lion
from engine.model.muon import BatchedMuon
from engine.model.refused_step import FusedAdamW


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


# where torch has AdamW's fused kernel: the fastest step there, and one that skips on the device
FUSED_ADAMW_DEVICES = ("cuda", "cpu", "mps")


def _adamw(groups: list[dict[str, Any]], cfg: OptimConfig, device_type: str) -> torch.optim.AdamW:
    kwargs = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    if device_type in FUSED_ADAMW_DEVICES:
        return FusedAdamW(groups, **kwargs)
    return torch.optim.AdamW(groups, **kwargs)  # foreach, where supported


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
        opt = Adafactor(
            groups(cfg.lr, decay, no_decay, cfg.weight_decay),
            lr=cfg.lr,
            betas=(cfg.beta1, cfg.beta2),
            eps=cfg.eps,
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
