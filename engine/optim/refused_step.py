"""A refused optimizer step, decided on the device: no host read in the step. An optimizer whose
gradients are not finite gets a `found_inf` tensor attribute (1.0: refuse), as torch's fused
AdamW reads it; cockpit's optimizers (`skips_on_found_inf = True`) then leave every weight,
moment and step count as it was. Those that cannot cost one host read, for themselves only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def found_inf_mask(optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
    """The `found_inf` attribute set for this step (by `step_unless_refused`, or GradScaler for
    the fused AdamW) as a boolean tensor on the device: True refuses the step; None when unset."""
    found_inf = getattr(optimizer, "found_inf", None)
    return None if found_inf is None else found_inf.bool()


def assign_unless_refused(
    target: torch.Tensor, value: torch.Tensor, skip: torch.Tensor | None
) -> None:
    """target = value, or left as it is where `skip` (a refused step) is true."""
    target.copy_(value if skip is None else torch.where(skip, target, value))


class FusedAdamW(torch.optim.AdamW):
    """torch's AdamW with its fused kernel, which reads a `found_inf` tensor attribute and then
    leaves the weights, moments and step counts as they were, without a host read.

    It stays fused after loading a state saved by the foreach AdamW (a checkpoint written on a
    CPU before: its groups say `fused: None`, which torch's load_state_dict would restore)."""

    def __init__(self, params: Iterable[Any], **kwargs: Any) -> None:
        super().__init__(params, fused=True, **kwargs)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group["fused"], group["foreach"] = True, None
            for p in group["params"]:
                state = self.state.get(p)
                if state and "step" in state:  # the fused kernel counts on the device, in fp32
                    state["step"] = torch.as_tensor(
                        state["step"], dtype=torch.float32, device=p.device
                    )



def skips_on_device(optimizer: Any) -> bool:
    """Whether `optimizer.step()` honours a `found_inf` attribute on the device (a refused step
    leaves weights and state as they were, without a host read): the fused Adam(W), and ours
    that say so (`skips_on_found_inf`). torch.optim.Muon and the foreach AdamW do not."""
    if hasattr(optimizer, "optimizers"):  # several stepped together
        return all(skips_on_device(opt) for opt in optimizer.optimizers)
    if isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        return all(group.get("fused") for group in optimizer.param_groups)
    return bool(getattr(optimizer, "skips_on_found_inf", False))


def step_unless_refused(optimizer: Any, refused: torch.Tensor) -> None:
    """One optimizer step, refused where `refused` (a 0-d float32 tensor on the device) is 1.0:
    then every weight, moment and step count stays as it was. The optimizers that skip on the
    device are told through `found_inf`, as GradScaler tells the fused AdamW; the others (torch's
    Muon, the foreach AdamW) cost one host read of `refused`, for them only."""
    for opt in getattr(optimizer, "optimizers", [optimizer]):  # a MultiOptimizer's, or itself
        if skips_on_device(opt):
            opt.found_inf = refused
            try:
                opt.step()
            finally:
                del opt.found_inf
        elif not refused.item():  # a host sync: this optimizer cannot skip on the device
            opt.step()
