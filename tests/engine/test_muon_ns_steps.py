"""optim.muon_ns_steps: how many orthogonalisation steps Muon's update takes, in each of its
paths (torch's bfloat16 Muon, cockpit's batched Newton-Schulz, Polar Express)."""

from __future__ import annotations

import math

import pytest
import torch

from engine.config import ConfigError, load_preset
from engine.config.run_config import OptimConfig
from engine.optim.muon import POLAR_EXPRESS_COEFFICIENTS, newton_schulz, polar_express
from engine.optim.optimizers import build_optimizer

JORDAN = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's Newton-Schulz coefficients


def _muon_groups(cfg: OptimConfig) -> list[dict]:
    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 12, bias=False)])
    model.ln_f = torch.nn.LayerNorm(8)
    opt = build_optimizer(model, cfg, "cpu")
    return [g for g in opt.param_groups if "ns_steps" in g]


@pytest.mark.parametrize("muon_ns", ["bf16", "fp32", "polar"])
def test_every_muon_path_takes_the_steps_asked(muon_ns):
    (default,) = _muon_groups(OptimConfig(name="muon", muon_ns=muon_ns))
    (three,) = _muon_groups(OptimConfig(name="muon", muon_ns=muon_ns, muon_ns_steps=3))
    assert default["ns_steps"] == 5 and three["ns_steps"] == 3


def test_newton_schulz_of_one_step_is_the_quintic_once_by_hand():
    """A diagonal matrix's singular values s (scaled by the Frobenius norm) each go through
    a s + b s^3 + c s^5 once."""
    x = torch.diag(torch.tensor([0.6, 0.3], dtype=torch.float64))[None]
    norm = math.sqrt(0.6**2 + 0.3**2)
    a, b, c = JORDAN
    by_hand = [a * s + b * s**3 + c * s**5 for s in (0.6 / norm, 0.3 / norm)]
    out = newton_schulz(x, JORDAN, 1, 1e-12)[0]
    assert torch.allclose(out, torch.diag(torch.tensor(by_hand, dtype=torch.float64)), atol=1e-9)


def test_polar_express_with_fewer_steps_takes_the_first_ones_and_more_repeat_the_last():
    x = torch.diag(torch.tensor([0.5, 0.25], dtype=torch.float64))[None]

    def by_hand(coefficients):
        out = []
        for s in (0.5, 0.25):
            s = s / (math.sqrt(0.5**2 + 0.25**2) * 1.02 + 1e-6)
            for a, b, c in coefficients:
                s = a * s + b * s**3 + c * s**5
            out.append(s)
        return torch.diag(torch.tensor(out, dtype=torch.float64))

    tuned = list(POLAR_EXPRESS_COEFFICIENTS)
    assert torch.allclose(polar_express(x, steps=2)[0], by_hand(tuned[:2]), atol=1e-12)
    assert torch.allclose(polar_express(x, steps=7)[0], by_hand(tuned + tuned[-1:] * 2), atol=1e-12)
    assert torch.equal(polar_express(x), polar_express(x, steps=5))


def test_fewer_steps_leave_the_update_further_from_orthogonal():
    x = torch.randn(1, 64, 128, generator=torch.Generator().manual_seed(0))
    spread = {n: torch.linalg.svdvals(newton_schulz(x, JORDAN, n, 1e-7)[0]) for n in (2, 5)}
    assert spread[2].min() < spread[5].min()


@pytest.mark.parametrize("value", ["0", "11", "2.5"])
def test_a_step_count_out_of_range_is_refused_in_one_line(value):
    with pytest.raises(ConfigError, match="muon_ns_steps"):
        load_preset("tiny", [f"optim.muon_ns_steps={value}"])
