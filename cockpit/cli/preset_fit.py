"""Is a preset far beyond this machine? Its memory plan and the time of one step at the device's
peak, asked before the preset menu starts it (off the UI thread: it uses torch)."""

from __future__ import annotations

import os

from cockpit.figures.durations import fmt_rough_duration
from engine.config import ConfigError

FAR_STEP_S = 60.0  # a preset whose step takes at least this long here is far beyond this machine
BPE_VOCAB = {"r50k_base": 50257, "p50k_base": 50281, "cl100k_base": 100277, "o200k_base": 200019}


def preset_fit_warning(
    preset: str, presets_dir: list[str], known_peak: tuple[str, float] | None = None
) -> str:
    """Why `preset` is far beyond this machine ("" when it is not): its memory plan does not fit, or
    one step takes FAR_STEP_S or more at the device's peak. `known_peak` is (device, FLOP/s) of the
    run on screen, reused on the same kind of device. Uses torch: call it off the UI thread."""
    import torch

    from engine.config import format_bytes, load_preset
    from engine.plan import (
        compute_dtype,
        flops_per_token,
        matmul_params,
        measure_peak,
        plan_memory,
        table_peak,
    )
    from engine.train import device_capacity, select_device

    try:
        cfg = load_preset(preset, [], presets_dir)
        device = select_device(cfg.train.device)
    except ConfigError as e:
        return str(e)
    capacity = device_capacity(device)
    tokenizer = cfg.data.tokenizer
    vocab = 256 if tokenizer == "char" else BPE_VOCAB.get(tokenizer, 50257)
    plan = plan_memory(cfg, vocab, device.type, capacity)
    m = cfg.model
    step_flops = flops_per_token(matmul_params(plan.n_params, m, vocab), m) * cfg.tokens_per_step
    peak = None
    if known_peak is not None and known_peak[0].split(":")[0] == device.type:
        peak = known_peak[1]
    elif device.type == "cuda":
        # the run turns TF32 on for its float32 matmuls on CUDA
        name = torch.cuda.get_device_name(device)
        found = table_peak(name, compute_dtype(cfg, "cuda"), tf32=True)
        peak = found.flops if found is not None else None
    if peak is None:
        peak = measure_peak(device, torch.float32, size=512, seconds=0.2).flops
    step_s = step_flops / peak
    fits = bool(plan.fits)
    if fits and step_s < FAR_STEP_S:
        return ""
    if device.type == "cpu":
        where = f"{os.cpu_count()} CPU cores even at their measured peak ({peak / 1e9:.0f} GFLOP/s)"
    else:
        where = f"{device} even at its peak ({peak / 1e12:.0f} TFLOP/s)"
    memory = f"needs ~{format_bytes(plan.total)} of memory; this machine has {format_bytes(capacity)}"
    text = f"{preset} is far beyond this machine: it {memory}"
    text += "." if fits else " (it does not fit: starting it is refused)."
    if step_s >= FAR_STEP_S:
        text += (
            f" One step ({cfg.tokens_per_step:,} tokens, {step_flops:.1e} FLOPs) takes"
            f" ~{fmt_rough_duration(step_s)} on {where}, {cfg.train.max_steps:,} steps"
            f" ~{fmt_rough_duration(step_s * cfg.train.max_steps)}"
            + (": it is sized for a GPU." if device.type == "cpu" else ".")
        )
    return text
