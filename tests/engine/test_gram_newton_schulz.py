"""Muon's orthogonalisation carried on the Gram matrix for wide (or tall) float32 updates:
the same result as the direct iteration, chosen only where it costs fewer FLOPs."""

from __future__ import annotations

import math

import pytest
import torch

from engine.optim import muon
from engine.optim.muon import gram_is_cheaper, newton_schulz, polar_express

JORDAN = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's Newton-Schulz coefficients


def direct(x: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """The direct iteration, step by step as quintic_steps's docstring says."""
    tall = x.size(-2) > x.size(-1)
    x = x.mT if tall else x
    x = x / x.norm(dim=(-2, -1), keepdim=True)
    a, b, c = JORDAN
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.mT if tall else x


@pytest.mark.parametrize(
    ("rows", "cols", "steps", "cheaper"),
    [
        (128, 512, 5, True),  # MLP: 20*128^2*512 + 10*128^3 direct against 4*128^2*512 + 34*128^3
        (512, 128, 5, True),  # tall: its transpose is iterated
        (128, 384, 5, True),  # qkv
        (128, 128, 5, False),  # square: the Gram matrix is as big as the matrix
        (128, 192, 5, False),  # n = 1.5 m: the two cost the same, the direct one is kept
        (128, 193, 5, True),
        (128, 512, 1, False),  # one step: nothing to save
    ],
)
def test_the_gram_iteration_is_taken_where_it_costs_fewer_flops(rows, cols, steps, cheaper):
    assert gram_is_cheaper(rows, cols, steps) is cheaper
    m, n = min(rows, cols), max(rows, cols)
    direct_flops = steps * (4 * m * m * n + 2 * m**3)
    gram_flops = 4 * m * m * n + steps * 2 * m**3 + (steps - 1) * 6 * m**3
    assert (gram_flops < direct_flops) is cheaper


@pytest.mark.parametrize("shape", [(3, 16, 64), (3, 64, 16), (2, 24, 40)])
def test_the_gram_path_agrees_with_the_direct_iteration(shape):
    torch.manual_seed(0)
    x = torch.randn(shape)
    assert gram_is_cheaper(shape[1], shape[2], 5)
    assert torch.allclose(newton_schulz(x, JORDAN, 5, 1e-12), direct(x), atol=2e-5)
    # and in float64 the two are the same map, to rounding
    x64 = x.double()
    assert torch.allclose(newton_schulz(x64, JORDAN, 5, 1e-12), direct(x64), atol=1e-12)


def test_the_gram_path_is_what_runs_for_a_wide_float32_update(monkeypatch):
    calls = []
    real = muon._quintic_steps_on_gram
    monkeypatch.setattr(muon, "_quintic_steps_on_gram", lambda x, c: calls.append(x.shape) or real(x, c))
    newton_schulz(torch.randn(2, 8, 32), JORDAN, 5, 1e-7)
    polar_express(torch.randn(2, 32, 8))
    newton_schulz(torch.randn(2, 8, 8), JORDAN, 5, 1e-7)  # square: direct
    newton_schulz(torch.randn(2, 8, 32, dtype=torch.bfloat16), JORDAN, 5, 1e-7)  # bf16: direct
    assert calls == [torch.Size([2, 8, 32]), torch.Size([2, 8, 32])]


def test_singular_values_of_a_diagonal_wide_matrix_go_through_the_quintic_by_hand():
    """diag(0.6, 0.3) padded to (2, 6): the Gram path maps each singular value s (scaled by the
    Frobenius norm) through a s + b s^3 + c s^5, twice."""
    x = torch.zeros(1, 2, 6, dtype=torch.float32)
    x[0, 0, 0], x[0, 1, 1] = 0.6, 0.3
    a, b, c = JORDAN
    by_hand = []
    for s in (0.6, 0.3):
        s /= math.sqrt(0.6**2 + 0.3**2)
        for _ in range(2):
            s = a * s + b * s**3 + c * s**5
        by_hand.append(s)
    out = newton_schulz(x, JORDAN, 2, 1e-12)[0]
    assert torch.allclose(out[:, :2], torch.diag(torch.tensor(by_hand)), atol=1e-5)
    assert torch.count_nonzero(out[:, 2:]) == 0
