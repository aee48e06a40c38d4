"""Every event survives `to_record` -> JSON -> `Event.from_record` exactly: the attach client
rebuilds the engine's events from these records, and a resumed run its history."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from engine.events import (
    EVENT_TYPES,
    Alert,
    CheckpointSaved,
    CommandReceived,
    DataProgress,
    DeviceReading,
    Eval,
    Event,
    LrChanged,
    MemoryBreakdown,
    RankReading,
    RankReport,
    RunStarted,
    Sample,
    SettingsChanged,
    StateChanged,
    Step,
    Telemetry,
    ThreadsChosen,
    ViewerChanged,
)

T = 1_764_512_345.678


def through_json(event: Event) -> Event:
    return Event.from_record(json.loads(json.dumps(event.to_record(), allow_nan=False)))


REALISTIC: list[Event] = [
    RunStarted(
        run_dir="runs/tiny-20261130-151500",
        preset="tiny",
        description="a few seconds on a CPU",
        config={
            "name": "tiny",
            "model": {"n_layer": 2, "n_embd": 64, "dropout": 0.0, "bias": False},
            "optim": {"name": "adamw", "lr": 0.001, "betas": [0.9, 0.95]},
            "sample": {"prompts": ["\n", "ROMEO:"], "max_new_tokens": 200},
        },
        device="cpu",
        dtype="float32",
        n_params=104_000,
        n_params_non_embedding=99_840,
        vocab_size=65,
        tokenizer="char",
        train_tokens=1_003_854,
        val_tokens=111_540,
        start_step=250,
        max_steps=2000,
        tokens_per_step=1024,
        planned_lr=((0, 0.0), (100, 0.001), (1000, 0.00055), (2000, 0.0001)),
        resumed_from="runs/tiny-20261130-151500/ckpt-000250.pt",
        memory_plan={"weights": 416_000, "gradients": 416_000, "total": 2_000_000, "capacity": 8 << 30},
        flops_per_token=624_000.0,
        peak_flops=1.2e11,
        peak_source="measured: 2 cores float32 matmul",
        notes=("max_steps 1000 -> 2000", "kept: lr 0.001"),
        data_source={"source": "tinyshakespeare", "path": "/data/input.txt", "vocab_size": 65},
        train_time_s=41.5,
        time=T,
    ),
    Step(
        step=251,
        loss=2.4871,
        lr=0.00099,
        grad_norm=0.734,
        tokens_per_s=25_311.2,
        step_time_s=0.0405,
        tokens=257_024,
        mfu=0.0132,
        data_time_s=0.0003,
        update_ratio=0.0021,
        time=T + 1,
    ),
    Eval(step=300, train_loss=2.31, val_loss=2.38, train_time_s=43.5, full_split=True, time=T + 2),
    Sample(step=300, prompt="ROMEO:", text="ROMEO:\nWhat, art thou mad?\n", time=T + 3),
    CheckpointSaved(step=300, path="runs/tiny/ckpt-000300.pt", reason="interval", time=T + 4),
    StateChanged(state="paused", step=300, reason="user", time=T + 5),
    LrChanged(step=300, old_lr=0.00098, new_lr=0.001225, scale=1.25, time=T + 6),
    SettingsChanged(
        step=300,
        changes={"optim.weight_decay": [0.1, 0.0], "train.max_steps": [2000, 5000]},
        by="viewer 2 alice@gpu1 (pts/3)",
        max_steps=5000,
        tokens_per_step=2048,
        planned_lr=((0, 0.0), (100, 0.001), (5000, 0.0001)),
        time=T + 6.5,
    ),
    Alert(level="warning", message="loss spike: 4.1 (mean 2.3)", step=301, code="spike", time=T + 7),
    ThreadsChosen(
        step=308,
        threads=1,
        previous=2,
        step_times_s={"2": 0.9, "1": 0.41},
        reason="the step time went from 240 ms to 900 ms",
        time=T + 7.5,
    ),
    Telemetry(
        source="nvml",
        gpus=(
            DeviceReading(
                index=0,
                name="NVIDIA H100 80GB HBM3",
                util_percent=97.0,
                mem_util_percent=41.0,
                mem_used=30 << 30,
                mem_total=80 << 30,
                process_mem=29 << 30,
                temperature_c=64.0,
                power_w=612.5,
                power_limit_w=700.0,
                sm_clock_mhz=1980.0,
                throttle=("sw_power_cap", "hw_slowdown"),
            ),
            DeviceReading(index=1, name="NVIDIA H100 80GB HBM3"),
        ),
        cpu_percent=12.5,
        cpu_per_core=(10.0, 15.0, 0.5, 24.0),
        ram_used=12 << 30,
        ram_total=64 << 30,
        process_rss=3 << 30,
        time=T + 8,
    ),
    Telemetry(source="unavailable", reason="NVML: driver not loaded", time=T + 9),
    MemoryBreakdown(
        step=301,
        device="cuda:0",
        capacity=80 << 30,
        weights=500 << 20,
        gradients=500 << 20,
        optimizer=1000 << 20,
        activations=6 << 30,
        activations_measured=True,
        cache=300 << 20,
        other=600 << 20,
        time=T + 10,
    ),
    DataProgress(
        source="folder /data/fineweb (12 files)",
        tokenizer="r50k_base",
        bytes_read=1_250_000_000,
        bytes_total=4_000_000_000,
        documents=812_345,
        skipped=3,
        tokens=290_000_000,
        elapsed_s=61.5,
        note="an interrupted preparation was found and started over",
        time=T + 11,
    ),
    ViewerChanged(viewer=2, who="alice@gpu1 (pts/3)", read_only=False, attached=True, step=240,
                  time=T + 13),  # fmt: skip
    CommandReceived(name="scale_lr", args={"factor": 0.5}, viewer=2, who="alice@gpu1 (pts/3)",
                    step=241, time=T + 14),  # fmt: skip
    ViewerChanged(viewer=3, who="", read_only=True, attached=False, time=T + 15),
    RankReport(
        step=1200,
        ranks=(
            RankReading(
                rank=0,
                host="gpu-node-a",
                local_rank=0,
                steps=48,
                step_time_s=0.412,
                data_time_s=0.003,
                gpus=(
                    DeviceReading(
                        index=0, name="NVIDIA H100 80GB HBM3", util_percent=98.0, mem_used=61 << 30,
                        mem_total=80 << 30, power_w=655.0, power_limit_w=700.0, temperature_c=71.0,
                        throttle=("power",),
                    ),
                ),  # fmt: skip
                cpu_percent=103.5,
                process_rss=9 << 30,
                memory_peak=58 << 30,
            ),
            # a rank that trained nothing in the interval (paused): no step time
            RankReading(rank=9, host="gpu-node-b", local_rank=1, steps=0, step_time_s=math.nan,
                        data_time_s=math.nan),  # fmt: skip
        ),
        time=T + 12,
    ),
]


def test_every_event_type_has_a_realistic_instance_here() -> None:
    assert {type(e) for e in REALISTIC} == set(EVENT_TYPES.values())


@pytest.mark.parametrize("event", REALISTIC, ids=lambda e: f"{type(e).__name__}-{e.time - T:g}")
def test_every_event_round_trips_through_json_exactly(event: Event) -> None:
    back = through_json(event)
    assert back == event
    assert type(back) is type(event)


def test_tuples_and_nested_readings_come_back_as_declared() -> None:
    started = through_json(REALISTIC[0])
    assert isinstance(started, RunStarted)
    assert type(started.planned_lr) is tuple and type(started.planned_lr[1]) is tuple
    assert type(started.notes) is tuple and type(started.config["optim"]["betas"]) is list
    reading = through_json(next(e for e in REALISTIC if isinstance(e, Telemetry)))
    assert isinstance(reading, Telemetry)
    assert type(reading.gpus[0]) is DeviceReading and type(reading.gpus[0].throttle) is tuple
    assert type(reading.cpu_per_core) is tuple
    report = through_json(REALISTIC[-1])
    assert isinstance(report, RankReport) and type(report.ranks) is tuple
    assert type(report.ranks[0]) is RankReading and type(report.ranks[0].gpus[0]) is DeviceReading
    assert math.isnan(report.ranks[1].step_time_s)  # written as null, NaN again
    assert report.slowest == report.ranks[0] and report.memory_max == report.ranks[0]


def test_non_finite_floats_come_back_as_nan() -> None:
    # JSON has no NaN: to_record writes null, and from_record makes a plain float NaN again.
    step = Step(
        step=5, loss=math.nan, lr=1e-3, grad_norm=math.inf, tokens_per_s=1e4, step_time_s=0.1,
        tokens=3840, time=T,
    )  # fmt: skip
    back = through_json(step)
    assert isinstance(back, Step)
    assert math.isnan(back.loss) and math.isnan(back.grad_norm) and math.isnan(back.update_ratio)
    assert (back.step, back.lr, back.tokens, back.time) == (5, 1e-3, 3840, T)
    cores = through_json(Telemetry(source="psutil", cpu_per_core=(3.0, math.nan), time=T))
    assert isinstance(cores, Telemetry) and cores.cpu_per_core[0] == 3.0
    assert math.isnan(cores.cpu_per_core[1])
    # An optional reading that was NaN is as unknown as a missing one: None.
    gpu = through_json(Telemetry(source="nvml", gpus=(DeviceReading(0, "gpu", math.nan),), time=T))
    assert isinstance(gpu, Telemetry) and gpu.gpus[0].util_percent is None


def test_a_record_from_an_older_writer_takes_the_defaults() -> None:
    record = {"kind": "step", "step": 3, "loss": 2.0, "lr": 1e-3, "grad_norm": 0.5,
              "tokens_per_s": 10_000, "step_time_s": 0.1, "tokens": 2304, "time": T}  # fmt: skip
    back = Event.from_record(record)
    assert isinstance(back, Step) and back.mfu == 0.0 and math.isnan(back.update_ratio)
    assert back.tokens_per_s == 10_000.0 and type(back.tokens_per_s) is float


@pytest.mark.parametrize(
    "record, problem",
    [
        ({"kind": "nonsense", "time": T}, "kind 'nonsense'"),
        ({"time": T}, "kind None"),
        ({"kind": "sample", "step": 1, "prompt": "a", "text": "b", "colour": "red"}, "colour"),
        ({"kind": "sample", "step": 1, "time": T}, "malformed 'sample' record"),
        ({"kind": "telemetry", "source": "nvml", "gpus": 3, "time": T}, "expected a list"),
    ],
)
def test_a_record_that_is_no_event_is_a_value_error(record: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Event.from_record(record)


def test_from_record_on_a_subclass_accepts_only_its_kind() -> None:
    record = REALISTIC[1].to_record()
    assert Step.from_record(record) == REALISTIC[1]
    with pytest.raises(ValueError, match="not a record of Eval"):
        Eval.from_record(record)


def test_a_runs_history_reads_back_the_events_the_writer_wrote(tmp_path: Path) -> None:
    # read_history rebuilds events with from_record: what a resumed run redraws is what was
    # emitted, NaN loss included (written as null).
    from engine.rundir.metrics_log import HISTORY_KINDS, MetricsWriter, read_history

    nan_step = Step(
        step=302, loss=math.nan, lr=0.001, grad_norm=math.nan, tokens_per_s=25_000.0,
        step_time_s=0.04, tokens=309_248, time=T + 11,
    )  # fmt: skip
    writer = MetricsWriter(tmp_path / "metrics.jsonl")
    for event in [*REALISTIC, nan_step]:
        writer(event)
    writer.close()
    history = read_history(tmp_path / "metrics.jsonl", upto_step=302)
    expected = [e for e in REALISTIC if e.kind in HISTORY_KINDS]
    assert history[:-1] == sorted(expected, key=lambda e: (e.step, e.time))
    last = history[-1]
    assert isinstance(last, Step) and last.step == 302 and math.isnan(last.loss)
