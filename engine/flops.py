"""FLOPs per token, peak FLOP/s of the device, and model FLOPs utilisation (MFU).

FLOPs per token = 6N + 12*L*H*Q*T (Chowdhery et al. 2022, PaLM, appendix B), where
- N counts every parameter except the position embeddings: the token embedding is counted
  because, tied to the output head, it is a vocab x d matrix multiply in every forward pass;
- 12*L*H*Q*T is attention's score and value products (L layers, H heads, Q head size,
  T context), forward and backward, NOT halved for causal masking: the same convention as
  nanoGPT's `estimate_mfu`, so figures compare with its and with PaLM's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engine.config import ModelConfig

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
    device: torch.device, dtype: torch.dtype, size: int = 1024, seconds: float = 0.3
) -> Peak:
    """Sustained matmul FLOP/s on this device: the ceiling when no datasheet figure is known."""
    g = torch.Generator(device=device).manual_seed(0)  # never touch the run's global RNG
    a = torch.randn(size, size, device=device, dtype=dtype, generator=g)
    b = torch.randn(size, size, device=device, dtype=dtype, generator=g)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    a @ b  # warm up kernels and thread pools
    sync()
    count, start = 0, time.perf_counter()
    while True:
        a @ b
        count += 1
        if count % 4 == 0:
            sync()
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
    flops = 2 * size**3 * count / elapsed
    name = str(dtype).removeprefix("torch.")
    return Peak(flops, f"measured: {size}^3 {name} matmul on {device.type}")


def device_peak(device: torch.device, dtype: torch.dtype) -> Peak:
    if device.type == "cuda":
        found = table_peak(torch.cuda.get_device_name(device), dtype)
        if found is not None:
            return found
    return measure_peak(device, dtype)


def mfu(tokens_per_s: float, flops_per_tok: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s as a fraction of the peak."""
    return tokens_per_s * flops_per_tok / peak_flops if peak_flops > 0 else 0.0
