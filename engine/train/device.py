"""The device a run trains on: which one, in which dtype, how much memory it has, and how much
of a GPU's memory this process holds as the driver sees it.

Each of these facts is worked out here only: the trainer, `cockpit plan`, the app's preset
warning, the memory breakdown and the telemetry all ask this module. torch is imported inside
the functions that need it, because the telemetry (and through it the cockpit's device panel)
uses `process_gpu_memory` and must stay light to import.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import psutil

from engine.config.run_config import ConfigError

if TYPE_CHECKING:
    import torch


def select_device(requested: str) -> torch.device:
    """'auto' picks cuda, then mps, then cpu; an explicit device that is missing is an error."""
    import torch

    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise ConfigError(
            f"train.device: unknown device {requested!r}; use auto, cpu, cuda, cuda:N or mps"
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "train.device: CUDA is not available on this machine; use --set train.device=auto"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(
            "train.device: MPS is not available on this machine; use --set train.device=auto"
        )
    return device


def select_dtype(requested: str, device: torch.device) -> torch.dtype:
    """'auto' is bf16 on GPUs that support it, fp16 on older GPUs, fp32 elsewhere."""
    import torch

    if requested == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
        requested
    ]


def cpu_bfloat16_note(dtype: torch.dtype, device: torch.device) -> str | None:
    """A line for a run in bfloat16 on an x86 CPU that has no bfloat16 arithmetic (AVX512-BF16 or
    AMX): there torch emulates it, slower than float32, where with it a matmul is about twice as
    fast (bench/attention_cpu.py, speedrun-cpu). None when there is nothing to say."""
    import platform

    import torch

    if device.type != "cpu" or dtype != torch.bfloat16:
        return None
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    native = any(
        getattr(torch.cpu, probe, lambda: False)()
        for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    )
    if native:
        return None
    return (
        "train.dtype=bfloat16: this CPU has no bfloat16 arithmetic (AVX512-BF16 or AMX), so it is "
        "emulated and slower than float32; --set train.dtype=float32 trains faster here"
    )


def allow_tf32(device: torch.device) -> None:
    """On CUDA, let fp32 matmuls and convolutions use TF32 tensor cores: several times faster
    on Ampere and newer GPUs, multiplying with 10 of fp32's 23 mantissa bits."""
    if device.type == "cuda":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def autocast_context(
    device: torch.device, dtype: torch.dtype
) -> contextlib.AbstractContextManager[Any]:
    """The context the forward pass runs in: autocast to `dtype`, or nothing at all for fp32."""
    import torch

    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def device_capacity(device: torch.device) -> int:
    """Bytes a run on `device` may use: a GPU's total memory, else the host's RAM (a CPU run,
    and MPS, whose memory is the host's)."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(device).total_memory)
    return int(psutil.virtual_memory().total)


def process_gpu_memory(nvml: Any, handle: Any, pid: int) -> int | None:
    """Bytes process `pid` holds on the GPU behind the NVML `handle` (`nvml`: pynvml or a
    stand-in; its errors propagate). None when unknown: no entry carries the pid (in a
    container NVML reports host pids) or the driver cannot attribute memory (Windows WDDM)."""
    processes = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    used = [p.usedGpuMemory for p in processes or () if p.pid == pid]
    known = [int(u) for u in used if u is not None]
    return sum(known) if known else None
