"""One gradient-accumulation step on a tiny model, alone: no Trainer."""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from engine.config.presets import load_preset
from engine.data.batches import BatchSampler
from engine.model.gpt import GPT
from engine.model.optimizers import build_optimizer
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
    assert outcome.refused is None and outcome.pending is not None
    assert outcome.pending.step == 8
    assert outcome.pending.lr == replaced.param_groups[0]["lr"] == 0.5 * p.cfg.optim.lr
    assert outcome.memory is not None and outcome.memory.step == 7
    assert replaced.state and not kept.state
    assert any(not torch.equal(a, b) for a, b in zip(before, p.model.parameters(), strict=True))


def test_a_non_finite_gradient_is_refused_and_never_reaches_the_weights() -> None:
    p = parts()

    def nan_loss(x, y=None):
        logits, loss = p.model(x, y)
        return logits, loss * float("nan")

    p.forward = nan_loss
    optimizer = build_optimizer(p.model, p.cfg.optim, "cpu")
    before = [w.detach().clone() for w in p.model.parameters()]
    outcome = train_step(p, optimizer, step=3, lr_schedule_factor=1.0, report_memory=True)
    assert outcome.pending is None and outcome.memory is None
    assert outcome.refused is not None and "non-finite gradient at step 4" in outcome.refused
    assert all(torch.equal(a, b) for a, b in zip(before, p.model.parameters(), strict=True))
    assert all(w.grad is None for w in p.model.parameters())
