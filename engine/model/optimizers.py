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
                _assign(p, moved.add_(update, alpha=-group["lr"]), skip)
                _assign(exp_avg, exp_avg.mul(beta2).add_(p.grad, alpha=1 - beta2), skip)
        return None


class Adafactor(torch.optim.Optimizer):
    """Adafactor (Shazeer & Stern, 2018) with an absolute LR: `lr` is the step size, as AdamW's,
    so a run switches between the two at the same LR.

    The second moment of a matrix is factored (an average of g^2 per row and per column, their
    outer product over their total estimating it), of a vector kept whole; both are exponential
    averages with `beta2`, bias-corrected as AdamW's. The normalised gradient g / (sqrt(v) + eps)
    is clipped to an RMS of at most `clip_threshold`, then averaged with `beta1` into a first
    moment (bias-corrected; beta1 = 0 keeps none, the paper's memory-saving form). Weight decay
    is decoupled, lr * weight_decay per step. There is no relative step and no scaling by the
    parameter's RMS (torch.optim.Adafactor's `lr` is relative to the weight's scale: with weights
    of RMS 0.02 its 3e-4 moves them about 50x less than AdamW's).

    The step reads nothing back to the host: the step count is a tensor beside the parameter,
    and the clipping divides by a tensor. A `found_inf` tensor attribute (1.0: the gradients are
    not finite), as torch's fused AdamW reads it, turns the step into a no-op for every weight,
    moment and step count, still without a host read. State names (`step`, `row_var`,
    `col_var`, `variance`) and shapes are torch.optim.Adafactor's, so its checkpoints load; the
    first moment (`exp_avg`) of such a state starts at zero."""

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


def _assign(target: torch.Tensor, value: torch.Tensor, skip: torch.Tensor | None) -> None:
    """target = value, or left as it is where `skip` (a refused step) is true."""
    target.copy_(value if skip is None else torch.where(skip, target, value))


def found_inf_mask(optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
    """The `found_inf` attribute set for this step (by `step_unless_refused`, or GradScaler for
    the fused AdamW) as a boolean tensor on the device: True refuses the step; None when unset."""
    found_inf = getattr(optimizer, "found_inf", None)
    return None if found_inf is None else found_inf.bool()


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
                    _assign(b, new, skip)
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
                    _assign(p, moved.add_(ortho[j].to(p.dtype), alpha=-step_lr), skip)
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


def set_lr_factor(optimizer: Any, factor: float) -> None:
    """Apply `factor` (schedule x user multiplier) to every group's peak LR."""
    for group in optimizer.param_groups:
        group["lr"] = group["base_lr"] * factor


def applied_lr(optimizer: Any) -> float:
    """The LR of the last group (AdamW's in a Muon run): what the cockpit shows as "the" LR."""
    groups = optimizer.param_groups
    return float(groups[-1]["lr"]) if groups else 0.0


def skips_on_device(optimizer: Any) -> bool:
    """Whether `optimizer.step()` honours a `found_inf` attribute on the device (a refused step
    leaves weights and state as they were, without a host read): the fused Adam(W), and ours
    that say so (`skips_on_found_inf`). torch.optim.Muon and the foreach AdamW do not."""
    if isinstance(optimizer, MultiOptimizer):
        return all(skips_on_device(opt) for opt in optimizer.optimizers)
    if isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        return all(group.get("fused") for group in optimizer.param_groups)
    return bool(getattr(optimizer, "skips_on_found_inf", False))


def step_unless_refused(optimizer: Any, refused: torch.Tensor) -> None:
    """One optimizer step, refused where `refused` (a 0-d float32 tensor on the device) is 1.0:
    then every weight, moment and step count stays as it was. The optimizers that skip on the
    device are told through `found_inf`, as GradScaler tells the fused AdamW; the others (torch's
    Muon, the foreach AdamW) cost one host read of `refused`, for them only."""
    for opt in optimizer.optimizers if isinstance(optimizer, MultiOptimizer) else [optimizer]:
        if skips_on_device(opt):
            opt.found_inf = refused
            try:
                opt.step()
            finally:
                del opt.found_inf
        elif not refused.item():  # a host sync: this optimizer cannot skip on the device
            opt.step()
