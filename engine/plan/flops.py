"""FLOPs per token, peak FLOP/s of the device, and model FLOPs utilisation (MFU).

FLOPs per token = 6N + 12*L*H*Q*T (Chowdhery et al. 2022, PaLM, appendix B), where
- N counts every parameter except the position embeddings: the token embedding is counted
  because, tied to the output head, it is a vocab x d matrix multiply in every forward pass;
- 12*L*H*Q*T is attention's score and value products (L layers, H heads, Q head size,
  T context), forward and backward, NOT halved for causal masking: the same convention as
  nanoGPT's `estimate_mfu`, so figures compare with its and with PaLM's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from engine.config.run_config import ModelConfig

TERA = 1e12

# Dense peak TFLOP/s from the vendors' datasheets (no sparsity): (bf16/fp16 tensor cores with
# fp32 accumulate, plain fp32). Matched in order against the device name, so "L40S" precedes "L4".
PEAK_TFLOPS: tuple[tuple[str, float, float], ...] = (
    ("H200", 989.0, 67.0),
    ("H100 PCIe", 756.0, 51.0),
    ("H100", 989.0, 67.0),
    ("A100", 312.0, 19.5),
    ("L40S", 362.0, 91.6),
    ("L40", 181.0, 90.5),
    ("L4", 121.0, 30.3),
    ("A10G", 70.0, 31.2),
    ("A10", 125.0, 31.2),
    ("RTX 4090", 165.2, 82.6),
    ("RTX 3090", 71.0, 35.6),
    ("V100", 125.0, 15.7),
    ("T4", 65.0, 8.1),
)


def flops_per_token(n_params_non_pos: int, cfg: ModelConfig) -> float:
    """Training FLOPs (forward + backward) per token; see the module docstring for N."""
    head_dim = cfg.n_embd // cfg.n_head
    return 6 * n_params_non_pos + 12 * cfg.n_layer * cfg.n_head * head_dim * cfg.block_size


@dataclass(frozen=True)
class Peak:
    flops: float  # FLOP/s
    source: str  # "table: H100" or "measured: 1024^3 fp32 matmul"

    @property
    def label(self) -> str:
        return f"{self.flops / TERA:.3g} TFLOP/s ({self.source})"


def table_peak(device_name: str, dtype: torch.dtype) -> Peak | None:
    """The datasheet peak for a known GPU, or None."""
    for key, half, single in PEAK_TFLOPS:
        if key.lower() in device_name.lower():
            low_precision = dtype in (torch.bfloat16, torch.float16)
            value = half if low_precision else single
            return Peak(value * TERA, f"table: {key} {'bf16' if low_precision else 'fp32'}")
    return None


def measure_peak(
    device: torch.device,
    dtype: torch.dtype,
    size: int = 1024,
    seconds: float = 0.3,
    repeats: int = 6,
) -> Peak:
    """Matmul FLOP/s on this device: the ceiling when no datasheet figure is known.

    The best of `repeats` short windows, not one long average: load from another thread or
    process only ever slows a window down, so the fastest one is closest to what the device can
    do (one 0.3 s average read 98, 59 and 49 GFLOP/s on the same idle-then-busy CPU).
    """
    g = torch.Generator(device=device).manual_seed(0)  # never touch the run's global RNG
    a = torch.randn(size, size, device=device, dtype=dtype, generator=g)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=g)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    a @ b  # warm up kernels and thread pools
    sync()
    # a GPU queues matmuls: sync every few so the clock measures work, not queueing
    per_sync = 4 if device.type == "cuda" else 1
    window = seconds / max(repeats, 1)
    rates = [
        _window_rate(lambda: a @ b, sync, 2 * size**3, window, per_sync)
        for _ in range(max(repeats, 1))
    ]
    name = str(dtype).removeprefix("torch.")
    return Peak(
        max(rates), f"measured: best of {len(rates)} {size}^3 {name} matmuls on {device.type}"
    )


def _window_rate(
    matmul: Callable[[], Any], sync: Callable[[], Any], flops: float, seconds: float, per_sync: int
) -> float:
    """FLOP/s of `matmul` (worth `flops`) repeated for at least `seconds`."""
    count, start = 0, time.perf_counter()
    while True:
        matmul()
        count += 1
        if count % per_sync == 0:
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return flops * count / elapsed


def device_peak(device: torch.device, dtype: torch.dtype) -> Peak:
    if device.type == "cuda":
        found = table_peak(torch.cuda.get_device_name(device), dtype)
        if found is not None:
            return found
    return measure_peak(device, dtype)


def peak_meter(
    device: torch.device, dtype: torch.dtype, on_change: Callable[[str], None] | None = None
) -> PeakMeter:
    """The device's peak (datasheet, else measured) in a meter that corrects a measured one."""
    peak = device_peak(device, dtype)
    if peak.source.startswith("table"):
        return PeakMeter(peak)
    return PeakMeter(peak, lambda: measure_peak(device, dtype), on_change=on_change)


def mfu(tokens_per_s: float, flops_per_tok: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s as a fraction of the peak, at most 1.

    Above 1 the peak is wrong, not the model faster than the device: `PeakMeter` then raises
    the peak; the cap keeps any other caller from reporting an impossible figure.
    """
    if peak_flops <= 0 or not math.isfinite(tokens_per_s):
        return 0.0
    return min(tokens_per_s * flops_per_tok / peak_flops, 1.0)


class PeakMeter:
    """The peak MFU is measured against, corrected while the run goes on.

    A measured peak can only have been deflated (by load while it was taken). When the model's
    own FLOP/s exceeds it, the device is measured again and the peak becomes the best of the old
    figure, the new measurement and what the model just did (which the device evidently can
    do), so MFU never reads above 100%. A re-measurement costs `measure_peak`'s 0.3 s, taken
    between steps and kept out of the throughput; they are spaced `remeasure_every_s` apart,
    doubling each time, and in between the peak just follows the model's rate. A datasheet
    peak (`remeasure=None`) is not second-guessed: the figure is capped at 100%.
    `on_change(message)` hears each correction of 10% or more (the trainer records it as an
    info alert); smaller ones are noise in the throughput, not news.
    """

    ANNOUNCE_RATIO = 1.1

    def __init__(
        self,
        peak: Peak,
        remeasure: Callable[[], Peak] | None = None,
        *,
        on_change: Callable[[str], None] | None = None,
        remeasure_every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.peak = peak
        self.remeasurements = 0
        self._remeasure = remeasure
        self._on_change = on_change
        self._every_s = remeasure_every_s
        self._clock = clock
        self._next_at = -math.inf  # the first re-measurement may run at once
        self._announced = peak.flops

    def mfu(self, tokens_per_s: float, flops_per_tok: float) -> float:
        """MFU of this throughput (0..1), correcting the peak first if the throughput beats it."""
        achieved = tokens_per_s * flops_per_tok
        if self._remeasure is not None and math.isfinite(achieved) and achieved > self.peak.flops:
            self._correct(achieved)
        return mfu(tokens_per_s, flops_per_tok, self.peak.flops)

    def _correct(self, achieved: float) -> None:
        assert self._remeasure is not None
        best, source = self.peak.flops, self.peak.source
        if self._clock() >= self._next_at:
            fresh = self._remeasure()
            self.remeasurements += 1
            self._next_at = self._clock() + self._every_s * 2 ** (self.remeasurements - 1)
            if fresh.flops > best:
                best, source = fresh.flops, fresh.source
        if achieved > best:
            best = achieved
            source = source.split(" (")[0] + " (raised to the model's own rate)"
        self.peak = Peak(best, source)
        if self._on_change is not None and best >= self._announced * self.ANNOUNCE_RATIO:
            self._on_change(
                f"MFU peak corrected: {self._announced / 1e9:.3g} -> {best / 1e9:.3g} GFLOP/s "
                f"(the model ran at {achieved / 1e9:.3g}; {source})"
            )
            self._announced = best
