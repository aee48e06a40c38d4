"""AdamW's cautious weight decay and the per-role peak LRs (embeddings, matrices, head,
scalars): a hand-computed step each, the settings off giving the step of before, and the
checkpoints of before the role groups still resuming."""

from __future__ import annotations

import copy

import pytest
import torch

from engine.checkpoint.resume import optimizer_settings, put_settings
from engine.config.live import LIVE_SETTINGS
from engine.config.presets import load_preset
from engine.config.run_config import OptimConfig
from engine.model.gpt import GPT
from engine.optim.optimizers import CautiousFusedAdamW, build_optimizer, set_lr_factor
from engine.optim.refused_step import FusedAdamW, skips_on_device, step_unless_refused


def untied_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    cfg = load_preset(
        "tiny", ["model.n_layer=1", "model.n_embd=16", "model.n_head=2", "model.block_size=8",
                 "model.tie_embeddings=false", "model.bias=true"]
    ).model  # fmt: skip
    return GPT(cfg, vocab_size=11)


def train(model: GPT, opt, steps: int = 3) -> None:
    g = torch.Generator().manual_seed(5)
    for _ in range(steps):
        x = torch.randint(11, (2, 8), generator=g)
        model(x, x)[1].backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def test_cautious_adamw_decays_only_where_the_update_has_the_weights_sign():
    """First step from zero moments: the update is g / (|g| + eps), so the weight becomes
    p - lr wd p [g p > 0] - lr g / (|g| + eps)."""
    torch.manual_seed(0)
    p0, g = torch.randn(5, 4), torch.randn(5, 4)
    p = torch.nn.Parameter(p0.clone())
    p.grad = g.clone()
    opt = CautiousFusedAdamW([{"params": [p], "weight_decay": 0.5}], lr=0.1, eps=1e-8)
    opt.step()
    agree = (g * p0 > 0).float()
    assert 0 < agree.sum() < 20
    expected = p0 - 0.1 * 0.5 * p0 * agree - 0.1 * g / (g.abs() + 1e-8)
    assert torch.allclose(p.detach(), expected, atol=1e-6)
    assert opt.param_groups[0]["weight_decay"] == 0.5  # the group's setting is left as it was


def test_cautious_adamw_is_fused_and_a_refused_step_leaves_everything():
    model = untied_model()
    opt = build_optimizer(model, OptimConfig(cautious_wd=True, weight_decay=0.3), "cpu")
    assert isinstance(opt, CautiousFusedAdamW) and skips_on_device(opt)
    train(model, opt, 1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x = torch.randint(11, (2, 8))
    model(x, x)[1].backward()
    step_unless_refused(opt, torch.tensor(1.0))
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


@pytest.mark.parametrize("name", ["adamw", "muon", "lion", "adafactor"])
def test_with_no_group_lr_set_training_is_bit_for_bit_the_two_groups_of_before(name):
    """The groups before were two (>= 2 dims decayed, the rest not) with one LR; the role
    groups with every LR at optim.lr train to the same bits."""
    cfg = OptimConfig(name=name, lr=3e-3, weight_decay=0.1, muon_ns="fp32")
    a, b = untied_model(), untied_model()
    new = build_optimizer(a, cfg, "cpu")
    old = build_optimizer(b, cfg, "cpu")
    adam = old.optimizers[1] if name == "muon" else old
    params = [p for g in adam.param_groups for p in g["params"]]
    legacy = [{**adam.param_groups[0], "params": [p for p in params if p.dim() >= 2]},
              {**adam.param_groups[-1], "params": [p for p in params if p.dim() < 2]}]  # fmt: skip
    legacy[0]["weight_decay"], legacy[1]["weight_decay"] = 0.1, 0.0
    adam.param_groups = [{**g, "role": None} for g in legacy]
    adam.state.clear()
    train(a, new)
    train(b, old)
    for (n, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), n


def test_each_role_gets_the_peak_lr_asked_and_the_schedule_scales_them_alike():
    model = untied_model()
    cfg = OptimConfig(lr=1e-3, embed_lr=5e-3, head_lr=2e-3, scalar_lr=4e-3, weight_decay=0.1)
    opt = build_optimizer(model, cfg, "cpu")
    by_role = {g["role"]: g for g in opt.param_groups}
    assert list(by_role) == ["embed", "matrix", "head", "scalar"]
    assert {r: g["base_lr"] for r, g in by_role.items()} == {
        "embed": 5e-3, "matrix": 1e-3, "head": 2e-3, "scalar": 4e-3}  # fmt: skip
    assert [id(p) for p in by_role["head"]["params"]] == [id(model.lm_head.weight)]
    assert by_role["scalar"]["weight_decay"] == 0.0 and by_role["embed"]["weight_decay"] == 0.1
    set_lr_factor(opt, 0.25)
    assert {r: g["lr"] for r, g in by_role.items()} == pytest.approx(
        {"embed": 1.25e-3, "matrix": 2.5e-4, "head": 5e-4, "scalar": 1e-3})  # fmt: skip


def test_a_muon_run_keeps_muons_lr_for_the_blocks_and_the_roles_for_the_rest():
    model = untied_model()
    cfg = OptimConfig(name="muon", lr=1e-3, muon_lr=0.03, embed_lr=6e-3, scalar_lr=2e-3)
    muon, adam = build_optimizer(model, cfg, "cpu").optimizers
    assert muon.param_groups[0]["base_lr"] == 0.03
    assert {g["role"]: g["base_lr"] for g in adam.param_groups} == {
        "embed": 6e-3, "head": 1e-3, "scalar": 2e-3}  # fmt: skip


def test_a_live_change_of_a_group_lr_reaches_its_group_and_keeps_the_moments():
    """As the live settings write it: the groups a fresh optimizer of the new config has."""
    assert {"optim.embed_lr", "optim.head_lr", "optim.scalar_lr"} <= LIVE_SETTINGS.keys()
    model = untied_model()
    opt = build_optimizer(model, OptimConfig(lr=1e-3), "cpu")
    train(model, opt, 1)
    moments = {id(p): s["exp_avg"].clone() for p, s in opt.state.items()}
    fresh = build_optimizer(model, OptimConfig(lr=1e-3, head_lr=7e-3), "cpu")
    put_settings(opt, optimizer_settings(fresh))
    assert {g["role"]: g["base_lr"] for g in opt.param_groups}["head"] == 7e-3
    assert all(torch.equal(s["exp_avg"], moments[id(p)]) for p, s in opt.state.items())


def test_a_checkpoint_with_the_two_groups_of_before_resumes_into_the_role_groups():
    """Each moment goes with its parameter, and training goes on as the old layout would."""
    cfg = OptimConfig(lr=3e-3, weight_decay=0.1)
    a, b = untied_model(), untied_model()
    params = list(b.parameters())
    named = list(b.named_parameters())
    old = FusedAdamW(
        [{"params": [p for _, p in named if p.dim() >= 2], "weight_decay": 0.1},
         {"params": [p for _, p in named if p.dim() < 2], "weight_decay": 0.0}], lr=3e-3
    )  # fmt: skip
    train(b, old, 2)
    a.load_state_dict(b.state_dict())
    new = build_optimizer(a, cfg, "cpu")
    assert len(new.param_groups) == 4
    new.load_state_dict(copy.deepcopy(old.state_dict()))  # as from disk: not shared
    for group in new.param_groups:
        group["lr"] = 3e-3
    train(a, new, 2)
    train(b, old, 2)
    for p, q in zip(a.parameters(), params, strict=True):
        assert torch.allclose(p, q, atol=1e-7)
