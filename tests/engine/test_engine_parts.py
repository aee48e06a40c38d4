"""The trainer's parts tested directly, without a Trainer: device facts, batches and evaluation
windows, evaluation and sampling, the memory breakdown, the metrics log."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
import torch
from tiny import tiny_overrides

from engine.config.presets import load_preset
from engine.config.run_config import ConfigError
from engine.data.batches import BatchSampler, eval_batches
from engine.data.preparation import PreparedData
from engine.data.tokenizers import CharTokenizer
from engine.events import Eval, Step
from engine.model.evaluation import Evaluator
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.plan.memory import memory_breakdown, step_start_allocated, weight_bytes
from engine.rundir.metrics_log import MetricsWriter, read_history
from engine.train.device import (
    autocast_context,
    device_capacity,
    process_gpu_memory,
    select_device,
    select_dtype,
)

CPU = torch.device("cpu")
TINY = tiny_overrides(
    "model.block_size=8", "train.batch_size=3", "sample.max_new_tokens=5", "train.device=cpu"
)


# ---------------------------------------------------------------------- device
def test_device_capacity_on_cpu_is_the_hosts_ram() -> None:
    assert device_capacity(CPU) == psutil.virtual_memory().total


def test_select_device_and_dtype_on_a_cpu_machine() -> None:
    assert select_device("cpu") == CPU
    assert select_dtype("auto", CPU) == torch.float32
    assert select_dtype("bfloat16", CPU) == torch.bfloat16
    assert isinstance(autocast_context(CPU, torch.float32), contextlib.nullcontext)
    with autocast_context(CPU, torch.bfloat16):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="unknown device 'tpu'; use auto, cpu"):
        select_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="--set train.device=auto"):
            select_device("cuda")


class _Nvml:
    """The one NVML query `process_gpu_memory` makes, answering a scripted process list."""

    def __init__(self, processes: list[SimpleNamespace] | None) -> None:
        self.processes = processes

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace] | None:
        return self.processes


def test_process_gpu_memory_counts_only_this_pid_and_says_when_it_cannot_tell() -> None:
    me, other = 100, 200
    procs = [
        SimpleNamespace(pid=other, usedGpuMemory=5 << 30),
        SimpleNamespace(pid=me, usedGpuMemory=1 << 30),
        SimpleNamespace(pid=me, usedGpuMemory=2 << 30),
    ]
    assert process_gpu_memory(_Nvml(procs), 0, me) == 3 << 30
    # a container sees host pids: no entry with ours means unknown, not zero
    assert process_gpu_memory(_Nvml(procs), 0, 300) is None
    assert process_gpu_memory(_Nvml([]), 0, me) is None
    assert process_gpu_memory(_Nvml(None), 0, me) is None
    unattributed = [SimpleNamespace(pid=me, usedGpuMemory=None)]  # Windows WDDM
    assert process_gpu_memory(_Nvml(unattributed), 0, me) is None


def test_cockpit_plan_does_not_load_the_trainer() -> None:
    code = (
        "import sys; from cockpit.cli import main; code = main(['plan', '--preset', 'tiny']);"
        "print('engine.train.trainer' in sys.modules); sys.exit(code)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "capacity" in result.stdout and "fits:" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "False"


def test_telemetry_imports_without_torch() -> None:
    # the cockpit's device panel imports engine.telemetry.throttle_reasons at start-up, a run with
    # telemetry engine.telemetry.poller: both must stay light
    code = "import sys, engine.telemetry.poller, engine.telemetry.throttle_reasons; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


# ---------------------------------------------------------------------- batches
def test_full_eval_windows_cover_every_non_overlapping_window_in_order() -> None:
    tokens = np.arange(90, dtype=np.uint16)
    batches = list(eval_batches(tokens, 8, 3, CPU, full=True, batches=2, seed=0))
    x = torch.cat([x for x, _ in batches])
    y = torch.cat([y for _, y in batches])
    starts = list(range(0, 81, 8))  # 0, 8, ..., 80: 11 windows of 9 tokens fit in 90
    assert x[:, 0].tolist() == starts
    assert torch.equal(x, torch.tensor([list(range(s, s + 8)) for s in starts]))
    assert torch.equal(y, x + 1)  # y is x shifted by one token
    assert [len(b[0]) for b in batches] == [3, 3, 3, 2]  # batches of 3, the last one shorter


def test_random_eval_windows_are_the_same_at_every_eval() -> None:
    tokens = np.arange(1000, dtype=np.uint16)

    def windows(seed: int) -> list[list[int]]:
        return [
            x[:, 0].tolist()
            for x, _ in eval_batches(tokens, 8, 4, CPU, full=False, batches=3, seed=seed)
        ]

    first = windows(5)
    assert len(first) == 3 and all(len(b) == 4 for b in first)
    assert windows(5) == first
    assert windows(6) != first


def test_batch_sampler_continues_exactly_from_a_saved_generator_state() -> None:
    tokens = np.arange(500, dtype=np.uint16)
    sampler = BatchSampler(tokens, 8, 4, CPU, seed=1)
    sampler.next()
    saved = sampler.generator.get_state()
    expected = sampler.next()
    resumed = BatchSampler(tokens, 8, 4, CPU, seed=99)
    resumed.generator.set_state(saved)
    x, y = resumed.next()
    assert torch.equal(x, expected[0]) and torch.equal(y, expected[1])
    assert x.shape == (4, 8) and torch.equal(y, x + 1)


# ---------------------------------------------------------------------- evaluation
def _evaluator() -> tuple[Evaluator, PreparedData]:
    cfg = load_preset("default", [*TINY, "sample.prompts=['ab', 'c']"])
    text = "abcdefgh " * 60
    tok = CharTokenizer.from_text(text)
    ids = np.array(tok.encode(text), dtype=np.uint16)
    data = PreparedData(train=ids[:400], val=ids[400:], tokenizer=tok, meta={}, source="test")
    torch.manual_seed(0)
    model = GPT(cfg.model, tok.vocab_size)
    return Evaluator(model, model, contextlib.nullcontext(), CPU, cfg), data


def test_evaluation_is_repeatable_and_leaves_the_model_training() -> None:
    evaluator, data = _evaluator()
    evaluator.model.train()
    first = evaluator.losses(data)
    assert evaluator.model.training
    assert evaluator.losses(data) == first  # the same windows, the same weights
    assert all(np.isfinite(first))
    evaluator.cfg.eval.full_val = True
    assert evaluator.losses(data)[1] != first[1]  # the whole val split, not 2 batches of it


def test_samples_come_one_per_prompt() -> None:
    evaluator, data = _evaluator()
    generator = torch.Generator().manual_seed(2)
    samples = list(evaluator.samples(data.tokenizer, generator))
    assert [prompt for prompt, _ in samples] == ["ab", "c"]
    assert all(len(text) == 5 for _, text in samples)  # sample.max_new_tokens characters
    assert evaluator.model.training


# ---------------------------------------------------------------------- memory breakdown
def test_memory_breakdown_on_cpu_counts_exact_sizes_and_the_hosts_capacity() -> None:
    cfg = load_preset("default", TINY)
    model = GPT(cfg.model, 50)
    optimizer = build_optimizer(model, cfg.optim, "cpu")
    model(torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 8, dtype=torch.long))[1].backward()
    optimizer.step()
    assert step_start_allocated(CPU) == 0
    event = memory_breakdown(model, optimizer, cfg, CPU, torch.float32, 7, 0)
    n = sum(p.numel() for p in model.parameters())
    assert event.step == 7 and event.device == "cpu"
    assert event.capacity == psutil.virtual_memory().total
    assert event.weights == weight_bytes(model) == 4 * n and event.gradients == 4 * n
    assert event.optimizer > 0 and event.activations > 0 and not event.activations_measured
    assert event.cache == 0 and event.other >= 0


# ---------------------------------------------------------------------- metrics log
def test_metrics_writer_holds_lines_until_the_run_has_a_directory(tmp_path) -> None:
    writer = MetricsWriter()
    writer(Step(1, 2.5, 1e-3, float("nan"), 100.0, 0.1, 96))
    path = tmp_path / "metrics.jsonl"
    writer.open(path)
    writer(Eval(1, 2.4, 2.6, 0.1))
    writer.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["kind"] for r in records] == ["step", "eval"]
    assert records[0]["grad_norm"] is None  # strict JSON: no NaN
    (step, ev) = read_history(path, upto_step=1)
    assert step.kind == "step" and np.isnan(step.grad_norm) and ev.val_loss == 2.6


def test_a_writer_that_never_got_a_directory_writes_nothing(tmp_path) -> None:
    writer = MetricsWriter()
    writer(Step(1, 2.5, 1e-3, 1.0, 100.0, 0.1, 96))
    writer.close()
    assert os.listdir(tmp_path) == []
