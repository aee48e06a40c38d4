"""train.float8: its refusals, the planner's terms (by hand), and, where torchao is installed, the
MLP and head converted and a few emulated steps of `tiny` close to the unswitched run's."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from command_here import cockpit_here

from engine.checkpoint.store import load_checkpoint
from engine.config.presets import load_preset
from engine.config.run_config import ConfigError
from engine.model.float8 import convert_to_float8, float8_refusal
from engine.model.gpt import GPT
from engine.plan.flops import PEAK_TFLOPS, float8_flop_share, float8_table_peak, mixed_peak
from engine.plan.memory import float8_activation_saving, head_loss_bytes
from engine.plan.planner import float8_weights, param_shapes, plan_memory
from tests.run_copies import train_here
from tests.tiny import tiny_overrides


def test_refusals_name_the_device_the_capability_and_the_dimension():
    assert float8_refusal("off", "cpu", None, 10, 65) is None
    assert float8_refusal("emulate", "cpu", None, 64, 128) is None
    assert float8_refusal("on", "cuda", (9, 0), 64, 128) is None
    assert float8_refusal("on", "cuda", (8, 9), 64, 128) is None
    on_cpu = float8_refusal("on", "cpu", None, 64, 128)
    assert "CUDA GPU of compute capability 8.9" in on_cpu and "emulate" in on_cpu
    ampere = float8_refusal("on", "cuda", (8, 0), 64, 128)
    assert "this GPU's is 8.0" in ampere
    narrow = float8_refusal("emulate", "cpu", None, 40, 128)
    assert "model.n_embd a multiple of 16 (it is 40)" in narrow
    rows = float8_refusal("on", "cuda", (9, 0), 64, 65)
    assert "padded to model.vocab_multiple is 65" in rows
    assert all("\n" not in why for why in (on_cpu, ampere, narrow, rows))


def qdq(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`t` cast to float8 `dtype` with one scale for the tensor (its max finite value over the
    tensor's largest magnitude) and back: what each float8 matmul multiplies."""
    top = torch.finfo(dtype).max
    scale = (top / t.abs().max().double()).float()
    return (t * scale).clamp(-top, top).to(dtype).float() / scale


def test_an_emulated_layer_steps_as_computed_by_hand():
    """Forward: x and w in e4m3; backward: the output's gradient in e5m2, against e4m3 copies."""
    pytest.importorskip("torchao", reason="torchao is not installed: pip install 'cockpit[float8]'")
    torch.manual_seed(0)
    model = GPT(load_preset("tiny", tiny_overrides()).model, vocab_size=65)
    w = model.blocks[0].mlp.c_fc.weight.detach().clone()
    convert_to_float8(model, "emulate", torch.device("cpu"))
    layer = model.blocks[0].mlp.c_fc  # the converted module, in the plain one's place
    x = torch.randn(8, 16, requires_grad=True)
    y = layer(x)
    e4m3, e5m2 = torch.float8_e4m3fn, torch.float8_e5m2
    assert torch.equal(y, qdq(x.detach(), e4m3) @ qdq(w, e4m3).T)
    assert not torch.allclose(y, x.detach() @ w.T, atol=1e-3)  # float8 rounds it visibly
    grad = torch.randn_like(y)
    y.backward(grad)
    assert torch.equal(layer.weight.grad, qdq(grad, e5m2).T @ qdq(x.detach(), e4m3))
    assert torch.equal(x.grad, qdq(grad, e5m2) @ qdq(w, e4m3))


def test_a_missing_torchao_is_refused_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)  # import torchao raises ImportError
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    model = GPT(load_preset("tiny", []).model, vocab_size=65)
    with pytest.raises(ConfigError, match=r"needs torchao.*cockpit\[float8\]"):
        convert_to_float8(model, "emulate", torch.device("cpu"))


def test_the_planner_terms_by_hand():
    # tiny: 2 blocks of n_embd 32, a char vocabulary of 65 padded to 128, the head tied
    cfg = load_preset("tiny", [])
    shapes = param_shapes(cfg, 65)
    # the MLPs: 2 x (128 x 32 + 32 x 128) = 16,384; the head (the tied wte): 128 x 32 = 4,096
    assert float8_weights(shapes) == 16_384 + 4_096
    assert float8_activation_saving(20_480, 2) == 40_960
    assert float8_activation_saving(20_480, 4) == 0  # fp32: no 16-bit copies to save
    # a float8 head's logits are never chunked: 12 bytes per logit (16 x 1024 tokens x 50,304)
    assert head_loss_bytes(16, 1024, 768, 50_304, 2, whole=True) == 16 * 1024 * 50_304 * 12
    assert head_loss_bytes(16, 1024, 768, 50_304, 2) < 16 * 1024 * 50_304 * 12 / 10
    on = load_preset("tiny", ["train.float8=on", "train.dtype=bfloat16"])
    off = load_preset("tiny", ["train.dtype=bfloat16"])
    saved = (
        plan_memory(off, 65, "cuda", None).activations
        - plan_memory(on, 65, "cuda", None).activations
    )
    assert saved == 40_960  # one chunk either way at this size: only the copies differ
    # FLOPs: 6 x 20,480 float8 of 6N + 12 L H Q T
    assert float8_flop_share(cfg.model, 128, 245_760.0) == pytest.approx(0.5)
    assert mixed_peak(1000.0, 2000.0, 0.5) == pytest.approx(1000 / 0.75)
    h100 = float8_table_peak("NVIDIA H100 80GB HBM3", 0.5)
    assert h100.flops == pytest.approx(1e12 / (0.5 / 1979 + 0.5 / 989.5))
    assert "H100 SXM bf16 + fp8 for 50%" in h100.source
    assert float8_table_peak("NVIDIA A100-SXM4-80GB", 0.5) is None  # no float8 tensor cores
    assert {e.part for e in PEAK_TFLOPS if e.fp8} >= {"H100 SXM", "H200 SXM", "L4", "RTX 4090"}


def losses(run) -> list[float]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if line.startswith('{"kind":"step"')]


def test_emulated_float8_converts_the_mlp_and_head_and_trains_as_the_unswitched_run(
    tmp_path, isolated_env
):
    pytest.importorskip("torchao", reason="torchao is not installed: pip install 'cockpit[float8]'")
    model = GPT(load_preset("tiny", []).model, vocab_size=65)
    keys = list(model.state_dict())
    names = convert_to_float8(model, "emulate", torch.device("cpu"))
    assert names == [
        "blocks.0.mlp.c_fc", "blocks.0.mlp.c_proj", "blocks.1.mlp.c_fc", "blocks.1.mlp.c_proj",
        "lm_head",
    ]  # fmt: skip
    kinds = {name: type(m).__name__ for name, m in model.named_modules()}
    assert {kinds[n] for n in names} == {"Float8Linear"}
    assert kinds["blocks.0.attn.c_attn"] == "Linear"
    assert model.lm_head.weight is model.wte.weight  # still tied
    assert list(model.state_dict()) == keys  # a plain model's checkpoint names

    sets = tiny_overrides("train.max_steps=4", "schedule.warmup_steps=0", quiet=True)
    plain = losses(train_here(tmp_path / "plain", sets, isolated_env))
    run = train_here(tmp_path / "f8", [*sets, "train.float8=emulate"], isolated_env)
    f8 = losses(run)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    started = next(r for r in records if r["kind"] == "run_started")
    assert "train.float8: 3 Linear layers (the MLPs' and the head's) in float8, emulated" in (
        " ".join(started["notes"])
    )
    # e4m3 keeps 3 mantissa bits (a cast is within 2^-4 of the value), but a loss averages over
    # thousands of such products with independent errors: measured within 5e-4 of the fp32
    # run's over these steps; 1e-2 relative is far from any real divergence (it trains down)
    assert len(f8) == 4 and f8 != plain
    assert f8 == pytest.approx(plain, rel=1e-2)
    # its checkpoint loads into a plain model as any other (what resume and export read)
    state = load_checkpoint(next(run.glob("ckpt-*.pt")))
    rows = state["model"]["wte.weight"].shape[0]  # the padded vocabulary: pads to itself
    fresh = GPT(load_preset("tiny", tiny_overrides()).model, vocab_size=rows)
    fresh.load_state_dict(state["model"])


def test_the_plan_says_a_float8_head_holds_the_whole_logits():
    args = ("plan", "--preset", "gpt2-small", "--device-memory", "80GB")
    plain = cockpit_here(*args)
    assert "the loss in chunks of 512 tokens" in plain.stdout
    f8 = cockpit_here(*args, "--set", "train.float8=on")
    assert "whole micro-batch's logits (12 B each: a float8 head is not chunked)" in f8.stdout
