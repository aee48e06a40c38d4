"""FLOPs per token, peak FLOP/s of the device, and model FLOPs utilisation (MFU).

FLOPs per token = 6N + 12*L*H*Q*T (PaLM, appendix B): N counts every parameter but the position
and value embeddings (tables looked up, never multiplied; the tied token embedding is the head's
matmul), and attention's 12*L*H*Q*T is not halved for causal masking, as nanoGPT's `estimate_mfu`.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from engine.config.run_config import ModelConfig
from engine.model.gpt import padded_vocab_size

TERA = 1e12


@dataclass(frozen=True)
class DatasheetPeak:
    """One GPU's dense peaks (TFLOP/s, no sparsity) and how its device name is recognised."""

    part: str  # printed in the source: "table: H100 SXM bf16"
    pattern: str  # searched for in the lower-cased torch.cuda.get_device_name
    tensor16: float  # bf16/fp16 on tensor cores, fp32 accumulate (what autocast matmuls use)
    tf32: float | None  # fp32 matmuls on TF32 tensor cores (None: the part has none)
    fp32: float  # plain fp32 on the CUDA cores
    bf16: bool = True  # False: no bf16 tensor cores (Volta, Turing), so bf16 is fp32's figure
    # float8 tensor cores (compute capability 8.9 and up: Ada, Hopper, Blackwell): dense FP8 at
    # twice the dense BF16/FP16 figure, as each of these datasheets gives it (the L40S's 733 is
    # 1.2% above twice its 362.05; the lower figure is kept)
    fp8: bool = False

    @property
    def tensor8(self) -> float | None:
        """Dense FP8 TFLOP/s, None without float8 tensor cores."""
        return 2 * self.tensor16 if self.fp8 else None


# NVIDIA's datasheets mostly print tensor figures "with sparsity" (2:4 structured sparsity, which
# dense training never uses): those are halved here, and the comment says so. GeForce cards
# accumulate in fp32 at half their fp16-accumulate rate (the headline figure); a matmul in
# PyTorch accumulates in fp32, so their fp32-accumulate figure is the one here. Searched in
# order, most specific first (H100 NVL and PCIe before the H100 SXM, GB200 before B200); the
# patterns match whole words, so an L4 is never an L40, an A10 never an A100.
PEAK_TFLOPS: tuple[DatasheetPeak, ...] = (
    # NVIDIA H200 Tensor Core GPU datasheet, H200 NVL: BF16 1,671*, TF32 835* (*: with sparsity,
    # halved), FP32 60
    DatasheetPeak("H200 NVL", r"\bh200\b.*\bnvl\b", 835.5, 417.5, 60.0, fp8=True),
    # H200 datasheet, H200 SXM: BF16 1,979*, TF32 989* (halved), FP32 67
    DatasheetPeak("H200 SXM", r"\bh200\b", 989.5, 494.5, 67.0, fp8=True),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 NVL (per GPU): BF16 1,671*, TF32 835* (halved),
    # FP32 60
    DatasheetPeak("H100 NVL", r"\bh100\b.*\bnvl\b", 835.5, 417.5, 60.0, fp8=True),
    # H100 datasheet, H100 PCIe: BF16 1,513*, TF32 756* (halved), FP32 51
    DatasheetPeak("H100 PCIe", r"\bh100\b.*\bpcie\b", 756.5, 378.0, 51.0, fp8=True),
    # H100 datasheet, H100 SXM: BF16 1,979*, TF32 989* (halved), FP32 67 ("H100 80GB HBM3" names
    # the SXM part)
    DatasheetPeak("H100 SXM", r"\bh100\b", 989.5, 494.5, 67.0, fp8=True),
    # NVIDIA GB200 NVL72 datasheet, per Blackwell GPU: FP16/BF16 5 PF*, TF32 2.5 PF* (halved),
    # FP32 80
    DatasheetPeak("GB200", r"\bgb200\b", 2500.0, 1250.0, 80.0, fp8=True),
    # NVIDIA HGX B200 datasheet, per GPU: FP16/BF16 4.5 PF*, TF32 2.2 PF* (halved), FP32 75
    DatasheetPeak("B200", r"\bb200\b", 2250.0, 1100.0, 75.0, fp8=True),
    # NVIDIA A100 Tensor Core GPU datasheet (40 and 80 GB, SXM and PCIe alike): BF16 312, TF32 156
    # dense (624* / 312* with sparsity), FP32 19.5
    DatasheetPeak("A100 SXM", r"\ba100\b.*\bsxm", 312.0, 156.0, 19.5),
    DatasheetPeak("A100 PCIe", r"\ba100\b.*\bpcie\b", 312.0, 156.0, 19.5),
    DatasheetPeak("A100", r"\ba100\b", 312.0, 156.0, 19.5),
    # NVIDIA L40S datasheet: BF16 362.05 | 733*, TF32 183 | 366*, FP32 91.6
    DatasheetPeak("L40S", r"\bl40s\b", 362.05, 183.0, 91.6, fp8=True),
    # NVIDIA L40 datasheet: BF16 181.05 | 362.1*, TF32 90.5 | 181*, FP32 90.5
    DatasheetPeak("L40", r"\bl40\b", 181.05, 90.5, 90.5, fp8=True),
    # NVIDIA L4 datasheet (sparse figures only): BF16 242*, TF32 120* (halved), FP32 30.3
    DatasheetPeak("L4", r"\bl4\b", 121.0, 60.0, 30.3, fp8=True),
    # A10G: AWS's part (G5), no NVIDIA datasheet published; 80 SMs at 1.71 GHz give FP32 35, and
    # its tensor cores accumulate fp32 at the GeForce rate: BF16 70, TF32 35 (as AWS users quote)
    DatasheetPeak("A10G", r"\ba10g\b", 70.0, 35.0, 35.0),
    # NVIDIA A10 datasheet: BF16 125 | 250*, TF32 62.5 | 125*, FP32 31.2
    DatasheetPeak("A10", r"\ba10\b", 125.0, 62.5, 31.2),
    # NVIDIA RTX Blackwell GPU architecture whitepaper, GeForce RTX 5090: FP16/BF16 with FP32
    # accumulate 209.5 dense (419 with FP16 accumulate), TF32 104.8 dense, FP32 104.8 (not the
    # 5090 D)
    DatasheetPeak("RTX 5090", r"\brtx 5090\b(?! d\b)", 209.5, 104.8, 104.8, fp8=True),
    # NVIDIA RTX PRO 6000 Blackwell Max-Q datasheet: 3,511 AI TOPS (FP4, sparse) = BF16 438.9 dense
    # (/8: sparsity, FP8, FP16), TF32 half that, FP32 110
    DatasheetPeak(
        "RTX PRO 6000 Blackwell Max-Q",
        r"\brtx pro 6000\b.*\bmax.q\b",
        438.9,
        219.4,
        110.0,
        fp8=True,
    ),
    # RTX PRO 6000 Blackwell Workstation Edition datasheet: 4,000 AI TOPS (FP4, sparse) = BF16 500
    # dense (a professional card: full-rate fp32 accumulate), TF32 250, FP32 125; the Server
    # Edition, clocked a little lower, is read against these figures
    DatasheetPeak("RTX PRO 6000 Blackwell", r"\brtx pro 6000\b", 500.0, 250.0, 125.0, fp8=True),
    # NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: FP16/BF16 with FP32 accumulate
    # 165.2 | 330.4*, TF32 82.6 | 165.2*, FP32 82.6 (not the 4090 D)
    DatasheetPeak("RTX 4090", r"\brtx 4090\b(?! d\b)", 165.2, 82.6, 82.6, fp8=True),
    # NVIDIA Ampere GA102 GPU architecture whitepaper, GeForce RTX 3090: FP16/BF16 with FP32
    # accumulate 71 | 142*, TF32 35.6 | 71*, FP32 35.6 (not the 3090 Ti)
    DatasheetPeak("RTX 3090", r"\brtx 3090\b(?! ti\b)", 71.0, 35.6, 35.6),
    # GA102 whitepaper / NVIDIA RTX A6000 datasheet: BF16 154.8 | 309.7*, TF32 77.4 | 154.8*,
    # FP32 38.7
    DatasheetPeak("RTX A6000", r"\brtx a6000\b", 154.8, 77.4, 38.7),
    # NVIDIA V100 Tensor Core GPU datasheet: tensor (fp16) 130 / 125 / 112, FP32 16.4 / 15.7 / 14
    # for V100S PCIe, SXM2, PCIe; no TF32, no bf16 tensor cores
    DatasheetPeak("V100S PCIe", r"\bv100s\b", 130.0, None, 16.4, bf16=False),
    DatasheetPeak("V100 SXM2", r"\bv100\b.*\bsxm", 125.0, None, 15.7, bf16=False),
    DatasheetPeak("V100 PCIe", r"\bv100\b.*\bpcie\b", 112.0, None, 14.0, bf16=False),
    # NVIDIA T4 datasheet: mixed precision (FP16/FP32) 65, FP32 8.1; no TF32, no bf16 tensor cores
    DatasheetPeak("T4", r"\bt4\b", 65.0, None, 8.1, bf16=False),
)


def matmul_params(n_params: int, cfg: ModelConfig, vocab_size: int) -> int:
    """N of `flops_per_token` from a count of every parameter (a memory plan's `n_params`) of
    a model for the tokenizer's `vocab_size`: less the position embedding and the value
    embeddings' tables (the padded vocabulary's rows each), as `GPT.num_params()`."""
    lookups = cfg.block_size if cfg.pos_emb == "learned" else 0
    lookups += cfg.value_embeds * padded_vocab_size(vocab_size, cfg.vocab_multiple)
    return n_params - lookups * cfg.n_embd


def flops_per_token(n_params_non_pos: int, cfg: ModelConfig) -> float:
    """Training FLOPs (forward + backward) per token; see the module docstring for N
    (`GPT.num_params()`, or `matmul_params` of a count of every parameter)."""
    head_dim = cfg.n_embd // cfg.n_head
    return 6 * n_params_non_pos + 12 * cfg.n_layer * cfg.n_head * head_dim * cfg.block_size


def flops_per_token_at(flops_per_block_token: float, cfg: ModelConfig, seq_len: int) -> float:
    """`flops_per_token` of a model (`flops_per_block_token`, at cfg.block_size) for sequences
    of `seq_len` tokens (a sequence-length warmup's): attention's part is in proportion to the
    tokens each one attends to, the rest is the same."""
    head_dim = cfg.n_embd // cfg.n_head
    return flops_per_block_token - 12 * cfg.n_layer * cfg.n_head * head_dim * (
        cfg.block_size - seq_len
    )


def float8_flop_share(cfg: ModelConfig, padded_vocab: int, flops_per_tok: float) -> float:
    """The share of a token's training FLOPs (`flops_per_token`) that train.float8 runs in
    float8: 6 per weight of the blocks' MLPs (8 * n_embd^2 each) and of the head
    (n_embd * padded_vocab), forward and backward alike."""
    converted = cfg.n_layer * 8 * cfg.n_embd**2 + cfg.n_embd * padded_vocab
    return min(6 * converted / flops_per_tok, 1.0) if flops_per_tok > 0 else 0.0


def mixed_peak(peak16: float, peak8: float, share8: float) -> float:
    """The FLOP/s a step reaches at both peaks when `share8` of its FLOPs run at `peak8` and the
    rest at `peak16`: its FLOPs over the least time they take, F / (F8 / peak8 + F16 / peak16)."""
    return 1.0 / (share8 / peak8 + (1.0 - share8) / peak16)


def float8_table_peak(device_name: str, share8: float) -> Peak | None:
    """A float8 run's datasheet peak: `mixed_peak` of the part's bf16 and fp8 figures with
    `share8` of the FLOPs in float8 (`float8_flop_share`); None for a part not in the table, or
    one without float8 tensor cores."""
    peak16 = table_peak(device_name, torch.bfloat16, tf32=False)
    name = device_name.lower()
    entry = next((e for e in PEAK_TFLOPS if re.search(e.pattern, name)), None)
    if peak16 is None or entry is None or entry.tensor8 is None:
        return None
    flops = mixed_peak(peak16.flops, entry.tensor8 * TERA, share8)
    return Peak(flops, f"table: {entry.part} bf16 + fp8 for {share8:.0%} of the FLOPs")


@dataclass(frozen=True)
class Peak:
    flops: float  # FLOP/s
    source: str  # "table: H100 SXM bf16" or "measured: best of 6 1024^3 float32 matmuls on cpu"

    @property
    def label(self) -> str:
        return f"{self.flops / TERA:.3g} TFLOP/s ({self.source})"


def table_peak(device_name: str, dtype: torch.dtype, *, tf32: bool) -> Peak | None:
    """The datasheet peak of a known GPU for matmuls in `dtype`, or None for an unknown one.

    `tf32`: float32 matmuls run on TF32 tensor cores (the run enables them on CUDA), so a
    float32 run is measured against the TF32 figure; without it, against plain fp32.
    """
    name = device_name.lower()
    if re.search(r"\bmig\b", name):  # a MIG slice has a fraction of the part's SMs: measure it
        return None
    entry = next((e for e in PEAK_TFLOPS if re.search(e.pattern, name)), None)
    if entry is None:
        return None
    if dtype in (torch.bfloat16, torch.float16):
        precision = "bf16" if dtype == torch.bfloat16 else "fp16"
        if dtype == torch.float16 or entry.bf16:
            return Peak(entry.tensor16 * TERA, f"table: {entry.part} {precision}")
        return Peak(entry.fp32 * TERA, f"table: {entry.part} fp32 (no bf16 tensor cores)")
    if tf32 and entry.tf32 is not None:
        return Peak(entry.tf32 * TERA, f"table: {entry.part} tf32")
    return Peak(entry.fp32 * TERA, f"table: {entry.part} fp32")


def fp32_matmul_uses_tf32() -> bool:
    """Whether float32 matmuls on CUDA run on TF32 tensor cores, whichever of torch's settings
    turned them on (allow_tf32, set_float32_matmul_precision, or the newer fp32_precision)."""
    matmul = torch.backends.cuda.matmul
    precision = getattr(matmul, "fp32_precision", "none")  # torch >= 2.9; "none": inherited
    if precision in ("tf32", "ieee"):
        return precision == "tf32"
    try:
        return bool(matmul.allow_tf32)
    except RuntimeError:  # the legacy and the new settings mixed: torch refuses to say
        return False


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


# Measured peaks by (device, dtype, threads): a process that builds several runs (the app's
# preset switch, an ablation or research series in the app, the tests) measures once, not 0.3 s
# at every start; a run that beats the figure corrects its own meter (PeakMeter).
_measured: dict[tuple[torch.device, torch.dtype, int], Peak] = {}


def device_peak(device: torch.device, dtype: torch.dtype, *, tf32: bool | None = None) -> Peak:
    """The datasheet peak of this GPU, else a measured one (once per process for a device,
    dtype and thread count); `tf32` None reads torch's setting."""
    if device.type == "cuda":
        uses_tf32 = fp32_matmul_uses_tf32() if tf32 is None else tf32
        found = table_peak(torch.cuda.get_device_name(device), dtype, tf32=uses_tf32)
        if found is not None:
            return found
    key = (device, dtype, torch.get_num_threads())
    if key not in _measured:
        _measured[key] = measure_peak(device, dtype)
    return _measured[key]


def peak_meter(
    device: torch.device,
    dtype: torch.dtype,
    on_change: Callable[[str], None] | None = None,
    float8_share: float = 0.0,
) -> PeakMeter:
    """The device's peak (datasheet, else measured) in a meter that corrects a measured one.
    `float8_share`: the FLOPs train.float8 = on runs in float8 (`float8_flop_share`), against the
    part's fp8 figure where the table has one (a measured peak is corrected as the run goes)."""
    peak = None
    if float8_share > 0 and device.type == "cuda":
        peak = float8_table_peak(torch.cuda.get_device_name(device), float8_share)
    peak = peak or device_peak(device, dtype)
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

    A measured peak can only be deflated (by load), so when the model's FLOP/s exceeds it the device
    is measured again (0.3 s between steps, spaced `remeasure_every_s` apart, doubling) and the peak
    becomes the best figure seen: MFU never reads above 100%. A datasheet peak (`remeasure=None`)
    is capped instead. `on_change(message)` hears each correction of 10% or more."""

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
