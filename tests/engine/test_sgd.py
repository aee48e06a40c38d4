"""SGD with (Nesterov) momentum: a hand-computed step at the LR the schedule applies (decoupled
weight decay on matrices, none on gains), torch's momentum forms, a refused step, a real run."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from engine.checkpoint.store import load_checkpoint
from engine.config import live_change
from engine.config.presets import load_preset
from engine.optim.optimizers import build_optimizer, set_lr_factor
from engine.optim.refused_step import skips_on_device, step_unless_refused
from engine.optim.schedule import lr_factor
from engine.optim.sgd import SGD
from engine.plan.planner import optimizer_state_bytes
from tests.run_copies import train_here
from tests.tiny import tiny_overrides


class TwoWeights(nn.Module):
    """One matrix (decayed) and one gain (not decayed), as build_optimizer groups them."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([[1.0, -2.0]]))
        self.s = nn.Parameter(torch.tensor([3.0]))


GRADS = (([[0.5, 1.0]], [2.0]), ([[-1.0, 0.5]], [1.0]))


def two_steps(nesterov: bool) -> TwoWeights:
    # peak 0.4 with a 3-step warmup: the schedule applies 0.1 at step 0 and 0.2 at step 1
    cfg = load_preset(
        "tiny",
        ["optim.name=sgd", "optim.lr=0.4", "optim.weight_decay=0.5", "optim.sgd_momentum=0.5",
         f"optim.sgd_nesterov={str(nesterov).lower()}", "schedule.kind=constant",
         "schedule.warmup_steps=3", "schedule.min_lr=0"],
    )  # fmt: skip
    model = TwoWeights()
    opt = build_optimizer(model, cfg.optim, "cpu")
    assert isinstance(opt, SGD)
    for step, (gw, gs) in enumerate(GRADS):
        set_lr_factor(opt, lr_factor(step, cfg))
        model.w.grad, model.s.grad = torch.tensor(gw), torch.tensor([gs[0]])
        opt.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.2, 0.2])
    return model


def test_nesterov_steps_match_the_hand_computed_ones():
    """Step 0 (lr 0.1): b = g = [.5, 1]; u = g + .5 b = [.75, 1.5];
    w = w (1 - .1 * .5) - .1 u = [.95 - .075, -1.9 - .15] = [.875, -2.05].
    Step 1 (lr 0.2): b = .5 b + g = [-.75, 1]; u = g + .5 b = [-1.375, 1];
    w = w (1 - .2 * .5) - .2 u = [.7875 + .275, -1.845 - .2] = [1.0625, -2.045].
    The gain takes no decay: 3 - .1 (2 + .5 * 2) = 2.7, then 2.7 - .2 (1 + .5 * 2) = 2.3."""
    model = two_steps(nesterov=True)
    assert model.w.detach().flatten().tolist() == pytest.approx([1.0625, -2.045])
    assert model.s.detach().tolist() == pytest.approx([2.3])


def test_heavy_ball_steps_match_the_hand_computed_ones():
    """Without Nesterov the step follows the buffer: w = [.95 - .05, -1.9 - .1] = [.9, -2.0],
    then [.81 + .15, -1.8 - .2] = [.96, -2.0]; the gain 3 - .2 = 2.8, then 2.8 - .4 = 2.4.
    torch's coupled decay (wd * w added to the gradient) would give w = [.85, -1.9] at step 0."""
    model = two_steps(nesterov=False)
    assert model.w.detach().flatten().tolist() == pytest.approx([0.96, -2.0])
    assert model.s.detach().tolist() == pytest.approx([2.4])


@pytest.mark.parametrize("nesterov", [True, False])
def test_without_decay_it_is_torchs_sgd(nesterov):
    torch.manual_seed(0)
    mine, theirs = (nn.Parameter(torch.randn(5, 3)) for _ in range(2))
    theirs.data.copy_(mine.data)
    a = SGD([mine], lr=0.05, momentum=0.9, nesterov=nesterov, weight_decay=0.0)
    b = torch.optim.SGD([theirs], lr=0.05, momentum=0.9, nesterov=nesterov)
    for _ in range(4):
        grad = torch.randn(5, 3)
        mine.grad, theirs.grad = grad.clone(), grad.clone()
        a.step()
        b.step()
    torch.testing.assert_close(mine.detach(), theirs.detach())


def test_plain_sgd_keeps_no_state_and_a_refused_step_changes_nothing():
    p = nn.Parameter(torch.ones(4))
    plain = SGD([p], lr=0.1, momentum=0.0)
    p.grad = torch.full((4,), 2.0)
    plain.step()
    assert p.detach().tolist() == pytest.approx([0.8] * 4) and not plain.state
    opt = SGD([p], lr=0.1, momentum=0.9, weight_decay=0.1)
    assert skips_on_device(opt)
    opt.step()  # a buffer to keep
    before = [p.detach().clone(), opt.state[p]["momentum_buffer"].clone()]
    p.grad = torch.full((4,), float("nan"))
    step_unless_refused(opt, torch.ones(()))
    assert torch.equal(p.detach(), before[0])
    assert torch.equal(opt.state[p]["momentum_buffer"], before[1])


def test_the_planner_counts_one_buffer_or_none():
    shapes = [("blocks.0.w", (4, 8)), ("ln.weight", (8,))]
    assert optimizer_state_bytes(shapes, "sgd", first_moment=True) == 4 * 40
    assert optimizer_state_bytes(shapes, "sgd", first_moment=False) == 0


def test_a_tiny_run_trains_with_sgd_and_checkpoints_its_buffers(tmp_path, isolated_env):
    sets = tiny_overrides(
        "optim.name=sgd", "optim.lr=0.3", "train.max_steps=8", "schedule.warmup_steps=0",
        quiet=True,
    )  # fmt: skip
    run = train_here(tmp_path / "run", sets, isolated_env)
    steps = [
        json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()
        if line.startswith('{"kind":"step"')
    ]  # fmt: skip
    losses = [s["loss"] for s in steps]
    assert len(losses) == 8 and losses[-1] < losses[0], losses
    state = load_checkpoint(next(run.glob("ckpt-*.pt")))["optimizer"]
    assert all("momentum_buffer" in s for s in state["state"].values())
    assert {g["nesterov"] for g in state["param_groups"]} == {True}


def test_a_live_set_of_a_moment_key_on_an_sgd_run_is_refused_as_changing_nothing():
    cfg = load_preset("tiny", ["optim.name=sgd", "optim.lr=0.3"])
    refused = live_change(cfg, {"optim.beta1": 0.8}, step=5)
    assert refused == (
        "set refused: optim.beta1 changes nothing on this run: SGD keeps no moments but its "
        "momentum buffer (optim.sgd_momentum, set on resume)"
    )
    taken = live_change(cfg, {"optim.weight_decay": 0.0}, step=5)
    assert not isinstance(taken, str) and "optim.weight_decay" in taken.changes
