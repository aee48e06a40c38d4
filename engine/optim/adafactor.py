"""Cockpit's Adafactor (its LR the step size, as AdamW's) and what a resume from
torch.optim.Adafactor's state should be told."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from engine.config.run_config import OptimConfig
from engine.optim.refused_step import found_inf_mask


class Adafactor(torch.optim.Optimizer):
    """Adafactor (Shazeer & Stern, 2018) with an absolute LR: `lr` is the step size, as AdamW's, so a
    run switches between the two at the same LR (torch.optim.Adafactor's is relative to the weight's
    scale). A matrix's second moment is factored per row and column; the normalised gradient is
    clipped to an RMS of `clip_threshold`, then averaged with `beta1` (0: no first moment). It reads
    `found_inf` as torch's fused AdamW does, with no host read; state names are torch's, so its
    checkpoints load."""

    skips_on_found_inf = True

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        clip_threshold: float = 1.0,
    ) -> None:
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Adafactor betas must lie in [0, 1): {betas}")
        defaults = dict(
            lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, clip_threshold=clip_threshold
        )
        super().__init__(params, defaults)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            if "beta2_decay" in group:  # torch.optim.Adafactor's: its hyperparameters, not ours
                for key in ("beta2_decay", "d", "foreach", "maximize"):
                    group.pop(key, None)
                group.update(
                    {k: v for k, v in self.defaults.items() if k not in ("lr", "weight_decay")}
                )

    def _state_of(self, p: torch.Tensor, beta1: float) -> dict[str, torch.Tensor]:
        state = self.state[p]
        if "step" not in state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            if p.dim() >= 2:
                state["row_var"] = p.new_zeros((*p.shape[:-1], 1))
                state["col_var"] = p.new_zeros((*p.shape[:-2], 1, p.shape[-1]))
            else:
                state["variance"] = torch.zeros_like(p)
        elif state["step"].device != p.device:  # torch.optim.Adafactor keeps its steps on the CPU
            state["step"] = state["step"].to(p.device, torch.float32)
        if beta1 > 0 and "exp_avg" not in state:
            state["exp_avg"] = torch.zeros_like(p)
        return state

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        skip = found_inf_mask(self)
        # A refused step is a step of weight 0: gradients zeroed, moments averaged with weight
        # 0, no move and no count. Exact: adding 0 or lerping by 0 changes nothing.
        keep = None if skip is None else (~skip).float()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._step_group(group, params, skip, keep)
        return None

    def _step_group(
        self,
        group: dict[str, Any],
        params: list[torch.Tensor],
        skip: torch.Tensor | None,
        keep: torch.Tensor | None,
    ) -> None:
        beta1, beta2 = group["betas"]
        lr, decay = group["lr"], group["weight_decay"]
        states = [self._state_of(p, beta1) for p in params]
        if skip is None:
            grads = [p.grad for p in params]
        else:
            grads = [torch.where(skip, 0.0, p.grad) for p in params]
            keep = keep.to(params[0].dtype)
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1.0 if keep is None else keep)
        # the per-parameter scalars as one vector: a few operations, not a few per parameter
        counts = torch.stack(steps).clamp_(min=1.0)  # a refused first step divides by 1 - b
        corrections = (1 - beta2**counts).to(params[0].dtype).unbind()
        weight2 = 1 - beta2 if keep is None else keep * (1 - beta2)
        variances = []
        for p, grad, state, correction in zip(params, grads, states, corrections, strict=True):
            squared = grad * grad
            if p.dim() >= 2:
                row, col = state["row_var"], state["col_var"]
                row.lerp_(squared.mean(dim=-1, keepdim=True), weight2)
                col.lerp_(squared.mean(dim=-2, keepdim=True), weight2)
                total = row.mean(dim=-2, keepdim=True).clamp_(min=1e-30).mul_(correction)
                variances.append(row @ (col / total))  # v = row col / total, bias-corrected
            else:
                state["variance"].lerp_(squared, weight2)
                variances.append(state["variance"] / correction)
        torch._foreach_sqrt_(variances)
        torch._foreach_add_(variances, group["eps"])
        updates = torch._foreach_div(grads, variances)
        # clipped to an RMS of clip_threshold: divided by max(1, RMS / threshold), on the device
        norms = torch.stack(torch._foreach_norm(updates))
        norms.mul_(self._inverse_sizes(updates)).div_(group["clip_threshold"]).clamp_(min=1.0)
        torch._foreach_div_(updates, list(norms.unbind()))
        if beta1 > 0:
            exp_avgs = [s["exp_avg"] for s in states]
            if keep is None:
                torch._foreach_lerp_(exp_avgs, updates, 1 - beta1)
            else:
                change = torch._foreach_sub(updates, exp_avgs)
                torch._foreach_mul_(change, keep * (1 - beta1))
                torch._foreach_add_(exp_avgs, change)
            updates = exp_avgs
        if decay:
            torch._foreach_mul_(params, 1 - lr * decay if keep is None else 1 - lr * decay * keep)
        # the step: -lr times the update, the first moment over 1 - beta1^t (0 when refused)
        size = -lr if keep is None else -lr * keep
        if beta1 > 0:
            size = size / (1 - beta1**counts).to(params[0].dtype)
        elif keep is None:
            torch._foreach_add_(params, updates, alpha=-lr)
            return
        sizes = size.unbind() if size.dim() else [size] * len(params)
        torch._foreach_addcmul_(params, updates, list(sizes))

    def _inverse_sizes(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """1 / sqrt(numel) of each tensor, kept on their device (made once: no copy per step)."""
        key = (tuple(t.numel() for t in tensors), tensors[0].device, tensors[0].dtype)
        cache = self.__dict__.setdefault("_inverse_sizes_cache", {})
        if key not in cache:
            values = [1 / math.sqrt(t.numel()) for t in tensors]
            cache[key] = torch.tensor(values, dtype=key[2]).to(key[1])
        return cache[key]


def legacy_state_notes(state: dict[str, Any], cfg: OptimConfig) -> list[str]:
    """What a resume from `state` (a loaded checkpoint) should say about its optimizer state:
    torch.optim.Adafactor's state loads into ours, but the same LR now moves the weights by more
    (its step was lr times each weight's RMS, at least 1e-3)."""
    saved = state.get("optimizer") or {}
    groups = saved.get("param_groups", []) if isinstance(saved, dict) else []
    same = state.get("config", {}).get("optim", {}).get("name", "adamw") == cfg.name
    if not (same and cfg.name == "adafactor" and any("beta2_decay" in g for g in groups)):
        return []
    matrices = [t for t in state.get("model", {}).values() if torch.is_tensor(t) and t.dim() >= 2]
    scales = sorted(max(1e-3, t.float().square().mean().sqrt().item()) for t in matrices) or [1.0]
    scale = scales[len(scales) // 2]
    return [
        "optimizer: the checkpoint's Adafactor state is torch.optim.Adafactor's, whose LR was "
        f"relative to each weight's RMS; optim.lr={cfg.lr:g} is now the step size itself, as "
        f"AdamW's (about {1 / scale:.0f}x larger steps for matrices of the median RMS "
        f"{scale:.3g}); its second moments carry over, the first moment starts at zero "
        f"(--set optim.lr=... to choose another pace)"
    ]
