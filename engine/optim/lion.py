"""Lion (Chen et al., 2023), refusing a step on the device as the fused AdamW does."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from engine.optim.refused_step import assign_unless_refused, found_inf_mask


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al., 2023): sign of an interpolated momentum; one state tensor per param.

    A `found_inf` tensor attribute (1.0: the gradients are not finite), as torch's fused AdamW
    reads it, leaves every weight and moment as it was, without a host read."""

    skips_on_found_inf = True

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
        skip = found_inf_mask(self)
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                update = exp_avg.mul(beta1).add_(p.grad, alpha=1 - beta1).sign_()
                if skip is None:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                    p.add_(update, alpha=-group["lr"])
                    exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)
                    continue
                moved = p.mul(1 - group["lr"] * group["weight_decay"])
                assign_unless_refused(p, moved.add_(update, alpha=-group["lr"]), skip)
                assign_unless_refused(exp_avg, exp_avg.mul(beta2).add_(p.grad, alpha=1 - beta2), skip)
        return None
