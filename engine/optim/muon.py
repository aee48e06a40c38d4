"""Muon's update in float32 (or bfloat16), its orthogonalisation batched over same-shape
matrices, with the speedrun's variants: Polar Express instead of Newton-Schulz, NorMuon's
per-neuron normalisation and cautious weight decay."""

from __future__ import annotations

import math
from typing import Any

import torch

from engine.optim.refused_step import assign_unless_refused, found_inf_mask

# Polar Express (Amsel, Persson, Musco, Gower 2025, arXiv:2505.16932): one (a, b, c) per step,
# each the minimax-optimal odd quintic for the singular values left by the steps before. These
# are the modded-nanogpt record's, computed for 5 steps with safety factor 2e-2 and cushion 2.
POLAR_EXPRESS_COEFFICIENTS: tuple[tuple[float, float, float], ...] = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
# the coefficients assume singular values at most 1 after normalising, with this margin
POLAR_EXPRESS_SAFETY = 2e-2

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def gram_is_cheaper(rows: int, cols: int, steps: int) -> bool:
    """Whether iterating on the (m, m) Gram matrix costs fewer FLOPs than on the (m, n) matrix.

    Per step the direct iteration costs 4 m^2 n + 2 m^3; the Gram one pays 4 m^2 n once (A and
    the final product) and 8 m^3 a step but the last (6 m^3 fewer): cheaper when n > 1.5 m."""
    m, n = min(rows, cols), max(rows, cols)
    return steps > 1 and 2 * n > 3 * m


def quintic_steps(
    x: torch.Tensor, coefficients: list[tuple[float, float, float]], on_gram: bool | None = None
) -> torch.Tensor:
    """x <- a x + (b A + c A^2) x with A = x x^T, once per (a, b, c); x is wide (m <= n).
    `on_gram`: carried on the Gram matrix (True) or not; None: on it where that is cheaper
    (float32 only: in bfloat16 the products of the factors lose too much)."""
    if on_gram is None:
        on_gram = x.dtype == torch.float32 and gram_is_cheaper(
            x.size(-2), x.size(-1), len(coefficients)
        )
    if on_gram:
        return _quintic_steps_on_gram(x, coefficients)
    for a, b, c in coefficients:
        gram = x @ x.mT
        x = torch.baddbmm(x, torch.baddbmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x


def _quintic_steps_on_gram(
    x: torch.Tensor, coefficients: list[tuple[float, float, float]]
) -> torch.Tensor:
    """The same iteration, carried on A = x x^T (m, m) alone: each step's factor
    P = a I + b A + c A^2 is a polynomial in the first A, so the factors commute, the next
    Gram matrix is P A P = P^2 A, and x is multiplied once, by the product of the factors.
    For a wide x (n > 1.5 m) that is fewer FLOPs; in float32 it agrees to about 1e-6."""
    gram = x @ x.mT
    product: torch.Tensor | None = None
    for i, (a, b, c) in enumerate(coefficients):
        factor = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)
        factor.diagonal(dim1=-2, dim2=-1).add_(a)
        product = factor if product is None else factor @ product
        if i + 1 < len(coefficients):  # the last step's Gram matrix is not used
            gram = factor @ (factor @ gram)
    assert product is not None  # gram_is_cheaper wants at least 2 steps
    return product @ x


def newton_schulz(
    x: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float
) -> torch.Tensor:
    """Muon's quintic Newton-Schulz orthogonalisation of a batch of matrices (b, m, n), in the
    dtype given: the same iteration as torch.optim.Muon's, batched instead of one by one."""
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral norm <= 1
    x = quintic_steps(x, [coefficients] * steps)
    return x.mT if tall else x


def polar_express(x: torch.Tensor, eps: float = 1e-6, steps: int = 5) -> torch.Tensor:
    """The orthogonal polar factor U V^T of each matrix of a batch (b, m, n), approximately, by
    Polar Express's 5 steps: each singular value lands near 1 (within about 0.1 for the
    singular values a gradient has), where Newton-Schulz's fixed coefficients leave 0.7 to 1.2.
    Fewer `steps` take the first ones (each is tuned for what the steps before left); more
    repeat the last, as the record does."""
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) * (1 + POLAR_EXPRESS_SAFETY) + eps)
    tuned = list(POLAR_EXPRESS_COEFFICIENTS)
    x = quintic_steps(x, tuned[:steps] + tuned[-1:] * max(0, steps - len(tuned)))
    return x.mT if tall else x


def normuon_scale(
    ortho: torch.Tensor, second_moment: torch.Tensor, beta2: float, skip: torch.Tensor | None
) -> torch.Tensor:
    """NorMuon (arXiv:2510.05491): each neuron's (row's, or column's for a wide matrix) update
    divided by the root of its running mean square, then rescaled to the orthogonalised
    update's Frobenius norm, so Muon's step size is kept and only its spread across neurons
    changes. `second_moment` (b, m, 1) or (b, 1, n) is updated in place unless `skip`."""
    reduce = -1 if ortho.size(-2) >= ortho.size(-1) else -2
    mean_square = ortho.square().mean(dim=reduce, keepdim=True)
    assign_unless_refused(second_moment, second_moment.lerp(mean_square, 1 - beta2), skip)
    scaled = ortho * second_moment.clamp_min(1e-10).rsqrt()
    norm = ortho.norm(dim=(-2, -1), keepdim=True)
    return scaled * (norm / scaled.norm(dim=(-2, -1), keepdim=True).clamp_min(1e-10))


def second_moment_shape(shape: torch.Size | tuple[int, ...]) -> tuple[int, int]:
    """NorMuon's second moment of an (m, n) matrix: one per row (m >= n) or per column."""
    rows, cols = shape[-2], shape[-1]
    return (rows, 1) if rows >= cols else (1, cols)


def muon_lr_scale(adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """torch.optim.Muon's per-matrix LR adjustment (its rule, restated: it is private there)."""
    rows, cols = shape[:2]
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    if adjust_lr_fn in (None, "original"):
        return math.sqrt(max(1.0, rows / cols))
    return 1.0


def cautious_decay_(
    p: torch.Tensor, update: torch.Tensor, decay: float, strict: bool
) -> torch.Tensor:
    """p - decay * p where the update (the step is p - lr * update) has p's sign, p elsewhere:
    cautious weight decay pulls a weight toward zero only when the update does too. `strict`
    (AdamW's rule in the record) leaves a zero update undecayed; Muon's decays it."""
    agree = update * p > 0 if strict else update * p >= 0
    return p - p * agree * decay


class BatchedMuon(torch.optim.Muon):
    """torch.optim.Muon with its orthogonalisation in float32 (or bfloat16), batched over the matrices
    of one shape: on a CPU, bfloat16 Newton-Schulz matrix by matrix is a small model's slowest part.
    Same state, coefficients and LR adjustment as torch's, so checkpoints move between the two. Its
    groups may set `orthogonalizer`, `ns_dtype`, `variant` ("muon" or "normuon") and `cautious_wd`;
    it reads `found_inf` as torch's fused AdamW does, with no host read."""

    skips_on_found_inf = True

    def _orthogonalize(self, group: dict[str, Any], batch: torch.Tensor) -> torch.Tensor:
        batch = batch.to(_DTYPES[group.get("ns_dtype", "float32")])
        if group.get("orthogonalizer", "newton_schulz") == "polar_express":
            return polar_express(batch, steps=group.get("ns_steps", 5)).float()
        return newton_schulz(
            batch, group["ns_coefficients"], group["ns_steps"], group["eps"]
        ).float()

    def _normuon(
        self, group: dict[str, Any], params: list[torch.Tensor], ortho: torch.Tensor,
        skip: torch.Tensor | None,
    ) -> torch.Tensor:
        moments = []
        for p in params:
            state = self.state[p]
            if "second_moment" not in state:  # also a Muon state resumed as NorMuon
                shape = second_moment_shape(p.shape)
                state["second_moment"] = torch.zeros(shape, dtype=torch.float32, device=p.device)
            moments.append(state["second_moment"])
        stacked = torch.stack(moments)
        scaled = normuon_scale(ortho, stacked, group.get("normuon_beta2", 0.95), skip)
        for moment, new in zip(moments, stacked, strict=True):
            moment.copy_(new)
        return scaled

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
            decay = lr * group["weight_decay"]
            cautious = group.get("cautious_wd", False)
            for shape, members in by_shape.items():
                ortho = self._orthogonalize(group, torch.stack([updates[i] for i in members]))
                if group.get("variant", "muon") == "normuon":
                    ortho = self._normuon(group, [params[i] for i in members], ortho, skip)
                step_lr = lr * muon_lr_scale(group["adjust_lr_fn"], torch.Size(shape))
                for j, i in enumerate(members):
                    p, update = params[i], ortho[j].to(params[i].dtype)
                    if cautious:
                        moved = cautious_decay_(p, update, decay, strict=False)
                        assign_unless_refused(p, moved.add_(update, alpha=-step_lr), skip)
                    elif skip is None:
                        if decay:  # none by default: a multiply by 1 costs a pass over p
                            p.mul_(1 - decay)
                        p.add_(update, alpha=-step_lr)
                    else:
                        moved = p.mul(1 - decay)
                        assign_unless_refused(p, moved.add_(update, alpha=-step_lr), skip)
        return None
