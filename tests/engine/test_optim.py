"""Optimizers: Muon's orthogonalised update, exact state round trips, one LR factor for all groups."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from engine.config.presets import load_preset
from engine.config.run_config import ConfigError, OptimConfig
from engine.model.gpt import GPT
from engine.optim.muon import BatchedMuon
from engine.optim.optimizers import MultiOptimizer, build_optimizer, set_lr_factor
from engine.optim.refused_step import skips_on_device, step_unless_refused

NAMES = ("adamw", "muon", "lion", "adafactor", "sgd")


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


@pytest.mark.parametrize("muon_class", [torch.optim.Muon, BatchedMuon], ids=["torch", "fp32"])
@pytest.mark.parametrize("adjust", ["original", "match_rms_adamw"])
def test_muon_update_is_orthogonalised_with_the_expected_scale(adjust, muon_class):
    """One step from zero momentum: the update is -lr * scale * NS(grad), NS(grad) ~ U S' V^T
    with S' in roughly [0.5, 1.5] (torch's quintic iteration does not converge to exactly 1)."""
    rows, cols, lr = 96, 32, 0.01
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.zeros(rows, cols))
    w.grad = torch.randn(rows, cols)
    opt = muon_class([w], lr=lr, weight_decay=0.0, adjust_lr_fn=adjust)
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


def test_fp32_muon_is_torchs_iteration_without_the_rounding():
    """BatchedMuon's step is torch.optim.Muon's algorithm (Nesterov momentum, the quintic
    Newton-Schulz with torch's coefficients, decoupled weight decay, the LR rule) computed
    exactly: it matches a float64 rendering of it; torch's own runs the iteration in bfloat16,
    which only roughly agrees (it amplifies rounding along small singular directions)."""
    torch.manual_seed(0)
    lr, wd, momentum = 0.02, 0.1, 0.95
    shapes = [(96, 32), (96, 32), (32, 128)]  # two of one shape: batched together
    weights = [torch.randn(s) * 0.02 for s in shapes]
    grads = [torch.randn(s) for s in shapes]
    params = [torch.nn.Parameter(w.clone()) for w in weights]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    opt = BatchedMuon(params, lr=lr, weight_decay=wd, momentum=momentum)
    opt.step()
    a, b, c = 3.4445, -4.7750, 2.0315  # torch.optim.Muon's defaults
    for w, g, p in zip(weights, grads, params, strict=True):
        update = g.double().lerp(g.double() * (1 - momentum), momentum)  # Nesterov, first step
        x = update.T if update.size(0) > update.size(1) else update
        x = x / x.norm()
        for _ in range(5):
            gram = x @ x.T
            x = a * x + (b * gram + c * gram @ gram) @ x
        x = x.T if update.size(0) > update.size(1) else x
        scale = math.sqrt(max(1, w.size(0) / w.size(1)))  # torch's "original" rule
        expected = w.double() * (1 - lr * wd) - lr * scale * x
        torch.testing.assert_close(p.detach().double(), expected, rtol=0, atol=1e-5)


def test_fp32_muon_trains_like_torchs_and_shares_its_state():
    runs = {}
    start = dict(tiny_model().named_parameters())
    for ns in ("bf16", "fp32"):
        model = tiny_model()
        opt = build_optimizer(model, OptimConfig(name="muon", muon_lr=0.02, muon_ns=ns), "cpu")
        train_steps(model, opt, range(4))
        runs[ns] = (model, opt, loss_of(model, 99).item())
    assert isinstance(runs["fp32"][1].optimizers[0], BatchedMuon)
    for (name, a), b in zip(
        runs["bf16"][0].named_parameters(), runs["fp32"][0].parameters(), strict=True
    ):
        if name.startswith("blocks.") and a.dim() == 2:
            moved_a, moved_b = (a - start[name]).flatten(), (b - start[name]).flatten()
            assert torch.nn.functional.cosine_similarity(moved_a, moved_b, dim=0) > 0.98
    assert abs(runs["bf16"][2] - runs["fp32"][2]) < 0.01  # the same loss, to rounding
    runs["bf16"][1].optimizers[0].load_state_dict(runs["fp32"][1].optimizers[0].state_dict())


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
    path.write_text('extends = "speedrun-cpu"\ndescription = "x"\n[optim]\nname = "rmsprop"\n')
    with pytest.raises(ConfigError) as err:
        load_preset(str(path))
    assert "optim.name" in str(err.value) and "rmsprop" in str(err.value)
    with pytest.raises(ConfigError, match=r"optim\.name"):
        load_preset("speedrun-cpu", ["optim.name=shampoo"])
    with pytest.raises(ConfigError, match="rotary"):
        load_preset("speedrun-cpu", ["model.rotary=true"])


def test_a_foreach_adamw_state_resumes_fused_and_still_skips_on_the_device():
    """A checkpoint written before AdamW was fused on the CPU (groups saying `fused: None`, step
    counts on the host) resumes into the fused one: the same next steps, and a refused step
    (`found_inf`) still leaves weights and state untouched."""
    cfg = OptimConfig(name="adamw", lr=3e-3)
    model = tiny_model()
    groups = build_optimizer(model, cfg, "cpu").param_groups
    old = torch.optim.AdamW([{k: v for k, v in g.items() if k != "fused"} for g in groups])
    train_steps(model, old, [1, 2])
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(old.state_dict())
    assert not saved_opt["param_groups"][0]["fused"]
    train_steps(model, old, [3])

    resumed = tiny_model(seed=99)
    resumed.load_state_dict(saved_model)
    opt = build_optimizer(resumed, cfg, "cpu")
    opt.load_state_dict(saved_opt)
    assert skips_on_device(opt) and all(g["fused"] for g in opt.param_groups)
    train_steps(resumed, opt, [3])
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)  # the fused kernel rounds a little differently
    before = [t.clone() for t in [*resumed.parameters(), *(s["exp_avg"] for s in opt.state.values())]]
    loss_of(resumed, 4).backward()
    step_unless_refused(opt, torch.ones(()))
    after = [*resumed.parameters(), *(s["exp_avg"] for s in opt.state.values())]
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert {float(s["step"]) for s in opt.state.values()} == {3.0}
