"""The pre-flight memory plan: will this configuration fit on this device, and if not, what to change.

Weights, gradients and optimizer state are computed exactly from the parameter shapes (the
model is built on the meta device, so nothing is allocated). Activations use the estimate in
`engine.memory`. Fixes are tried one at a time on top of the configuration, cheapest first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from math import prod

import torch

from engine.config import ConfigError, RunConfig
from engine.memory import activation_bytes_estimate, layer_activation_bytes
from engine.model import GPT

GIB = 1024**3
CUDA_OVERHEAD = int(0.6 * GIB)  # CUDA context, cuBLAS workspaces and kernels: not torch tensors
CPU_OVERHEAD = int(0.35 * GIB)  # the Python process with torch loaded
ALLOCATOR_SLACK = 0.05  # fragmentation in the caching allocator, as a share of the tensors
MIN_DEVICE_MEMORY = 1024**2  # below this, --device-memory is a typo (0, or 24 meant as 24GB)


def parse_size(text: str) -> int:
    """'24GB', '24 GiB', '80g', '512MB' -> bytes (GB and GiB both mean 1024^3, as GPUs are sold)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)i?b?\s*", text.lower())
    if not m:
        raise ConfigError(f"--device-memory {text!r}: expected a size like 24GB or 80GiB")
    scale = {"": 1, "k": 1024, "m": 1024**2, "g": GIB, "t": 1024**4}[m.group(2)]
    size = int(float(m.group(1)) * scale)
    if size < MIN_DEVICE_MEMORY:  # 0, or bytes meant as GB: a plan against it says nothing
        raise ConfigError(
            f"--device-memory {text!r}: {format_bytes(size)} is no device's memory; "
            "give a size of at least 1 MiB, like 24GB or 80GiB"
        )
    return size


def param_shapes(cfg: RunConfig, vocab_size: int) -> list[tuple[str, tuple[int, ...]]]:
    """Distinct parameters of the model (tied weights once), without allocating them."""
    with torch.device("meta"):
        model = GPT(cfg.model, vocab_size)
    return [(name, tuple(p.shape)) for name, p in model.named_parameters()]


def optimizer_state_bytes(shapes: list[tuple[str, tuple[int, ...]]], optimizer: str) -> int:
    """Bytes of optimizer state for fp32 parameters, matching torch's implementations."""
    total = 0
    for name, shape in shapes:
        n = prod(shape)
        if optimizer == "adamw":
            total += 8 * n + 4  # exp_avg, exp_avg_sq, and a scalar step tensor
        elif optimizer == "lion":
            total += 4 * n
        elif optimizer == "adafactor":
            if len(shape) >= 2:  # factored second moment: one row and one column statistic
                total += 4 * (prod(shape[:-1]) + prod(shape[:-2]) * shape[-1]) + 4
            else:
                total += 4 * n + 4
        elif optimizer == "muon":
            if len(shape) == 2 and name.startswith("blocks."):
                total += 4 * n  # momentum buffer
            else:
                total += 8 * n + 4  # AdamW for embeddings, head and gains
        else:
            raise ValueError(f"unknown optimizer {optimizer!r}")
    return total


@dataclass(frozen=True)
class MemoryPlan:
    device: str
    capacity: int | None
    n_params: int
    weights: int
    gradients: int
    optimizer: int
    activations: int
    overhead: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.overhead

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.total <= self.capacity

    def as_dict(self) -> dict[str, int]:
        names = ("weights", "gradients", "optimizer", "activations", "overhead")
        values = {name: getattr(self, name) for name in names}
        return {**values, "total": self.total, "capacity": self.capacity or 0}

    def rows(self) -> list[tuple[str, int]]:
        return [
            ("weights", self.weights),
            ("gradients", self.gradients),
            ("optimizer state", self.optimizer),
            ("activations", self.activations),
            ("overhead", self.overhead),
        ]


def compute_dtype(cfg: RunConfig, device_type: str) -> torch.dtype:
    if cfg.train.dtype == "auto":
        return torch.bfloat16 if device_type == "cuda" else torch.float32
    return getattr(torch, cfg.train.dtype)


def plan_memory(
    cfg: RunConfig, vocab_size: int, device_type: str, capacity: int | None
) -> MemoryPlan:
    shapes = param_shapes(cfg, vocab_size)
    n_params = sum(prod(s) for _, s in shapes)
    dtype = compute_dtype(cfg, device_type)
    value_bytes = torch.finfo(dtype).bits // 8
    m = cfg.model
    activations = activation_bytes_estimate(
        cfg.train.batch_size,
        m.block_size,
        m.n_embd,
        m.n_head,
        m.n_layer,
        vocab_size,
        value_bytes,
        grad_checkpoint=m.grad_checkpoint,
    )
    if value_bytes == 2:
        activations += 2 * n_params  # autocast's 16-bit copies of the weights, kept for backward
    weights = 4 * n_params  # master weights stay fp32 under autocast
    gradients = 4 * n_params
    optimizer = optimizer_state_bytes(shapes, cfg.optim.name)
    tensors = weights + gradients + optimizer + activations
    fixed = CUDA_OVERHEAD if device_type == "cuda" else CPU_OVERHEAD
    overhead = fixed + int(ALLOCATOR_SLACK * tensors)
    if m.grad_checkpoint and device_type == "cpu":
        # glibc keeps freed activation buffers in its heap, so the process peaks about one block
        # of activations above its live tensors (bench/memory_cpu.py, "process" column). Without
        # checkpointing the fixed overhead's margin covers that; with it, the activations are
        # small, the recomputed blocks' buffers many, and the plan was 19-28% short.
        overhead += layer_activation_bytes(
            cfg.train.batch_size, m.block_size, m.n_embd, m.n_head, value_bytes
        )
    return MemoryPlan(
        device_type, capacity, n_params, weights, gradients, optimizer, activations, overhead
    )


@dataclass(frozen=True)
class Fix:
    description: str
    overrides: tuple[str, ...]
    plan: MemoryPlan


def _with(cfg: RunConfig, **sections: dict) -> RunConfig:
    return replace(
        cfg, **{name: replace(getattr(cfg, name), **values) for name, values in sections.items()}
    )


def suggest_fixes(
    cfg: RunConfig, vocab_size: int, device_type: str, capacity: int | None
) -> list[Fix]:
    """Changes that lower peak memory, cheapest in speed first, each with its new plan."""
    fixes: list[Fix] = []
    t, m = cfg.train, cfg.model
    # 1. smaller micro-batches, more accumulation: the same effective batch, same result
    batch = t.batch_size
    while batch % 2 == 0:
        batch //= 2
        accum = t.grad_accum * (t.batch_size // batch)
        trial = _with(cfg, train={"batch_size": batch, "grad_accum": accum})
        plan = plan_memory(trial, vocab_size, device_type, capacity)
        fixes.append(
            Fix(
                f"micro-batch {batch} x {accum} accumulation (same effective batch)",
                (f"train.batch_size={batch}", f"train.grad_accum={accum}"),
                plan,
            )
        )
        if plan.fits is not False:
            break
    if not m.grad_checkpoint:
        trial = _with(cfg, model={"grad_checkpoint": True})
        fixes.append(
            Fix(
                "gradient checkpointing (about 30% slower steps)",
                ("model.grad_checkpoint=true",),
                plan_memory(trial, vocab_size, device_type, capacity),
            )
        )
    if device_type == "cuda" and compute_dtype(cfg, device_type) == torch.float32:
        trial = _with(cfg, train={"dtype": "bfloat16"})
        fixes.append(
            Fix(
                "bf16 autocast",
                ("train.dtype=bfloat16",),
                plan_memory(trial, vocab_size, device_type, capacity),
            )
        )
    for name, why in (
        ("adafactor", "factored second moments"),
        ("lion", "one state tensor"),
        ("muon", "one state tensor for matrices"),
    ):
        if name != cfg.optim.name and optimizer_state_bytes(
            param_shapes(cfg, vocab_size), name
        ) < optimizer_state_bytes(param_shapes(cfg, vocab_size), cfg.optim.name):
            trial = _with(cfg, optim={"name": name})
            fixes.append(
                Fix(
                    f"optimizer {name} ({why})",
                    (f"optim.name={name}",),
                    plan_memory(trial, vocab_size, device_type, capacity),
                )
            )
    return fixes


def vocab_size_for(cfg: RunConfig, data_path: str | None = None) -> tuple[int, str]:
    """The vocabulary the run will have, and how it was found (no training data is read for BPE)."""
    from engine.data import DataError, prepare

    if cfg.data.tokenizer != "char":
        try:
            import tiktoken

            return tiktoken.get_encoding(cfg.data.tokenizer).n_vocab, cfg.data.tokenizer
        except Exception:
            return (
                50257,
                f"{cfg.data.tokenizer} (assumed GPT-2 size: encoding not available offline)",
            )
    try:
        data = prepare(cfg.data, data_path=data_path)
        return data.tokenizer.vocab_size, "characters of the corpus"
    except DataError:
        return 256, "assumed 256 characters (corpus not available)"


def check_fits(cfg: RunConfig, vocab_size: int, device_type: str, capacity: int) -> MemoryPlan:
    """The plan; a ConfigError naming the best fix if the estimate exceeds the capacity."""
    plan = plan_memory(cfg, vocab_size, device_type, capacity)
    if plan.fits:
        return plan
    fixes = [f for f in suggest_fixes(cfg, vocab_size, device_type, capacity) if f.plan.fits]
    hint = (
        f"try {' '.join('--set ' + o for o in fixes[0].overrides)} (estimate {format_bytes(fixes[0].plan.total)})"
        if fixes
        else "use a smaller model or micro-batch"
    )
    raise ConfigError(
        f"{cfg.name} will not fit: estimated peak {format_bytes(plan.total)} of {format_bytes(capacity)} "
        f"on {device_type}; {hint}; `cockpit plan` lists every option"
    )


def format_bytes(n: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def format_plan(cfg: RunConfig, plan: MemoryPlan, fixes: list[Fix]) -> str:
    cap = plan.capacity
    lines = [
        f"{cfg.name}: {plan.n_params / 1e6:.1f}M parameters, micro-batch {cfg.train.batch_size} x {cfg.model.block_size} tokens"
        f" x {cfg.train.grad_accum} accumulation, {cfg.optim.name}, {compute_dtype(cfg, plan.device).__repr__().removeprefix('torch.')}"
        f"{', gradient checkpointing' if cfg.model.grad_checkpoint else ''} on {plan.device}",
        "",
    ]
    for label, value in plan.rows():
        share = f"{100 * value / cap:5.1f}%" if cap else ""
        lines.append(f"  {label:<16} {format_bytes(value):>11}  {share}")
    total_share = f"{100 * plan.total / cap:5.1f}%" if cap else ""
    lines.append(f"  {'peak (estimate)':<16} {format_bytes(plan.total):>11}  {total_share}")
    if cap:
        lines.append(f"  {'capacity':<16} {format_bytes(cap):>11}")
        verdict = "fits" if plan.fits else "DOES NOT FIT"
        lines += ["", f"{verdict}: {format_bytes(plan.total)} of {format_bytes(cap)}"]
    if fixes and (cap is None or not plan.fits):
        lines += ["", "to lower peak memory (each on its own; pass as --set):"]
        for fix in fixes:
            mark = "fits" if fix.plan.fits else ("" if fix.plan.fits is None else "still too big")
            lines.append(
                f"  {fix.description:<58} {format_bytes(fix.plan.total):>11}  {mark:<13} {' '.join('--set ' + o for o in fix.overrides)}"
            )
    return "\n".join(lines)
