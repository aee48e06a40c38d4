"""One gradient-accumulation step on a tiny model, alone: no Trainer."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from engine.config.presets import load_preset
from engine.data.batches import BatchSampler
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.train.device import autocast_context
from engine.train.step import StepParts, train_step

VOCAB = 11


def parts(forward=None) -> StepParts:
    cfg = load_preset("tiny", ["model.n_layer=1", "model.n_embd=16", "model.block_size=8"])
    torch.manual_seed(0)
    model = GPT(cfg.model, VOCAB)
    device = torch.device("cpu")
    tokens = np.arange(500, dtype=np.int64) % VOCAB
    return StepParts(
        cfg=cfg,
        model=model,
        forward=forward or model,
        scaler=torch.amp.GradScaler("cpu", enabled=False),
        autocast=autocast_context(device, torch.float32),
        batches=BatchSampler(tokens, cfg.model.block_size, 4, device, seed=1),
        device=device,
        dtype=torch.float32,
        micro_steps=cfg.train.grad_accum,
        grad_sync=lambda last: contextlib.nullcontext(),
    )


def test_a_step_updates_the_weights_with_the_optimizer_it_is_given() -> None:
    p = parts()
    kept = build_optimizer(p.model, p.cfg.optim, "cpu")
    # a restore replaces the trainer's optimizer: the step must use the one passed now
    replaced = build_optimizer(p.model, p.cfg.optim, "cpu")
    before = [w.detach().clone() for w in p.model.parameters()]
    outcome = train_step(p, replaced, step=7, lr_schedule_factor=0.5, report_memory=True)
    assert outcome.pending.step == 8 and outcome.pending.held_back.item() == 0.0
    assert outcome.pending.lr == replaced.param_groups[0]["lr"] == 0.5 * p.cfg.optim.lr
    assert outcome.memory is not None and outcome.memory.step == 7
    assert replaced.state and not kept.state
    assert any(not torch.equal(a, b) for a, b in zip(before, p.model.parameters(), strict=True))


def nan_at(p: StepParts, calls: set[int]):
    """A forward whose loss is NaN at the chosen calls (1 = the first)."""
    count = [0]

    def forward(x, y=None):
        count[0] += 1
        logits, loss = p.model(x, y)
        return logits, loss * float("nan") if count[0] in calls else loss

    return forward


def snapshot(model: torch.nn.Module, optimizer) -> list[torch.Tensor]:
    """Every weight and every optimizer state tensor (moments, step counts), copied."""
    state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return [t.detach().clone() for t in [*model.parameters(), *state]]


# muon: torch's Muon (bf16, which reads the flag on the host) and ours (fp32, on the device)
OPTIMIZERS = [("adamw", "bf16"), ("lion", "bf16"), ("muon", "bf16"), ("muon", "fp32"), ("adafactor", "bf16"),
              ("sgd", "bf16")]  # fmt: skip


@pytest.mark.parametrize(("name", "muon_ns"), OPTIMIZERS)
def test_a_non_finite_gradient_is_refused_on_the_device(name: str, muon_ns: str) -> None:
    """The update, the moments and the step count stay bitwise as they were, the refusal known
    only when the flag is read back; and the steps after it are held back with it."""
    p = parts()
    p.cfg.optim.name, p.cfg.optim.muon_ns = name, muon_ns
    optimizer = build_optimizer(p.model, p.cfg.optim, "cpu")
    train_step(p, optimizer, step=0, lr_schedule_factor=1.0, report_memory=False)  # warm state
    before = snapshot(p.model, optimizer)
    p.forward = nan_at(p, {1})
    refused = train_step(p, optimizer, step=1, lr_schedule_factor=1.0, report_memory=True)
    assert refused.pending.step == 2 and refused.pending.held_back.item() == 1.0
    assert all(w.grad is None for w in p.model.parameters())
    held = train_step(p, optimizer, 2, 1.0, False, held_back=refused.pending.held_back)
    assert held.pending.held_back.item() == 1.0  # a finite gradient, held back for the refusal
    after = snapshot(p.model, optimizer)
    assert len(after) == len(before) > 0
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    applied = train_step(p, optimizer, step=1, lr_schedule_factor=1.0, report_memory=False)
    assert applied.pending.held_back.item() == 0.0  # read back: no flag carried, applied again
    assert any(not torch.equal(a, b) for a, b in zip(after, p.model.parameters(), strict=False))


@pytest.mark.parametrize(("name", "muon_ns"), OPTIMIZERS)
def test_a_step_let_through_is_the_step_without_the_check(name: str, muon_ns: str) -> None:
    """A finite step with the flag given (0.0) moves the weights as without it: bitwise, but for
    Adafactor (to rounding)."""
    results = []
    for check in (True, False):
        p = parts()
        p.cfg.optim.name, p.cfg.optim.muon_ns, p.cfg.train.check_finite = name, muon_ns, check
        optimizer = build_optimizer(p.model, p.cfg.optim, "cpu")
        for step in range(3):
            train_step(p, optimizer, step, 1.0, False)
        results.append(snapshot(p.model, optimizer))
    if name == "adafactor":  # it folds the flag into its arithmetic: the same step, rounded anew
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(*results, strict=True))
    else:
        assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))
