"""Every shipped preset loads, plans and trains a few steps with falling loss (shrunk with --set)."""

from __future__ import annotations

import os

import pytest

from engine.config.byte_sizes import GIB
from engine.config.presets import discover, load_preset
from engine.plan.fixes import recompute_fixes
from engine.plan.planner import plan_memory
from engine.plan.recompute import Recompute
from engine.train.trainer import Trainer

# Shrink any preset to seconds on a CPU; everything else (optimizer, switches, schedule kind,
# tokenizer, data source) is the preset's own.
SHRINK = [
    "model.n_layer=2",
    "model.n_embd=32",
    "model.n_head=2",
    "model.block_size=32",
    "model.dropout=0.0",
    "train.batch_size=8",
    "train.grad_accum=1",
    "train.max_steps=40",
    "train.device=cpu",
    "train.dtype=float32",
    "train.compile=false",
    "schedule.warmup_steps=5",
    "schedule.decay_steps=0",
    "eval.interval=0",
    "eval.batches=2",
    "eval.full_val=false",
    "sample.interval=0",
    "checkpoint.interval=0",
]
NEW = ("speedrun-cpu", "speedrun-shakespeare", "gpt2-small", "local-300m")


def test_new_presets_are_shipped_with_descriptions():
    presets = discover()
    for name in NEW:
        assert name in presets and presets[name].description, name
        assert len(presets[name].description.splitlines()) == 1


def data_it_needs(name: str, request: pytest.FixtureRequest) -> list[str]:
    """What a preset's own data needs here: GPT-2's ranks for a BPE tokenizer (skipped without
    them: nothing else gives the same tokens); for Tiny Shakespeare, its copy where there is
    one (conftest), else the Python docs corpus that every machine has (overrides to use)."""
    data = load_preset(name).data
    if data.tokenizer != "char":
        request.getfixturevalue("tiktoken_cache")
    if data.source == "tinyshakespeare" and not os.environ.get("COCKPIT_TINYSHAKESPEARE"):
        return ["data.source=pydoc"]
    return []


# every preset that trains from scratch (finetune needs --init-from: test_init_from trains it)
FROM_SCRATCH = sorted(n for n in discover() if load_preset(n).model.init_from != "required")


@pytest.mark.parametrize("name", FROM_SCRATCH)
def test_preset_trains_a_few_steps_with_falling_loss(name, tmp_path, request):
    cfg = load_preset(name, [*SHRINK, *data_it_needs(name, request)])
    losses: list[float] = []

    def sink(event) -> None:
        if event.kind == "step":
            losses.append(event.loss)

    trainer = Trainer(cfg, run_dir=tmp_path, sinks=[sink], telemetry=False)
    assert trainer.run() == "finished"
    assert len(losses) == 40
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.1, (name, first, last)


def test_speedrun_cpu_uses_the_techniques_its_ablation_kept():
    """The ones that paid off on 2 CPU cores (bench/speedrun.py --ablation): bfloat16 autocast
    over 215 steps (a step about 0.72 of float32's), Muon with the float32 Newton-Schulz at
    momentum 0.85 and LR 0.04, rotary positions, QK-norm, warmup-stable-decay with half of the
    steps decaying, and a sequence-length warmup from 16 tokens over 80 steps; not ReLU^2,
    RMSNorm, an untied head, zero-init projections or the soft-cap, nor the record's newer
    switches (none shown to pay at this size) nor a batch-size ramp."""
    cfg = load_preset("speedrun-cpu")
    m = cfg.model
    assert (m.pos_emb, m.qk_norm, m.norm, m.mlp, m.tie_embeddings) == (
        "rotary",
        True,
        "layernorm",
        "gelu",
        True,
    )
    assert (m.zero_init_proj, m.logit_softcap) == (False, 0.0)
    assert (cfg.optim.name, cfg.optim.muon_ns, cfg.schedule.kind) == ("muon", "fp32", "wsd")
    assert (cfg.optim.muon_momentum, cfg.optim.muon_lr) == (0.85, 0.04)
    assert (cfg.train.dtype, cfg.train.max_steps, cfg.schedule.decay_fraction) == (
        "bfloat16",
        215,
        0.5,
    )
    assert (m.value_embeds, m.unet_skips) == (0, False)
    assert (cfg.optim.muon_variant, cfg.optim.cautious_wd) == ("muon", False)
    assert cfg.train.batch_start == 0
    assert (cfg.train.seq_start, cfg.train.seq_warmup_steps, m.block_size) == (16, 80, 64)
    assert cfg.eval.full_val


def test_speedrun_shakespeare_says_its_gpu_figure_is_not_measured():
    assert "not yet measured on a GPU" in discover()["speedrun-shakespeare"].description


def test_gpt2_small_is_gpt2_124m():
    cfg = load_preset("gpt2-small")
    m = cfg.model
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size) == (12, 12, 768, 1024)
    assert cfg.data.tokenizer == "r50k_base"
    assert cfg.tokens_per_step == 524_288
    plan = plan_memory(cfg, 50257, "cuda", None)
    assert 123e6 < plan.n_params < 125e6


def test_local_300m_fits_24_gb_with_margin_and_the_least_recompute():
    cfg = load_preset("local-300m")
    assert cfg.train.dtype == "bfloat16"
    # with margin: at most 85% of the card (the plan was within 5% of the peak measured on an
    # H200, and a desktop card also drives a display)
    margin = int(0.85 * 24 * GIB)
    plan = plan_memory(cfg, 50257, "cuda", margin)
    assert 250e6 < plan.n_params < 350e6
    assert plan.fits, plan
    # and the least recompute that does: none when none fits, else what the plan proposes
    plain = load_preset("local-300m", ["model.grad_checkpoint=none"])
    if plan_memory(plain, 50257, "cuda", margin).fits:
        least = Recompute("none", 0, plain.model.n_layer)
    else:
        (fix,) = recompute_fixes(
            plain, 50257, margin, lambda c: plan_memory(c, 50257, "cuda", margin)
        )
        least = Recompute.of(load_preset("local-300m", list(fix.overrides)).model)
    assert Recompute.of(cfg.model) == least
