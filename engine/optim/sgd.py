"""SGD with (Nesterov) momentum and decoupled weight decay, refusing a step on the device as the
fused AdamW does.

One step, for a weight p with gradient g, the group's scheduled lr, momentum mu and decay wd:

    b = mu * b + g                     (b starts at zero, so the first step's b is g)
    u = g + mu * b  (Nesterov)   or   u = b
    p = p * (1 - lr * wd) - lr * u

torch's SGD takes the same momentum and Nesterov forms (dampening 0) but couples its weight
decay, adding wd * p to the gradient before the momentum; here the decay is decoupled, as
AdamW's, Lion's and Muon's in cockpit, so that optim.weight_decay means the same for each.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from engine.optim.refused_step import assign_unless_refused, found_inf_mask


class SGD(torch.optim.Optimizer):
    """SGD with momentum (`momentum` 0: none, no state), Nesterov's form when `nesterov`, and
    decoupled weight decay. A `found_inf` tensor attribute (1.0: the gradients are not finite)
    leaves every weight and momentum buffer as it was, without a host read."""

    skips_on_found_inf = True

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 0.01,
        momentum: float = 0.9,
        nesterov: bool = True,
        weight_decay: float = 0.0,
    ) -> None:
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        skip = found_inf_mask(self)
        for group in self.param_groups:
            lr, mu, wd = float(group["lr"]), float(group["momentum"]), float(group["weight_decay"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                update = g
                if mu > 0:
                    state = self.state[p]
                    if "momentum_buffer" not in state:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    buf = state["momentum_buffer"]
                    new_buf = buf.mul_(mu).add_(g) if skip is None else buf.mul(mu).add_(g)
                    update = g.add(new_buf, alpha=mu) if group["nesterov"] else new_buf
                    if skip is not None:
                        assign_unless_refused(buf, new_buf, skip)
                if skip is None:
                    if wd:
                        p.mul_(1 - lr * wd)
                    p.add_(update, alpha=-lr)
                    continue
                moved = p.mul(1 - lr * wd).add_(update, alpha=-lr)
                assign_unless_refused(p, moved, skip)
        return None
