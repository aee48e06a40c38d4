"""Selective recompute (model.grad_checkpoint none/mlp/full, model.recompute_blocks): the config
accepts the old true/false switch, each mode's memory term and compute share by hand, the plan
proposes the cheapest setting that fits, and an old run recorded with `true` resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.checkpoint.store import list_checkpoints
from engine.config.byte_sizes import GIB
from engine.config.loading import config_from_dict
from engine.config.presets import load_preset
from engine.config.run_config import ConfigError, ModelConfig
from engine.config.to_toml import config_to_toml
from engine.plan import memory
from engine.plan.fixes import recompute_fixes, suggest_fixes
from engine.plan.planner import plan_memory
from engine.plan.recompute import Recompute, forward_flops_per_token, recomputed_share
from engine.train.trainer import Trainer


@pytest.mark.parametrize(
    ("written", "mode"),
    [(True, "full"), (False, "none"), ("mlp", "mlp"), ("full", "full"), ("none", "none")],
)
def test_the_old_switch_and_the_modes_are_accepted(written, mode):
    from_toml = config_from_dict({"model": {"grad_checkpoint": written}})
    assert from_toml.model.grad_checkpoint == mode
    text = str(written).lower() if isinstance(written, bool) else written
    assert load_preset("tiny", [f"model.grad_checkpoint={text}"]).model.grad_checkpoint == mode
    if isinstance(written, bool):  # built in code, as benches and old callers do
        assert ModelConfig(grad_checkpoint=written).grad_checkpoint == mode
    # a run's config.toml writes the mode, which reads back the same
    assert f'grad_checkpoint = "{mode}"' in config_to_toml(from_toml)


def test_an_old_preset_file_with_the_switch_loads(tmp_path: Path):
    old = tmp_path / "old.toml"
    old.write_text('extends = "tiny"\n[model]\ngrad_checkpoint = true\n')
    assert load_preset(str(old)).model.recomputed_blocks == load_preset("tiny").model.n_layer


def test_bad_recompute_settings_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="expected one of 'none', 'mlp', 'full', got 'attn'"):
        load_preset("tiny", ["model.grad_checkpoint=attn"])
    with pytest.raises(ConfigError, match=r"model.recompute_blocks \(9\) exceeds model.n_layer"):
        load_preset("tiny", ["model.n_layer=4", "model.recompute_blocks=9"])


def test_recomputed_blocks_counts_from_the_first():
    assert ModelConfig(n_layer=6).recomputed_blocks == 0
    assert ModelConfig(n_layer=6, recompute_blocks=3).recomputed_blocks == 0  # mode none
    assert ModelConfig(n_layer=6, grad_checkpoint="mlp").recomputed_blocks == 6
    assert ModelConfig(n_layer=6, grad_checkpoint="full", recompute_blocks=2).recomputed_blocks == 2


def test_each_mode_memory_term_by_hand():
    # 3 layers, s=4, b=2, h=8, a=2, 16-bit, fused attention: s*b*h = 64, so one block keeps
    # P = 34*64 = 2176 bytes; its input is 2*64 = 128, the MLP's part 17*64 = 1088 of it, and a
    # rebuilt block's backward temporaries 6*64 = 384
    P, inp, mlp, temps = 2176, 128, 1088, 384

    def layers(mode, blocks=0, bytes_per_value=2):
        return memory.recomputed_layers_bytes(
            2, 4, 8, 2, 3, bytes_per_value, mode=mode, recompute_blocks=blocks
        )

    assert memory.mlp_recompute_saving(2, 4, 8, 2) == mlp
    assert layers("none") == 3 * P
    # full, every block: the inputs, one block rebuilt and its backward (the estimate as it was)
    assert layers("full") == layers(True) == 3 * inp + P + temps
    # the first two: at the start of backward, block 3 is whole (P) and then its backward runs
    assert layers("full", 2) == 2 * inp + max(P, P + temps) == 2816
    # the first one: blocks 2 and 3 whole at the start of backward outweigh a rebuilt block
    assert layers("full", 1) == inp + 2 * P == 4480
    # MLP in every block: each keeps P - 1088; block 3's MLP is rebuilt at once
    assert layers("mlp") == 3 * (P - mlp) + mlp == 4352
    assert layers("mlp", 1) == (P - mlp) + 2 * P == 5440
    # fp32 doubles each term
    assert layers("mlp", 1, bytes_per_value=4) == 2 * 5440
    # the estimate adds the logits (2*4*10 of them at 12 bytes) to the layers
    assert memory.activation_bytes_estimate(
        2, 4, 8, 2, 3, 10, 2, grad_checkpoint="mlp", recompute_blocks=1
    ) == 5440 + 960


def test_each_mode_compute_share_by_hand():
    cfg = ModelConfig(n_layer=4, n_embd=64, n_head=4, block_size=32)
    vocab = 100
    # per token: attention projections 8*64^2 = 32768, scores and values 4*32*64 = 8192, MLP
    # 16*64^2 = 65536; a block 106496; the model 4 blocks + the head's 2*64*100 = 12800
    assert forward_flops_per_token(cfg, vocab) == (106496, 65536, 4 * 106496 + 12800)
    total = 438784
    assert recomputed_share(Recompute("none", 0, 4), cfg, vocab) == 0
    assert recomputed_share(Recompute("full", 4, 4), cfg, vocab) == pytest.approx(4 * 106496 / total)
    assert recomputed_share(Recompute("mlp", 4, 4), cfg, vocab) == pytest.approx(4 * 65536 / total)
    assert recomputed_share(Recompute("full", 1, 4), cfg, vocab) == pytest.approx(106496 / total)
    assert Recompute("mlp", 2, 4).overrides == ("model.grad_checkpoint=mlp", "model.recompute_blocks=2")
    assert Recompute("full", 4, 4).overrides == ("model.grad_checkpoint=full", "model.recompute_blocks=0")
    assert Recompute("mlp", 2, 4).describe() == "recompute the MLP of the first 2 of 4 blocks"


# a wide model with a small vocabulary: the blocks' activations are most of its memory
WIDE = [
    "model.n_layer=8",
    "model.n_head=8",
    "model.n_embd=1024",
    "model.block_size=1024",
    "train.batch_size=16",
    "train.dtype=bfloat16",
]
VOCAB = 256


def candidates(cfg, capacity):
    """Every recompute setting the plan could propose, with its plan: the brute-force answer."""
    n = cfg.model.n_layer
    out = []
    for mode in ("mlp", "full"):
        for blocks in range(1, n + 1):
            trial = load_preset(
                "tiny", [*WIDE, f"model.grad_checkpoint={mode}", f"model.recompute_blocks={blocks}"]
            )
            setting = Recompute(mode, blocks, n)
            out.append((recomputed_share(setting, trial.model, VOCAB), setting, plan_memory(trial, VOCAB, "cuda", capacity)))
    return out


@pytest.mark.parametrize(
    ("short_by", "expected"),
    [
        # less than one block's MLP (17*s*b*h = 272 MiB here): one MLP, the least compute
        (GIB // 5, Recompute("mlp", 1, 8)),
        # several blocks' worth: whole blocks free 32*s*b*h for 28*h^2 FLOPs a token, the MLP 17
        # for 16: a few whole blocks cost the least
        (3 * GIB, None),
    ],
)
def test_the_plan_proposes_the_cheapest_recompute_that_fits_not_full(short_by, expected):
    cfg = load_preset("tiny", WIDE)
    capacity = plan_memory(cfg, VOCAB, "cuda", None).total - short_by
    fixes = suggest_fixes(cfg, VOCAB, "cuda", capacity)
    proposed = [f for f in fixes if any(o.startswith("model.grad_checkpoint") for o in f.overrides)]
    assert len(proposed) == 1
    fix = proposed[0]
    assert fix.plan.fits
    # the brute-force answer: of every setting that fits, the least recomputed share
    share, best, _ = min(c for c in candidates(cfg, capacity) if c[2].fits)
    assert fix.overrides == best.overrides
    assert best.blocks < 8  # not every block
    if expected is not None:
        assert best == expected
    assert f"{share:.0%} of the forward again" in fix.description and "per step" in fix.description
    # the proposal applied fits, and one block fewer of its mode would not
    assert plan_memory(load_preset("tiny", [*WIDE, *fix.overrides]), VOCAB, "cuda", capacity).fits
    if best.blocks > 1:
        fewer = Recompute(best.mode, best.blocks - 1, 8).overrides
        assert not plan_memory(load_preset("tiny", [*WIDE, *fewer]), VOCAB, "cuda", capacity).fits


def test_when_only_full_recompute_fits_it_is_proposed_and_nothing_when_nothing_fits():
    cfg = load_preset("tiny", WIDE)
    mlp_everywhere = plan_memory(load_preset("tiny", [*WIDE, "model.grad_checkpoint=mlp"]), VOCAB, "cuda", None)
    capacity = mlp_everywhere.total - GIB // 4  # below what MLP recompute alone reaches
    fixes = recompute_fixes(cfg, VOCAB, capacity, lambda c: plan_memory(c, VOCAB, "cuda", capacity))
    assert [f.overrides[0] for f in fixes] == ["model.grad_checkpoint=full"]
    assert fixes[0].plan.fits
    # far too small: the settings that save the most, offered as still too big
    tiny_capacity = GIB
    fixes = recompute_fixes(cfg, VOCAB, tiny_capacity, lambda c: plan_memory(c, VOCAB, "cuda", tiny_capacity))
    assert [f.overrides for f in fixes] == [
        ("model.grad_checkpoint=mlp", "model.recompute_blocks=0"),
        # the last block is left whole: backward would rebuild it at once, saving nothing
        ("model.grad_checkpoint=full", "model.recompute_blocks=7"),
    ]
    assert not any(f.plan.fits for f in fixes)


SMALL = [
    "model.n_layer=2",
    "model.n_embd=16",
    "model.n_head=2",
    "train.batch_size=4",
    "eval.batches=2",
    "eval.interval=0",
    "sample.interval=0",
    "checkpoint.interval=0",
]


def test_a_run_recorded_with_grad_checkpoint_true_resumes(tmp_path: Path):
    run_dir = tmp_path / "run"
    trainer = Trainer(
        load_preset("tiny", [*SMALL, "train.max_steps=3", "model.grad_checkpoint=full"]),
        run_dir=run_dir,
        telemetry=False,
    )
    assert trainer.run() == "finished"
    # make the checkpoint as a run before the modes wrote it: a switch, no recompute_blocks
    (_, path), = list_checkpoints(run_dir)
    state = torch.load(path, weights_only=True)
    state["config"]["model"]["grad_checkpoint"] = True
    del state["config"]["model"]["recompute_blocks"]
    torch.save(state, path)
    steps = [(4, [], "full"), (5, ["model.grad_checkpoint=mlp", "model.recompute_blocks=1"], "mlp")]
    for max_steps, overrides, mode in steps:  # as recorded, then changed on resume
        resumed = Trainer(
            load_preset("tiny"),
            resume=run_dir,
            resume_overrides=[f"train.max_steps={max_steps}", *overrides],
            telemetry=False,
        )
        assert resumed.run() == "finished"
        assert resumed.cfg.model.grad_checkpoint == mode
        assert resumed.cfg.model.recomputed_blocks == (2 if mode == "full" else 1)
