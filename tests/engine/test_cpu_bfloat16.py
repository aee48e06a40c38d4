"""Training in bfloat16 on a CPU (speedrun-cpu's dtype): attention written out as three ops where
torch's fused CPU kernel is slower, the same numbers as the fused kernel, the planner counting
the score matrix the three ops keep, and a line for a CPU that only emulates bfloat16."""

from __future__ import annotations

import os
import platform
import warnings

import pytest
import torch
import torch.nn.functional as F

from engine.config.presets import load_preset
from engine.model.gpt import (
    CPU_BFLOAT16_UNFUSED_MAX_TOKENS,
    RMSNorm,
    attention_is_fused,
    causal_attention,
)
from engine.plan.planner import plan_memory
from engine.train.device import cpu_bfloat16_note
from engine.train.trainer import Trainer


def test_attention_is_written_out_only_on_a_cpu_in_bfloat16_for_short_sequences():
    bf16, fp32 = torch.bfloat16, torch.float32
    assert not attention_is_fused("cpu", bf16, 64)
    assert not attention_is_fused("cpu", bf16, CPU_BFLOAT16_UNFUSED_MAX_TOKENS)
    assert attention_is_fused("cpu", bf16, CPU_BFLOAT16_UNFUSED_MAX_TOKENS + 1)
    assert attention_is_fused("cpu", fp32, 64)
    assert attention_is_fused("cuda", bf16, 64)


@pytest.mark.parametrize("tokens", [1, 16, 64])
def test_written_out_attention_matches_the_fused_kernel_and_its_gradients(tokens):
    torch.manual_seed(0)
    shape = (2, 4, tokens, 32)
    exact = [torch.randn(shape, requires_grad=True) for _ in range(3)]
    low = [t.detach().to(torch.bfloat16).requires_grad_() for t in exact]
    grad = torch.randn(shape)

    reference = F.scaled_dot_product_attention(*exact, is_causal=True)
    reference.backward(grad)
    out = causal_attention(*low, 0.0)
    out.backward(grad.to(torch.bfloat16))

    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference, atol=3e-2, rtol=3e-2)
    for lo, ex in zip(low, exact, strict=True):
        torch.testing.assert_close(lo.grad.float(), ex.grad, atol=5e-2, rtol=5e-2)
    # causal: the first position attends to itself only
    torch.testing.assert_close(out[:, :, 0].float(), low[2][:, :, 0].float())


def test_written_out_attention_drops_weights_when_asked():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 16, 8, dtype=torch.bfloat16) for _ in range(3))
    kept = causal_attention(q, k, v, 0.0)
    dropped = causal_attention(q, k, v, 0.5)
    assert not torch.equal(kept, dropped)
    assert torch.isfinite(dropped.float()).all()


def test_rms_norm_of_bfloat16_stays_bfloat16_on_torch_fused_path():
    norm = RMSNorm(32)
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the float32-weight mismatch warns and takes a slow path
        y = norm(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), F.rms_norm(x.float(), (32,), eps=1e-6), atol=2e-2, rtol=2e-2)


def test_the_planner_counts_the_score_matrix_the_written_out_attention_keeps():
    cfg = load_preset("speedrun-cpu")  # bfloat16, 16 x 64 tokens, 4 layers of 4 heads, 128 wide
    on_cpu = plan_memory(cfg, 65, "cpu", None).activations
    on_gpu = plan_memory(cfg, 65, "cuda", None).activations  # bfloat16 too, fused attention
    # Korthikanti et al.'s 5 * a * s / h bytes per s*b*h value (2-byte values) for each layer:
    # 16 * 64 * 128 * (5 * 4 * 64 / 128) = 1,310,720 bytes, times 4 layers
    assert on_cpu - on_gpu == 4 * 1_310_720


@pytest.fixture
def x86(monkeypatch):
    monkeypatch.setattr("platform.machine", lambda: "x86_64")


@pytest.mark.parametrize(
    "avx512_bf16, amx, noted", [(False, False, True), (True, False, False), (False, True, False)]
)
def test_a_cpu_without_bfloat16_arithmetic_is_named_with_the_fix(
    x86, monkeypatch, avx512_bf16, amx, noted
):
    # the CPU's features are the hardware this machine may lack: stood in for
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    note = cpu_bfloat16_note(torch.bfloat16, torch.device("cpu"))
    if noted:
        assert note is not None and "emulated" in note and "train.dtype=float32" in note
        assert "\n" not in note
    else:
        assert note is None
    assert cpu_bfloat16_note(torch.float32, torch.device("cpu")) is None
    assert cpu_bfloat16_note(torch.bfloat16, torch.device("cuda")) is None


SMALL = [
    "model.n_layer=2",
    "model.n_embd=32",
    "model.n_head=2",
    "model.block_size=32",
    "train.batch_size=8",
    "train.max_steps=30",
    "train.device=cpu",
    "train.threads=1",
    "schedule.warmup_steps=5",
    "train.seq_start=0",
    "train.seq_warmup_steps=0",
    "eval.interval=0",
    "eval.batches=2",
    "eval.full_val=false",
    "sample.interval=0",
    "checkpoint.interval=0",
]


def losses_of(dtype: str, tmp_path) -> tuple[list[float], tuple[str, ...], str]:
    data = [] if os.environ.get("COCKPIT_TINYSHAKESPEARE") else ["data.source=pydoc"]
    cfg = load_preset("speedrun-cpu", [*SMALL, *data, f"train.dtype={dtype}"])
    losses: list[float] = []
    started = {}

    def sink(event) -> None:
        if event.kind == "step":
            losses.append(event.loss)
        elif event.kind == "run_started":
            started.update(notes=tuple(event.notes), dtype=event.dtype)

    trainer = Trainer(cfg, run_dir=tmp_path / dtype, sinks=[sink], telemetry=False)
    assert trainer.run() == "finished"
    return losses, started["notes"], started["dtype"]


def test_speedrun_cpu_trains_in_bfloat16_as_it_does_in_float32(tmp_path):
    low, notes, dtype = losses_of("bfloat16", tmp_path)
    exact, _, _ = losses_of("float32", tmp_path)
    assert "bfloat16" in dtype
    assert len(low) == len(exact) == 30
    assert low[0] == pytest.approx(exact[0], abs=0.05)  # the same model, rounded
    assert sum(low[-5:]) / 5 < sum(low[:5]) / 5 - 0.1
    assert sum(low[-5:]) / 5 == pytest.approx(sum(exact[-5:]) / 5, abs=0.15)
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    assert any("emulated" in n for n in notes) == (x86 and not native)
