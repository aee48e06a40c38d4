"""Instruments that tell the truth: memory figures, the pre-flight plan, FLOPs and MFU."""

from __future__ import annotations

import json

import pytest
import torch
from command_here import cockpit_here

from engine.config.byte_sizes import GIB, parse_size
from engine.config.presets import load_preset
from engine.config.run_config import ConfigError, ModelConfig, OptimConfig
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.plan import flops, memory
from engine.plan.fixes import check_fits, suggest_fixes
from engine.plan.flops import Peak, PeakMeter, flops_per_token, measure_peak, mfu, table_peak
from engine.plan.planner import optimizer_state_bytes, param_shapes, plan_memory
from engine.train.trainer import Trainer

OPTIMIZERS = ["adamw", "muon", "lion", "adafactor"]
SMALL = [
    "model.n_layer=2",
    "model.n_head=2",
    "model.n_embd=32",
    "model.block_size=16",
    "train.batch_size=4",
]


def stepped(optimizer: str, tie: bool = True):
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, tie_embeddings=tie), 50)
    opt = build_optimizer(model, OptimConfig(name=optimizer), "cpu")
    x = torch.randint(50, (2, 16))
    model(x, x)[1].backward()
    opt.step()
    return model, opt


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_exact_bytes_match_the_real_tensors(optimizer):
    model, opt = stepped(optimizer)
    params = list(model.parameters())  # distinct: the tied head appears once
    real_weights = sum(p.numel() * p.element_size() for p in params)
    assert memory.weight_bytes(model) == real_weights
    assert memory.gradient_bytes(model) == sum(
        p.grad.numel() * p.grad.element_size() for p in params
    )
    state_tensors = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    assert memory.optimizer_bytes(opt) == sum(t.numel() * t.element_size() for t in state_tensors)


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("tie", [True, False])
def test_the_plans_exact_parts_equal_what_training_allocates(optimizer, tie):
    model, opt = stepped(optimizer, tie)
    cfg = load_preset(
        "default", [*SMALL, f"optim.name={optimizer}", f"model.tie_embeddings={str(tie).lower()}"]
    )
    shapes = param_shapes(cfg, 50)
    plan = plan_memory(cfg, 50, "cpu", None)
    assert plan.weights == memory.weight_bytes(model)
    assert plan.gradients == memory.gradient_bytes(model)
    assert optimizer_state_bytes(shapes, optimizer) == memory.optimizer_bytes(opt) == plan.optimizer


def test_memory_event_reports_exact_sizes(tmp_path):
    events = []
    cfg = load_preset(
        "default", [*SMALL, "train.max_steps=3", "eval.interval=0", "sample.interval=0"]
    )
    trainer = Trainer(cfg, run_dir=tmp_path, sinks=[events.append], telemetry=False)
    assert trainer.run() == "finished"
    (breakdown,) = [e for e in events if e.kind == "memory"]
    model = trainer.built.parts.model
    n = sum(p.numel() for p in model.parameters())
    assert breakdown.weights == 4 * n and breakdown.gradients == 4 * n
    assert breakdown.optimizer == 8 * n + 4 * len(list(model.parameters()))  # AdamW + steps
    assert breakdown.activations > 0 and not breakdown.activations_measured
    started = next(e for e in events if e.kind == "run_started")
    assert started.memory_plan["weights"] == breakdown.weights
    assert started.memory_plan["optimizer"] == breakdown.optimizer


def test_activation_estimate_by_hand():
    # 1 layer, s=4, b=2, h=8, a=2, vocab 10, 16-bit, fused attention:
    # s*b*h*34 = 2176 bytes, logits 2*4*10*12 = 960 bytes
    assert memory.activation_bytes_estimate(2, 4, 8, 2, 1, 10, 2) == 2176 + 960
    # without fused attention the score term 5*a*s/h = 5 joins the 34
    assert (
        memory.activation_bytes_estimate(2, 4, 8, 2, 1, 10, 2, flash_attention=False)
        == 64 * 39 + 960
    )
    # fp32 doubles the layer term
    assert memory.activation_bytes_estimate(2, 4, 8, 2, 1, 10, 4) == 4352 + 960
    # checkpointing keeps 2*sbh per layer (sbh = 64), plus one recomputed layer (2176) and its
    # backward's temporaries (3*sbh values = 6*sbh bytes at 16-bit), plus the logits
    assert (
        memory.activation_bytes_estimate(2, 4, 8, 2, 3, 10, 2, grad_checkpoint=True)
        == 3 * 128 + 2176 + 6 * 64 + 960
    )
    # in fp32 every term but the logits doubles
    assert (
        memory.activation_bytes_estimate(2, 4, 8, 2, 3, 10, 4, grad_checkpoint=True)
        == 2 * (3 * 128 + 2176 + 6 * 64) + 960
    )


@pytest.mark.parametrize(
    ("batch", "measured_mib"),
    # issue 10: peak RSS of `cockpit train` on this CPU, default preset with block 256, n_embd
    # 256 and gradient checkpointing (re-measured at 704-738 and 1082-1164 MiB)
    [(32, 734), (64, 1082)],
)
def test_checkpointed_plan_is_close_to_the_measured_peak(batch, measured_mib):
    cfg = load_preset(
        "default",
        [
            "model.block_size=256",
            "model.n_embd=256",
            f"train.batch_size={batch}",
            "model.grad_checkpoint=true",
        ],
    )
    plan = plan_memory(cfg, 103, "cpu", 16 * GIB)
    assert 0.91 <= plan.total / (measured_mib * 2**20) <= 1.09  # was 0.81 and 0.72
    # the live tensors: each block's input, one recomputed block and its backward, the logits
    # (of the head's 128 rows: 103 characters padded to a multiple of 64)
    sbh = 256 * batch * 256
    assert plan.activations == 4 * 2 * sbh * 2 + sbh * 68 + 6 * sbh * 2 + batch * 256 * 128 * 12


def test_flops_per_token_by_hand():
    cfg = ModelConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024)
    # nanoGPT's GPT-2 124M: N = 124,337,664 non-position parameters with vocab 50304
    n = GPT(cfg, 50304).num_params()
    assert flops_per_token(n, cfg) == 6 * n + 12 * 12 * 12 * 64 * 1024
    assert mfu(1000.0, 6e9, 6e12) == pytest.approx(1.0)


def test_mfu_is_a_fraction_never_above_one():
    assert mfu(500.0, 6e9, 6e12) == pytest.approx(0.5)  # 3e12 of 6e12 FLOP/s
    assert mfu(2240.0, 6e9, 6e12) == 1.0  # "224%": the peak is wrong, not the model that fast
    assert mfu(500.0, 6e9, 0.0) == 0.0


def test_measured_peak_is_the_best_of_short_windows(monkeypatch):
    """Load only slows a window: three windows at 49, 98, 59 GFLOP/s mean the device does 98."""
    rates = iter([49e9, 98e9, 59e9])
    monkeypatch.setattr(flops, "_window_rate", lambda *args: next(rates))
    peak = measure_peak(torch.device("cpu"), torch.float32, size=64, repeats=3)
    assert peak.flops == 98e9
    assert peak.source == "measured: best of 3 64^3 float32 matmuls on cpu"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_peak_meter_corrects_a_deflated_peak_so_mfu_never_exceeds_one():
    clock = FakeClock()
    fresh = iter([Peak(120e9, "measured: again"), Peak(150e9, "measured: third")])
    remeasured: list[int] = []

    def remeasure() -> Peak:
        remeasured.append(1)
        return next(fresh)

    said: list[str] = []
    meter = PeakMeter(
        Peak(50e9, "measured: at start"), remeasure, on_change=said.append, clock=clock
    )
    # below the peak: a plain ratio, nothing re-measured
    assert meter.mfu(100.0, 0.25e9) == pytest.approx(25e9 / 50e9)
    assert remeasured == []
    # 100 GFLOP/s against a 50 GFLOP/s peak: re-measure (120) -> 100/120
    assert meter.mfu(400.0, 0.25e9) == pytest.approx(100 / 120)
    assert meter.peak == Peak(120e9, "measured: again") and len(remeasured) == 1
    assert said == ["MFU peak corrected: 50 -> 120 GFLOP/s (the model ran at 100; measured: again)"]
    # 130 within the next 30 s: no new measurement, the peak follows the model's own rate
    clock.now = 10.0
    assert meter.mfu(520.0, 0.25e9) == 1.0
    assert meter.peak.flops == 130e9 and "raised to the model's own rate" in meter.peak.source
    assert len(remeasured) == 1 and len(said) == 1  # +8%: not announced
    # after 30 s, beaten again: measured again (150)
    clock.now = 41.0
    assert meter.mfu(560.0, 0.25e9) == pytest.approx(140 / 150)
    assert len(remeasured) == 2 and meter.peak.flops == 150e9
    # the next re-measurement waits twice as long (60 s)
    clock.now = 41.0 + 59.0
    assert meter.mfu(800.0, 0.25e9) == 1.0
    assert len(remeasured) == 2


def test_a_datasheet_peak_is_kept_and_the_figure_capped():
    meter = PeakMeter(Peak(989e12, "table: H100 bf16"))
    assert meter.mfu(1e6, 6e9) == 1.0  # 6e15 FLOP/s claimed: capped, the table kept
    assert meter.mfu(1e3, 6e9) == pytest.approx(6e12 / 989e12)
    assert meter.peak.flops == 989e12


@pytest.mark.parametrize("remeasured_flops", [1e6, 1e18])
def test_trainer_corrects_a_deflated_peak_and_records_it(tmp_path, monkeypatch, remeasured_flops):
    """A real tiny run whose start-up measurement was deflated (1 MFLOP/s): no step reports an
    MFU above 100%, and metrics.jsonl says the peak was corrected and why."""
    peaks = iter([Peak(1e6, "measured: deflated at start")])
    monkeypatch.setattr(flops, "_measured", {})  # as in a fresh process: nothing measured yet
    monkeypatch.setattr(
        flops,
        "measure_peak",
        lambda *a, **k: next(peaks, Peak(remeasured_flops, "measured: again")),
    )
    cfg = load_preset("tiny", [*SMALL, "train.max_steps=6", "eval.interval=0", "sample.interval=0"])
    trainer = Trainer(cfg, run_dir=tmp_path, telemetry=False)
    assert trainer.run() == "finished"
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "step"]
    assert len(steps) == 6 and all(0 < r["mfu"] <= 1.0 for r in steps)
    if remeasured_flops > 1e15:  # the new measurement is the peak: a small, true fraction
        assert steps[-1]["mfu"] < 1e-3
    corrections = [r for r in records if r["kind"] == "alert" and r["code"] == "peak"]
    assert corrections and corrections[0]["level"] == "info"
    assert "MFU peak corrected: 0.001 ->" in corrections[0]["message"]
    assert trainer.built.instruments.peak_meter.peak.flops > 1e6


def test_peak_table_and_measured_fallback():
    # every entry of the table: tests/engine/test_peak_table.py
    assert table_peak("NVIDIA L40S", torch.float32, tf32=False).flops == 91.6e12  # not an L4
    assert table_peak("Some Future GPU", torch.bfloat16, tf32=True) is None
    peak = measure_peak(torch.device("cpu"), torch.float32, size=128, seconds=0.05)
    assert peak.flops > 1e8 and peak.source.startswith("measured")


def test_parse_size():
    assert parse_size("24GB") == 24 * GIB
    assert parse_size("80 GiB") == 80 * GIB
    assert parse_size("512m") == 512 * 1024**2
    with pytest.raises(ConfigError, match="expected a size like 24GB"):
        parse_size("lots")
    for nonsense in ("0", "0GB", "0.0001GB", "512"):  # nothing, or bytes meant as GB
        with pytest.raises(ConfigError, match="no device's memory"):
            parse_size(nonsense)


@pytest.mark.parametrize("size", ["0", "-1", "", "-24GB"])
def test_cockpit_plan_refuses_a_device_memory_of_nothing(size):
    result = cockpit_here("plan", f"--device-memory={size}")
    assert result.returncode == 2, result.stdout
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device-memory" in lines[0] and "24GB" in lines[0]


def test_plan_refuses_what_cannot_fit_and_names_the_fix():
    cfg = load_preset(
        "default",
        [
            "model.n_layer=24",
            "model.n_embd=1024",
            "model.n_head=16",
            "model.block_size=1024",
            "train.batch_size=32",
        ],
    )
    with pytest.raises(ConfigError) as err:
        check_fits(cfg, 50257, "cuda", 24 * GIB)
    message = str(err.value)
    assert "will not fit" in message and "--set" in message and "\n" not in message
    fixes = suggest_fixes(cfg, 50257, "cuda", 24 * GIB)
    batch_fix = fixes[0]
    assert "train.grad_accum" in " ".join(batch_fix.overrides)  # same effective batch first
    assert any(f.plan.fits for f in fixes)
    # each fix lowers the estimate
    base = plan_memory(cfg, 50257, "cuda", 24 * GIB).total
    assert all(f.plan.total < base for f in fixes)


def test_cockpit_plan_cli_answers_with_figures():
    result = cockpit_here(
        "plan",
        "--device-memory",
        "24GB",
        *sum(
            (
                ["--set", s]
                for s in [
                    "model.n_layer=24",
                    "model.n_embd=1024",
                    "model.n_head=16",
                    "model.block_size=1024",
                    "train.batch_size=32",
                    "data.tokenizer=r50k_base",
                ]
            ),
            [],
        ),
    )
    assert result.returncode == 1  # does not fit
    assert "DOES NOT FIT" in result.stdout and "to lower peak memory" in result.stdout
    assert "--set train.batch_size=" in result.stdout


def test_a_cpu_peak_is_measured_once_per_process_for_the_same_threads(monkeypatch):
    """A second run built in the same process (a preset switch, a series in the app) does not
    spend another 0.3 s measuring the same CPU; another thread count is measured afresh."""
    calls = []
    monkeypatch.setattr(flops, "_measured", {})
    monkeypatch.setattr(
        flops, "measure_peak", lambda *a, **k: calls.append(a) or Peak(1e9 * len(calls), "measured")
    )
    cpu, threads = torch.device("cpu"), torch.get_num_threads()
    first = flops.device_peak(cpu, torch.float32)
    assert flops.device_peak(cpu, torch.float32) is first and len(calls) == 1
    torch.set_num_threads(threads + 1)
    try:
        assert flops.device_peak(cpu, torch.float32).flops == 2e9
    finally:
        torch.set_num_threads(threads)
    assert flops.device_peak(cpu, torch.bfloat16).flops == 3e9 and len(calls) == 3
