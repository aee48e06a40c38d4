"""The side-by-side GPU bench (bench/gpu_side_by_side.py) in its CPU mode, end to end: the same
parts a GPU runs (cockpit gpt2-small headless with the app attached between windows, local-300m
through the allocator-capping launcher, as preset and with full recompute), at a tiny size, with
every figure printed beside its goal. nanoGPT's side runs where COCKPIT_NANOGPT_DIR names a
checkout (it is never part of the project); without one it is skipped in one printed line."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import warm_process

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "gpu_side_by_side.py"
NANOGPT = os.environ.get("COCKPIT_NANOGPT_DIR")
RATE = r"[\d,]+ tok/s, MFU [\d.]+% \(\d+ steps\)"


def load_bench():
    spec = importlib.util.spec_from_file_location("gpu_side_by_side_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The bench run as a script, it and the processes it starts (runs, the app viewer) forked
    from the tests' warm server: real processes that skip importing torch."""
    return warm_process.run(
        [sys.executable, str(BENCH), "--cpu", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=warm_process.sharing_env(),
    )  # fmt: skip


@pytest.mark.slow  # five processes training or drawing: about 20 s on 2 quiet cores
def test_cpu_mode_runs_every_part_and_prints_figures_beside_goals(some_text: Path, tiktoken_cache: Path) -> None:
    done = bench("--data", str(some_text))
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "(a) nanoGPT skipped: no --nanogpt DIR given" in out
    # (a) cockpit's side, its MFU against the peak the run names
    assert re.search(rf"cockpit headless: +{RATE}", out), out
    assert re.search(r"tokens per optimizer step: cockpit 128, nanoGPT 128; MFU of both against cockpit's peak", out), out
    assert re.search(r"cockpit MFU: [\d.]+%  \(goal >= 45%: not judged on CPU\)", out), out
    # (b) both local-300m runs went through the capping launcher, measured and planned
    runs = re.findall(rf"\(b\) local-300m (.+?): {RATE}; fits \(no cap on CPU\); peak allocated [\d.]+ GiB, .*planned [\d.]+ GiB", out)
    assert len(runs) == 2 and runs[1] in ("grad_checkpoint=full", "grad_checkpoint=true"), out
    assert re.search(r"tokens/s preset / full recompute: [\d.]+.*goal: fits no cap on CPU and >= 1.25: not judged on CPU", out), out
    # (c) a window with the app attached between two without
    assert re.search(rf"\(c\) gpt2-small attached \(app\): {RATE}; headless {RATE}", out), out
    assert re.search(r"round 1: headless [\d,]+ tok/s .*attached [\d,]+: [\d.]+", out), out
    assert re.search(r"tokens/s attached / headless: [\d.]+  \(goal >= 0.97: not judged on CPU\)", out), out
    assert "failed" not in out, out


@pytest.mark.slow
@pytest.mark.skipif(not NANOGPT, reason="set COCKPIT_NANOGPT_DIR to a nanoGPT checkout to run its side")
def test_nanogpt_side_runs_the_checkout_at_the_same_config(some_text: Path, tiktoken_cache: Path, tmp_path: Path) -> None:
    assert NANOGPT is not None
    before = sorted(p.name for p in Path(NANOGPT).iterdir())
    done = bench("--data", str(some_text), "--parts", "nanogpt", "--nanogpt", NANOGPT, "--out", str(tmp_path / "out"), timeout=400)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert re.search(rf"\(a\) nanoGPT train.py: +{RATE}", out), out
    assert re.search(r"tokens/s cockpit / nanoGPT: [\d.]+  \(goal >= 1.1: not judged on CPU\)", out), out
    # nanoGPT read the tokens cockpit trained on, from the bench's own folder, not the checkout's
    tokens = (tmp_path / "out" / "nanogpt" / "data" / "cockpit" / "train.bin").stat().st_size // 2
    assert re.search(rf"nanoGPT's data: {tokens:,} train", out), out
    assert sorted(p.name for p in Path(NANOGPT).iterdir()) == before  # nothing written there


def test_nanogpt_lines_are_read_for_time_and_mfu() -> None:
    text = (
        "step 0: train loss 10.9, val loss 10.9\n"
        "iter 0: loss 10.9512, time 41234.50ms, mfu -100.00%\n"
        "iter 5: loss 9.1234, time 250.00ms, mfu 38.12%\n"
        "iter 6: loss nan, time 260.25ms, mfu 38.20%\n"
    )
    assert load_bench().parse_nanogpt(text) == [(0, 41.2345, -1.0), (5, 0.25, 0.3812), (6, 0.26025, 0.382)]


def test_cockpit_rate_is_tokens_over_the_summed_step_times() -> None:
    gpu = load_bench()
    steps = [{"step_time_s": 0.25}, {"step_time_s": 0.25}, {"step_time_s": 0.5}]
    assert gpu.cockpit_rate(steps, 1000) == pytest.approx(3000 / 1.0)


def test_nanogpt_overrides_are_keys_its_train_py_has() -> None:
    # nanoGPT's configurator refuses an unknown key, and one of another type than its default
    gpu = load_bench()
    overrides = gpu.gpt2_small(True, 8).nanogpt(Path("/d"), Path("/o"), 50)
    assert "--compile=True" in overrides and "--dtype=bfloat16" in overrides
    assert "--max_iters=49" in overrides  # iterations 0..49: 50 optimizer steps
    if NANOGPT:
        defaults = (Path(NANOGPT) / "train.py").read_text()
        for override in overrides:
            key = override[2:].split("=")[0]
            assert re.search(rf"^{key} = ", defaults, re.M), key


def test_a_checkout_without_train_py_is_refused_in_one_line(tmp_path: Path, some_text: Path) -> None:
    done = bench("--data", str(some_text), "--nanogpt", str(tmp_path), timeout=120)
    assert done.returncode == 2
    assert "no train.py there" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_gpu_configurations_are_ones_the_engine_takes() -> None:
    # the GPU side cannot run here: its overrides are checked as the engine parses them
    from engine.config import load_preset

    gpu = load_preset("gpt2-small", load_bench().gpt2_small(True, 8).cockpit())
    assert (gpu.train.device, gpu.train.dtype, gpu.train.compile) == ("cuda", "bfloat16", True)
    assert (gpu.model.n_layer, gpu.model.n_embd, gpu.model.block_size, gpu.train.batch_size) == (12, 768, 1024, 16)
    assert gpu.tokens_per_step == 16 * 1024 * 8
    bench = load_bench()
    full = bench.full_recompute_value()
    big = load_preset("local-300m", [*bench.local_300m(True, 4).cockpit(model=False), f"model.grad_checkpoint={full}"])
    assert (big.model.n_layer, big.model.n_embd, big.train.batch_size, big.train.grad_accum) == (20, 1024, 16, 4)
    assert str(big.model.grad_checkpoint).lower() in ("full", "true")


def breakdown(step: int, activations: int, measured: bool = True) -> dict[str, object]:
    return {"step": step, "weights": 100, "gradients": 100, "optimizer": 200, "activations": activations,
            "cache": 50, "activations_measured": measured}  # fmt: skip


def test_the_measured_peak_leaves_out_step_1_when_a_later_breakdown_exists() -> None:
    peak_of = load_bench().memory_peak
    # step 1 counts the optimizer state it created on top of the backward peak: too high
    assert peak_of([breakdown(1, 900), breakdown(57, 600), breakdown(130, 650)]) == (1050, 450, [])
    peak, reserved, notes = peak_of([breakdown(1, 900)])
    assert (peak, reserved) == (1300, 450) and "only step 1" in notes[0]
    assert peak_of([breakdown(1, 900, measured=False)])[2] == ["peak estimated, not measured (not CUDA)"]
    assert peak_of([]) == (None, None, ["no memory breakdown"])
