"""Optimizers: Muon's orthogonalised update, exact state round trips, one LR factor for all groups."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from engine.config import ConfigError, OptimConfig
from engine.model import GPT
from engine.optim import MultiOptimizer, build_optimizer, set_lr_factor
from engine.presets import load_preset

NAMES = ("adamw", "muon", "lion", "adafactor")


def tiny_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    cfg = load_preset("tiny", ["model.n_layer=2", "model.n_embd=32", "model.n_head=2"]).model
    return GPT(cfg, vocab_size=17)


def loss_of(model: GPT, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(17, (4, 16), generator=g)
    y = torch.randint(17, (4, 16), generator=g)
    return model(x, y)[1]


def train_steps(model: GPT, opt, seeds) -> None:
    for s in seeds:
        loss_of(model, s).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


@pytest.mark.parametrize("adjust", ["original", "match_rms_adamw"])
def test_muon_update_is_orthogonalised_with_the_expected_scale(adjust):
    """One step from zero momentum: the update is -lr * scale * NS(grad), NS(grad) ~ U S' V^T
    with S' in roughly [0.5, 1.5] (torch's quintic iteration does not converge to exactly 1)."""
    rows, cols, lr = 96, 32, 0.01
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.zeros(rows, cols))
    w.grad = torch.randn(rows, cols)
    opt = torch.optim.Muon([w], lr=lr, weight_decay=0.0, adjust_lr_fn=adjust)
    opt.step()
    update = -w.detach() / lr
    # torch.optim._muon._adjust_lr: "original" scales by sqrt(max(1, A/B)), Moonshot's
    # "match_rms_adamw" by 0.2 * sqrt(max(A, B)).
    scale = math.sqrt(max(1, rows / cols)) if adjust == "original" else 0.2 * math.sqrt(rows)
    s = torch.linalg.svdvals(update) / scale
    assert s.numel() == cols
    assert 0.5 <= s.min() and s.max() <= 1.5, s
    # and the direction follows the gradient's: positive alignment with U V^T of the gradient
    u, _, vh = torch.linalg.svd(w.grad, full_matrices=False)
    assert (update * (u @ vh)).sum() > 0.5 * scale * cols


def test_engine_muon_covers_block_matrices_and_adamw_the_rest():
    model = tiny_model()
    opt = build_optimizer(model, OptimConfig(name="muon", lr=3e-3, muon_lr=0.02), "cpu")
    assert isinstance(opt, MultiOptimizer)
    muon, adam = opt.optimizers
    assert isinstance(muon, torch.optim.Muon) and isinstance(adam, torch.optim.AdamW)
    muon_ids = {id(p) for g in muon.param_groups for p in g["params"]}
    for name, p in model.named_parameters():
        expected = p.dim() == 2 and name.startswith("blocks.")
        assert (id(p) in muon_ids) == expected, name
    assert {g["base_lr"] for g in muon.param_groups} == {0.02}
    assert {g["base_lr"] for g in adam.param_groups} == {3e-3}


@pytest.mark.parametrize("name", NAMES)
def test_optimizer_state_round_trips_exactly(name):
    """Save model + optimizer after two steps, train on; a fresh pair loaded from the save
    takes identical next steps (the checkpoint resume promise, for every optimizer)."""
    cfg = OptimConfig(name=name, lr=3e-3, muon_lr=0.02)
    model = tiny_model()
    opt = build_optimizer(model, cfg, "cpu")
    set_lr_factor(opt, 0.7)
    train_steps(model, opt, [1, 2])
    saved_model = copy.deepcopy(model.state_dict())
    saved_opt = copy.deepcopy(opt.state_dict())
    assert len(opt.state) > 0
    train_steps(model, opt, [3, 4])

    model2 = tiny_model(seed=99)  # different init: everything must come from the save
    model2.load_state_dict(saved_model)
    opt2 = build_optimizer(model2, cfg, "cpu")
    opt2.load_state_dict(saved_opt)
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]
    train_steps(model2, opt2, [3, 4])
    for (n, a), b in zip(model.state_dict().items(), model2.state_dict().values(), strict=True):
        assert torch.equal(a, b), n


@pytest.mark.parametrize("name", NAMES)
def test_lr_factor_scales_every_group_from_its_own_peak(name):
    model = tiny_model()
    opt = build_optimizer(model, OptimConfig(name=name, lr=2e-3, muon_lr=0.05), "cpu")
    assert len(opt.param_groups) >= 2
    for factor in (1.0, 0.25, 1e-3):
        set_lr_factor(opt, factor)
        for g in opt.param_groups:
            assert g["lr"] == pytest.approx(g["base_lr"] * factor)
    peaks = sorted({g["base_lr"] for g in opt.param_groups})
    assert peaks == ([2e-3, 0.05] if name == "muon" else [2e-3])


def test_unknown_optimizer_is_rejected_naming_the_key(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('extends = "speedrun-cpu"\ndescription = "x"\n[optim]\nname = "sgd"\n')
    with pytest.raises(ConfigError) as err:
        load_preset(str(path))
    assert "optim.name" in str(err.value) and "sgd" in str(err.value)
    with pytest.raises(ConfigError, match=r"optim\.name"):
        load_preset("speedrun-cpu", ["optim.name=shampoo"])
    with pytest.raises(ConfigError, match="rotary"):
        load_preset("speedrun-cpu", ["model.rotary=true"])
