"""Adafactor with an absolute LR: one step computed by hand, a loss like AdamW's at the same LR,
state bytes as the planner counts them, no host reads in the step, a refused step that changes
nothing, and torch.optim.Adafactor's checkpoints loading."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from engine.checkpoint.resume import restore_optimizer
from engine.config.presets import load_preset
from engine.config.run_config import ModelConfig, OptimConfig
from engine.model.gpt import GPT
from engine.optim.adafactor import Adafactor
from engine.optim.optimizers import build_optimizer
from engine.plan import memory
from engine.plan.planner import optimizer_state_bytes, param_shapes, plan_memory
from engine.train.trainer import Trainer


def hand_case() -> tuple[torch.nn.Parameter, torch.nn.Parameter, Adafactor]:
    """A 2x3 matrix with weight decay and a vector without, one optimizer, clip at RMS 0.5."""
    w = torch.nn.Parameter(torch.tensor([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], dtype=torch.float64))
    b = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64))
    groups = [{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}]
    opt = Adafactor(groups, lr=0.1, betas=(0.9, 0.95), eps=1e-8, clip_threshold=0.5)
    w.grad = torch.tensor([[3.0, 0.0, 0.0], [0.0, 0.0, 4.0]], dtype=torch.float64)
    b.grad = torch.tensor([0.5, -0.1, 0.0], dtype=torch.float64)
    return w, b, opt


def test_one_step_by_hand_on_a_matrix_and_a_vector():
    w, b, opt = hand_case()
    opt.step()
    # Matrix. g^2 = [[9,0,0],[0,0,16]]: row means [3, 16/3], column means [4.5, 0, 8], mean 25/6.
    # Step 1, bias-corrected (1 - 0.95): v = row x col / mean, so v[0,0] = 3 * 4.5 * 6/25 = 3.24
    # and v[1,2] = 16/3 * 8 * 6/25 = 10.24; the zero column gives v = 0 and g = 0, so u = 0.
    # u = g / sqrt(v): u[0,0] = 3/1.8 = 5/3, u[1,2] = 4/3.2 = 5/4, RMS(u) = 25/sqrt(864) > 0.5,
    # clipped to RMS 0.5: u * sqrt(864)/50, i.e. u[0,0] = sqrt(864)/30, u[1,2] = sqrt(864)/40.
    # The first moment, bias-corrected, is that u; w = w * (1 - 0.1 * 0.1) - 0.1 * u.
    r = math.sqrt(864)
    expected_w = [[0.495 - 0.1 * r / 30, -0.99, 1.98], [0.99, 0.0, -0.495 - 0.1 * r / 40]]
    torch.testing.assert_close(w.detach(), torch.tensor(expected_w, dtype=torch.float64))
    assert expected_w[0][0] == pytest.approx(0.3970204, abs=1e-7)
    state = opt.state[w]
    torch.testing.assert_close(state["row_var"], torch.tensor([[0.15], [0.8 / 3]], dtype=torch.float64))
    torch.testing.assert_close(state["col_var"], torch.tensor([[0.225, 0.0, 0.4]], dtype=torch.float64))
    assert state["row_var"].shape == (2, 1) and state["col_var"].shape == (1, 3)  # torch's shapes
    assert state["step"].item() == 1.0
    # Vector, no decay. v = g^2 exactly, so u = sign(g) = [1, -1, 0], RMS sqrt(2/3), clipped to
    # 0.5: u * 0.5 / sqrt(2/3) = [0.6123724, -0.6123724, 0]; b = b - 0.1 * u.
    clipped = 0.5 / math.sqrt(2 / 3)
    expected_b = torch.tensor([1 - 0.1 * clipped, -2 + 0.1 * clipped, 0.5], dtype=torch.float64)
    torch.testing.assert_close(b.detach(), expected_b)
    torch.testing.assert_close(
        opt.state[b]["variance"], torch.tensor([0.0125, 0.0005, 0.0], dtype=torch.float64)
    )
    # Step 2, same gradient: both moments' bias corrections make v = g^2 and the averaged u the
    # same clipped sign again, so the vector moves by exactly as much as in step 1 (AdamW's rule).
    b.grad = torch.tensor([0.5, -0.1, 0.0], dtype=torch.float64)
    w.grad = torch.tensor([[3.0, 0.0, 0.0], [0.0, 0.0, 4.0]], dtype=torch.float64)
    opt.step()
    expected_b = torch.tensor([1 - 0.2 * clipped, -2 + 0.2 * clipped, 0.5], dtype=torch.float64)
    torch.testing.assert_close(b.detach(), expected_b)


def test_the_lr_is_the_step_size_whatever_the_weights_scale():
    """Weights of RMS 0.02 and of RMS 1 move by the same lr per element on a sign-like first
    step (torch.optim.Adafactor moves the small ones 50x less: its LR is relative to them)."""
    moved = []
    for scale in (0.02, 1.0):
        p = torch.nn.Parameter(torch.full((4, 8), scale))
        p.grad = torch.ones(4, 8)
        Adafactor([p], lr=1e-3, weight_decay=0.0).step()
        moved.append((scale - p.detach()).abs().mean().item())
    assert moved == pytest.approx([1e-3, 1e-3], rel=1e-4)  # float32 rounding of 1 - 1e-3


SMALL_RUN = ["eval.interval=100", "checkpoint.interval=0", "sample.interval=0"]


def final_val(optimizer: str, run_dir: Path) -> float:
    events: list = []
    cfg = load_preset("tiny", [*SMALL_RUN, f"optim.name={optimizer}"])
    trainer = Trainer(cfg, run_dir=run_dir, sinks=[events.append], telemetry=False)
    assert trainer.run() == "finished"
    return [e for e in events if e.kind == "eval"][-1].val_loss


def test_a_run_reaches_adamws_loss_at_the_same_lr(tmp_path):
    """The tiny preset (100 steps, lr 3e-3) with each optimizer: Adafactor's validation loss is
    within 0.1 of AdamW's (measured: 3.09 and 3.15; torch.optim.Adafactor at this LR: 4.61)."""
    adamw = final_val("adamw", tmp_path / "adamw")
    adafactor = final_val("adafactor", tmp_path / "adafactor")
    assert adafactor < adamw + 0.1, (adafactor, adamw)


def tiny_stepped(beta1: float) -> tuple[GPT, Adafactor]:
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16), 50)
    opt = build_optimizer(model, OptimConfig(name="adafactor", beta1=beta1), "cpu")
    x = torch.randint(50, (2, 16))
    model(x, x)[1].backward()
    opt.step()
    return model, opt


@pytest.mark.parametrize("beta1", [0.9, 0.0])
def test_the_planner_counts_the_state_it_keeps(beta1):
    model, opt = tiny_stepped(beta1)
    n = sum(p.numel() for p in model.parameters())
    assert ("exp_avg" in opt.state[next(model.parameters())]) == (beta1 > 0)
    cfg = load_preset(
        "default",
        ["model.n_layer=2", "model.n_head=2", "model.n_embd=32", "model.block_size=16"]
        + ["optim.name=adafactor", f"optim.beta1={beta1}"],
    )
    planned = optimizer_state_bytes(param_shapes(cfg, 50), "adafactor", first_moment=beta1 > 0)
    assert memory.optimizer_bytes(opt) == planned == plan_memory(cfg, 50, "cpu", None).optimizer
    # and it is less than AdamW's 8 bytes per weight, as the planner's fixes promise
    assert planned < 8 * n


class HostReads:
    """Counts the Python-level ways a tensor's value reaches the host."""

    NAMES = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "__array__")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for name in self.NAMES:
            original = getattr(torch.Tensor, name)

            def counted(*args, original=original, **kwargs):
                self.count += 1
                return original(*args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counted)


def test_the_step_reads_nothing_back_to_the_host(monkeypatch):
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16), 50)
    grads_of = []
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        grads_of.append([torch.randn(p.shape, generator=g) for p in model.parameters()])

    def reads_in_steps(opt) -> int:
        counter = HostReads(monkeypatch)
        for grads in grads_of:
            for p, grad in zip(model.parameters(), grads, strict=True):
                p.grad = grad.clone()
            opt.step()
        monkeypatch.undo()
        return counter.count

    opt = build_optimizer(model, OptimConfig(name="adafactor"), "cpu")
    assert reads_in_steps(opt) == 0
    opt.found_inf = torch.zeros(())
    assert reads_in_steps(opt) == 0
    # the counter sees the reads that are there: torch's Adafactor makes three per parameter
    n_params = len(list(model.parameters()))
    assert reads_in_steps(torch.optim.Adafactor(model.parameters())) >= 2 * 3 * n_params


def test_a_refused_step_changes_no_weight_moment_or_step_count():
    w, b, opt = hand_case()
    opt.step()
    before_params = [w.detach().clone(), b.detach().clone()]
    before_state = {id(p): {k: v.clone() for k, v in opt.state[p].items()} for p in (w, b)}
    w.grad = torch.full_like(w, float("inf"))
    b.grad = torch.full_like(b, float("nan"))
    opt.found_inf = torch.ones(())
    opt.step()
    for p, before in zip((w, b), before_params, strict=True):
        assert torch.equal(p.detach(), before)
        for key, value in opt.state[p].items():
            assert torch.equal(value, before_state[id(p)][key]), key
    # the next good step is the same as if the refused one had never come
    reference_w, reference_b, reference = hand_case()
    reference.step()
    for opt_, (pw, pb) in ((opt, (w, b)), (reference, (reference_w, reference_b))):
        opt_.found_inf = torch.zeros(())
        pw.grad = torch.ones_like(pw)
        pb.grad = torch.ones_like(pb)
        opt_.step()
    assert torch.equal(w.detach(), reference_w.detach())
    assert torch.equal(b.detach(), reference_b.detach())
    assert opt.state[w]["step"].item() == 2.0


def test_a_checkpoint_of_torchs_adafactor_resumes_with_its_statistics():
    """A run from before this Adafactor saved torch.optim.Adafactor's state: the same names and
    shapes for the second moments, the step on the CPU, no first moment, other group keys."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8), 20)
    cfg = OptimConfig(name="adafactor", lr=3e-3)
    groups = [  # as build_optimizer made them for torch's class
        {k: g[k] for k in ("params", "weight_decay", "base_lr", "lr")}
        for g in build_optimizer(model, cfg, "cpu").param_groups
    ]
    old = torch.optim.Adafactor(groups, lr=cfg.lr, eps=(None, 1e-3))
    x = torch.randint(20, (2, 8))
    for _ in range(2):
        model(x, x)[1].backward()
        old.step()
        old.zero_grad()
    saved = {"config": {"optim": {"name": "adafactor"}}, "optimizer": old.state_dict(), "_path": "x"}

    direct = build_optimizer(model, cfg, "cpu")
    direct.load_state_dict(old.state_dict())  # without resume's settings: ours, not torch's
    assert all(g["eps"] == 1e-8 and "beta2_decay" not in g for g in direct.param_groups)
    opt = restore_optimizer(build_optimizer(model, cfg, "cpu"), model, saved, cfg, "cpu")
    assert isinstance(opt, Adafactor)
    assert all(g["eps"] == cfg.eps and g["betas"] == (0.9, 0.95) for g in opt.param_groups)
    first = next(model.parameters())
    kept = opt.state[first]["row_var"].clone()
    torch.testing.assert_close(kept, old.state[first]["row_var"])
    model(x, x)[1].backward()
    opt.step()
    state = opt.state[first]
    assert state["step"].item() == 3.0 and state["exp_avg"].abs().sum() > 0
    assert not torch.equal(state["row_var"], kept)  # the loaded statistics go on
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_resuming_a_run_of_torchs_adafactor_says_the_step_size_changed(tmp_path, monkeypatch):
    small = ["model.n_layer=1", "model.n_embd=16", "train.batch_size=4", "eval.interval=0"]
    small += ["sample.interval=0", "optim.name=adafactor"]
    from engine.optim import optimizers

    with monkeypatch.context() as patch:  # the run as it was trained before this Adafactor
        patch.setattr(
            optimizers,
            "Adafactor",
            lambda groups, lr, **_: torch.optim.Adafactor(groups, lr=lr, eps=(None, 1e-3)),
        )
        first = Trainer(
            load_preset("tiny", [*small, "train.max_steps=4", "checkpoint.interval=4"]),
            run_dir=tmp_path,
            telemetry=False,
        )
        assert first.run() == "finished"
        assert type(first.built.parts.optimizer) is torch.optim.Adafactor
    events: list = []
    resumed = Trainer(
        load_preset("default"),
        resume=tmp_path,
        resume_overrides=["train.max_steps=6"],
        sinks=[events.append],
        telemetry=False,
    )
    assert resumed.run() == "finished"
    assert isinstance(resumed.built.parts.optimizer, Adafactor)
    (started,) = [e for e in events if e.kind == "run_started"]
    (note,) = [n for n in started.notes if "torch.optim.Adafactor" in n]
    assert "optim.lr=0.003 is now the step size itself" in note and "x larger steps" in note
    assert [e.step for e in events if e.kind == "step"] == [5, 6]


@pytest.mark.parametrize(
    "now, beta1, offered",
    [("adamw", 0.9, True), ("lion", 0.9, False), ("lion", 0.0, True)],
    ids=["adamw", "lion", "lion-beta1-0"],
)
def test_the_planner_offers_adafactor_where_it_keeps_less(now, beta1, offered):
    """With a first moment Adafactor keeps less than AdamW's two moments but more than Lion's
    one; without one (beta1 = 0) less than either."""
    from engine.plan.fixes import suggest_fixes

    cfg = load_preset(
        "default",
        ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", f"optim.name={now}"]
        + [f"optim.beta1={beta1}"],
    )
    fixes = suggest_fixes(cfg, 50, "cpu", 2**30)
    assert any("optim.name=adafactor" in f.overrides for f in fixes) == offered
