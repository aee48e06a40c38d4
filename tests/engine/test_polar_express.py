"""Muon's variants in cockpit's BatchedMuon: Polar Express, NorMuon and cautious weight decay,
each against a step worked out by hand; with none asked, the step is the one before them."""

from __future__ import annotations

import math

import pytest
import torch

from engine.config.run_config import OptimConfig
from engine.optim.muon import (
    POLAR_EXPRESS_COEFFICIENTS,
    BatchedMuon,
    newton_schulz,
    polar_express,
)
from engine.optim.optimizers import build_optimizer
from engine.optim.refused_step import skips_on_device, step_unless_refused

JORDAN = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's Newton-Schulz coefficients


def _polar_factor(x: torch.Tensor) -> torch.Tensor:
    u, _, vh = torch.linalg.svd(x.double(), full_matrices=False)
    return u @ vh


@pytest.mark.parametrize("shape", [(64, 128), (128, 64)])
def test_polar_express_lands_near_the_polar_factor_closer_than_newton_schulz(shape):
    """Its 5 steps put every singular value of a random matrix within 0.16 of 1 (Newton-Schulz's
    leave them as low as 0.68), about half as far from U V^T."""
    x = torch.randn(1, *shape, generator=torch.Generator().manual_seed(0))
    polar = _polar_factor(x[0])
    pe = polar_express(x)[0].double()
    ns = newton_schulz(x, JORDAN, 5, 1e-7)[0].double()
    values = torch.linalg.svdvals(pe)
    assert values.min() > 0.84 and values.max() < 1.16
    assert torch.linalg.svdvals(ns).min() < 0.7
    pe_off, ns_off = ((y - polar).norm() / polar.norm() for y in (pe, ns))
    assert pe_off < 0.12 and pe_off < 0.6 * ns_off


def test_polar_express_applies_each_steps_polynomial_to_the_singular_values():
    """On a diagonal matrix each singular value s, scaled by the Frobenius norm (with the 2%
    margin), goes through a s + b s^3 + c s^5 once per step, with that step's (a, b, c)."""
    x = torch.diag(torch.tensor([0.5, 0.25], dtype=torch.float64))[None]
    by_hand = []
    for s in (0.5, 0.25):
        s = s / (math.sqrt(0.5**2 + 0.25**2) * 1.02 + 1e-6)
        for a, b, c in POLAR_EXPRESS_COEFFICIENTS:
            s = a * s + b * s**3 + c * s**5
        by_hand.append(s)
    out = polar_express(x)[0]
    assert torch.allclose(out, torch.diag(torch.tensor(by_hand, dtype=torch.float64)), atol=1e-12)
    assert abs(by_hand[0] - 1) < 0.15 and abs(by_hand[1] - 1) < 0.15


def _muon(w: torch.Tensor, lr: float, wd: float, **settings) -> BatchedMuon:
    group = {"params": [w], "lr": lr, "base_lr": lr, "weight_decay": wd, **settings}
    return BatchedMuon([group], lr=lr, momentum=0.9, nesterov=True, adjust_lr_fn="original")


def _first_update(g: torch.Tensor, momentum: float = 0.9) -> torch.Tensor:
    """Nesterov momentum's first update from a zero buffer: g.lerp((1 - m) g, m)."""
    return g.lerp((1 - momentum) * g, momentum)


def test_normuon_divides_each_row_by_its_rms_and_keeps_muons_norm():
    """First step, tall matrix: the buffer holds (1 - beta2) times each row's mean square, so the
    rows come out with one RMS, and the whole update has the orthogonalised one's norm."""
    torch.manual_seed(0)
    w0, g = torch.randn(6, 3), torch.randn(6, 3)
    w = w0.clone().requires_grad_()
    w.grad = g.clone()
    opt = _muon(w, lr=0.1, wd=0.0, variant="normuon", normuon_beta2=0.8)
    opt.step()
    ortho = newton_schulz(_first_update(g)[None], JORDAN, 5, 1e-7)[0]
    mean_square = ortho.square().mean(dim=1, keepdim=True)
    rows = ortho / mean_square.sqrt()  # each row's RMS is 1, so its norm is sqrt(6 * 3)
    update = rows * ortho.norm() / math.sqrt(6 * 3)
    scale = math.sqrt(max(1.0, 6 / 3))  # the "original" LR adjustment
    assert torch.allclose(w.detach(), w0 - 0.1 * scale * update, atol=1e-6)
    assert torch.allclose(opt.state[w]["second_moment"], 0.2 * mean_square, atol=1e-7)
    assert opt.state[w]["second_moment"].shape == (6, 1)


def test_normuon_on_a_wide_matrix_keeps_one_second_moment_per_column():
    w = torch.randn(3, 8, requires_grad=True)
    w.grad = torch.randn(3, 8)
    opt = _muon(w, lr=0.1, wd=0.0, variant="normuon")
    opt.step()
    assert opt.state[w]["second_moment"].shape == (1, 8)


def test_cautious_decay_in_muon_decays_only_where_update_and_weight_agree():
    """p - lr wd p [u p >= 0] - lr' u, u the orthogonalised update: half the weights agree."""
    torch.manual_seed(1)
    w0, g = torch.randn(4, 4), torch.randn(4, 4)
    w = w0.clone().requires_grad_()
    w.grad = g.clone()
    _muon(w, lr=0.1, wd=0.5, cautious_wd=True).step()
    u = newton_schulz(_first_update(g)[None], JORDAN, 5, 1e-7)[0]
    agree = (u * w0 >= 0).float()
    assert 0 < agree.sum() < 16  # the case tells the rule from plain decay
    assert torch.allclose(w.detach(), w0 - 0.1 * 0.5 * w0 * agree - 0.1 * u, atol=1e-6)


def _legacy_batched_muon_step(w: torch.Tensor, g: torch.Tensor, buf: torch.Tensor, lr, wd, mom):
    """The fp32 step as it was before the variants, restated."""
    buf.lerp_(g, 1 - mom)
    ortho = newton_schulz(g.lerp(buf, mom)[None].float(), JORDAN, 5, 1e-7)[0]
    w.mul_(1 - lr * wd)
    w.add_(ortho, alpha=-lr * 0.2 * math.sqrt(max(w.shape)))


def test_with_no_variant_asked_the_step_is_bit_for_bit_the_one_before():
    torch.manual_seed(2)
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 12, bias=False)])
    model.ln_f = torch.nn.LayerNorm(8)  # AdamW's share (no gradient here: it does not move)
    w_ref = model.blocks[0].weight.detach().clone()
    buf = torch.zeros_like(w_ref)
    opt = build_optimizer(model, OptimConfig(name="muon", muon_ns="fp32", weight_decay=0.1), "cpu")
    for _ in range(3):
        g = torch.randn(12, 8)
        model.blocks[0].weight.grad = g.clone()
        opt.step()
        _legacy_batched_muon_step(w_ref, g, buf, 0.02, 0.1, 0.95)
    assert torch.equal(model.blocks[0].weight.detach(), w_ref)


@pytest.mark.parametrize(
    "settings",
    [{"muon_ns": "polar"}, {"muon_variant": "normuon"}, {"cautious_wd": True},
     {"muon_ns": "polar", "muon_variant": "normuon", "cautious_wd": True}],
)  # fmt: skip
def test_each_variant_refuses_a_step_on_the_device_leaving_weights_and_state(settings):
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 12, bias=False)])
    model.ln_f = torch.nn.LayerNorm(8)  # AdamW's share (no gradient here: it does not move)
    opt = build_optimizer(model, OptimConfig(name="muon", **settings), "cpu")
    muon = opt.optimizers[0]
    assert isinstance(muon, BatchedMuon) and skips_on_device(opt)
    w = model.blocks[0].weight
    w.grad = torch.randn_like(w)
    step_unless_refused(opt, torch.tensor(0.0))
    before = w.detach().clone()
    state = {k: v.clone() for k, v in muon.state[w].items()}
    w.grad = torch.randn_like(w)
    step_unless_refused(opt, torch.tensor(1.0))
    assert torch.equal(w.detach(), before)
    assert all(torch.equal(muon.state[w][k], v) for k, v in state.items())
    step_unless_refused(opt, torch.tensor(0.0))
    assert not torch.equal(w.detach(), before)
