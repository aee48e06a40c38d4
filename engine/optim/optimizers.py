"""Optimizers: AdamW, Muon (+AdamW for the rest), Lion, Adafactor and SGD behind one interface.

Parameters are grouped by role (`param_role`: embeddings, the blocks' matrices, the head, the
scalars), each group with its own peak LR kept as `base_lr`; the groups depend on the model only,
so the schedule and the cockpit's LR control scale every group alike.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from engine.config.run_config import OptimConfig
from engine.optim.adafactor import Adafactor
from engine.optim.lion import Lion
from engine.optim.muon import BatchedMuon
from engine.optim.refused_step import FusedAdamW, found_inf_mask
from engine.optim.sgd import SGD

# the groups' order; the flattened parameter order is the one checkpoints number them in
ROLES = ("embed", "matrix", "head", "scalar")
# the setting each role's peak LR comes from (0 there: optim.lr)
ROLE_LR_SETTINGS = {"embed": "embed_lr", "head": "head_lr", "scalar": "scalar_lr"}


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


def param_role(name: str, param: nn.Parameter, embedding_ids: set[int]) -> str:
    """'embed' (an nn.Embedding's table, the head too when tied to it), 'head' (lm_head),
    'scalar' (fewer than 2 dims: gains, biases, lambdas) or 'matrix' (every other)."""
    if param.dim() < 2:
        return "scalar"
    if id(param) in embedding_ids:
        return "embed"
    if name.startswith("lm_head."):
        return "head"
    return "matrix"


def _by_role(named: list[tuple[str, nn.Parameter]], model: nn.Module) -> dict[str, list]:
    embedding_ids = {
        id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()
    }
    roles: dict[str, list] = {role: [] for role in ROLES}
    for name, p in named:
        roles[param_role(name, p, embedding_ids)].append(p)
    return roles


def _groups(roles: dict[str, list], cfg: OptimConfig) -> list[dict[str, Any]]:
    out = []
    for role in ROLES:
        if not roles[role]:
            continue
        setting = ROLE_LR_SETTINGS.get(role, "lr")
        if not getattr(cfg, setting):
            setting = "lr"
        lr = getattr(cfg, setting)
        wd = 0.0 if role == "scalar" else cfg.weight_decay  # decay: >= 2 dims only
        out.append(
            {"params": roles[role], "weight_decay": wd, "base_lr": lr, "lr": lr, "role": role,
             "lr_setting": f"optim.{setting}"}
        )  # fmt: skip
    return out


def _legacy_order(opt: torch.optim.Optimizer, named: list[tuple[str, nn.Parameter]]) -> list:
    """The order a checkpoint from before the role groups numbered `opt`'s parameters in: its
    two groups, the decayed (>= 2 dims) then the rest, each in the model's order."""
    mine = {id(p) for g in opt.param_groups for p in g["params"]}
    params = [p for _, p in named if id(p) in mine]
    return [p for p in params if p.dim() >= 2] + [p for p in params if p.dim() < 2]


def _regroup_legacy(named: list[tuple[str, nn.Parameter]]) -> Any:
    """A load_state_dict pre-hook: a state saved with other groups than these (the two of a
    checkpoint from before the role groups) is renumbered into these, each moment kept with its
    parameter; the groups' settings are the config's anyway (a resume writes them after)."""

    def hook(opt: torch.optim.Optimizer, saved: dict[str, Any]) -> dict[str, Any] | None:
        groups = saved.get("param_groups", [])
        if [len(g["params"]) for g in groups] == [len(g["params"]) for g in opt.param_groups]:
            return None
        legacy = _legacy_order(opt, named)
        if sum(len(g["params"]) for g in groups) != len(legacy):
            return None  # not ours to fix: torch's load says what does not fit
        index = {id(p): i for i, p in enumerate(p for g in opt.param_groups for p in g["params"])}
        renumber = {
            old: index[id(legacy[pos])]
            for pos, old in enumerate(k for g in groups for k in g["params"])
        }
        group_of = {k: g for g in groups for k in g["params"]}
        old_of = {new: old for old, new in renumber.items()}
        new_groups, start = [], 0
        for g in opt.param_groups:
            ids = list(range(start, start + len(g["params"])))
            start += len(g["params"])
            source = group_of[old_of[ids[0]]]  # its settings: the group its first one was in
            settings = {k: v for k, v in {**g, **source}.items() if k != "params"}
            new_groups.append({**settings, "params": ids})
        state = {renumber[k]: v for k, v in saved.get("state", {}).items()}
        return {**saved, "state": state, "param_groups": new_groups}

    return hook


class _CautiousDecay:
    """AdamW's step with cautious weight decay: the decay lr * wd * p applies only where the
    update has the weight's sign (the record's rule: update * p > 0). The update's sign is
    its first moment's, so torch's AdamW takes the step without decay, and the decay follows,
    from the weights before it; a refused step (`found_inf`) decays nothing."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        skip = found_inf_mask(self)
        decayed = []
        for group in self.param_groups:
            if group["weight_decay"]:
                params = [p for p in group["params"] if p.grad is not None]
                decayed.append((group, group["weight_decay"], params, [p.clone() for p in params]))
                group["weight_decay"] = 0.0
        try:
            loss = super().step(closure)
        finally:
            for group, wd, _, _ in decayed:
                group["weight_decay"] = wd
        for group, wd, params, before in decayed:
            for p, old in zip(params, before, strict=True):
                agree = self.state[p]["exp_avg"] * old > 0
                if skip is not None:
                    agree &= ~skip
                p.sub_(old * agree, alpha=float(group["lr"]) * wd)
        return loss


class CautiousFusedAdamW(_CautiousDecay, FusedAdamW):
    """The fused AdamW with cautious weight decay (skips on the device like it)."""


class CautiousAdamW(_CautiousDecay, torch.optim.AdamW):
    """The foreach AdamW with cautious weight decay, where torch has no fused kernel."""


# where torch has AdamW's fused kernel: the fastest step there, and one that skips on the device
FUSED_ADAMW_DEVICES = ("cuda", "cpu", "mps")


def _adamw(groups: list[dict[str, Any]], cfg: OptimConfig, device_type: str) -> torch.optim.AdamW:
    kwargs = dict(lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    fused = device_type in FUSED_ADAMW_DEVICES
    if cfg.cautious_wd:
        return CautiousFusedAdamW(groups, **kwargs) if fused else CautiousAdamW(groups, **kwargs)
    if fused:
        return FusedAdamW(groups, **kwargs)
    return torch.optim.AdamW(groups, **kwargs)  # foreach, where supported


def _muon(matrices: list[nn.Parameter], cfg: OptimConfig) -> torch.optim.Optimizer:
    """torch's Muon for muon_ns=bf16 with no variant; cockpit's batched one otherwise."""
    group: dict[str, Any] = {
        "params": matrices,
        "base_lr": cfg.muon_lr,
        "lr": cfg.muon_lr,
        "weight_decay": cfg.weight_decay,
    }
    kwargs = dict(lr=cfg.muon_lr, momentum=cfg.muon_momentum, nesterov=True,
                  ns_steps=cfg.muon_ns_steps, adjust_lr_fn="match_rms_adamw")  # fmt: skip
    if cfg.muon_ns == "bf16" and cfg.muon_variant == "muon" and not cfg.cautious_wd:
        return torch.optim.Muon([group], **kwargs)
    # every setting written, so that a resume's settings replace a checkpoint's variant
    group.update(
        orthogonalizer="polar_express" if cfg.muon_ns.startswith("polar") else "newton_schulz",
        ns_dtype="bfloat16" if cfg.muon_ns in ("bf16", "polar_bf16") else "float32",
        variant=cfg.muon_variant,
        normuon_beta2=cfg.normuon_beta2,
        cautious_wd=cfg.cautious_wd,
    )
    return BatchedMuon([group], **kwargs)


def build_optimizer(
    model: nn.Module, cfg: OptimConfig, device_type: str
) -> torch.optim.Optimizer | MultiOptimizer:
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    if cfg.name == "muon":
        # Muon orthogonalises updates of the 2-D matrices inside the blocks; embeddings, the head
        # and the 1-D gains are not matrices of a linear map in the same sense and use AdamW.
        matrices = [p for n, p in named if p.dim() == 2 and n.startswith("blocks.")]
        ids = {id(p) for p in matrices}
        rest = [(n, p) for n, p in named if id(p) not in ids]
        adam = _adamw(_groups(_by_role(rest, model), cfg), cfg, device_type)
        adam.register_load_state_dict_pre_hook(_regroup_legacy(rest))
        return MultiOptimizer([_muon(matrices, cfg), adam])
    groups = _groups(_by_role(named, model), cfg)
    if cfg.name == "adamw":
        opt: Any = _adamw(groups, cfg, device_type)
    elif cfg.name == "lion":
        opt = Lion(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))
    elif cfg.name == "adafactor":
        opt = Adafactor(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    elif cfg.name == "sgd":
        # every group says its momentum, so that a resume's settings replace a checkpoint's
        for group in groups:
            group.update(momentum=cfg.sgd_momentum, nesterov=cfg.sgd_nesterov)
        opt = SGD(groups, lr=cfg.lr, momentum=cfg.sgd_momentum, nesterov=cfg.sgd_nesterov)
    else:  # the config validates names; this guards programmatic use
        raise ValueError(f"unknown optimizer {cfg.name!r}")
    opt.register_load_state_dict_pre_hook(_regroup_legacy(named))
    return opt


def set_lr_factor(optimizer: Any, factor: float) -> None:
    """Apply `factor` (schedule x user multiplier) to every group's peak LR."""
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"] * factor


def applied_lr(optimizer: Any) -> float:
    """What the cockpit shows as "the" LR: optim.lr's, times the factor applied (the last
    group's where no group follows optim.lr: AdamW's in a Muon run)."""
    groups = optimizer.param_groups
    if not groups:
        return 0.0
    plain = [g for g in groups if g.get("lr_setting") == "optim.lr"]
    return float((plain or groups)[-1]["lr"])
