"""The pre-flight memory plan: will this configuration fit on this device, and if not, what to change.

Weights, gradients and optimizer state are computed exactly from the parameter shapes (the
model is built on the meta device, so nothing is allocated). Activations use the estimate in
`engine.memory`. Fixes are tried one at a time on top of the configuration, cheapest first.

Under torchrun the plan is per device: FSDP divides weights, gradients and optimizer state by
the world size and adds the all-gathered working set; DDP divides nothing and adds its gradient
buckets. Each rank's micro-batch, and so its activations, is the single process's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from math import prod

import torch

from engine.config import ConfigError, RunConfig
from engine.memory import activation_bytes_estimate, layer_activation_bytes
from engine.model import GPT
from engine.parallel import FSDP_OPTIMIZERS

GIB = 1024**3
CUDA_OVERHEAD = int(0.6 * GIB)  # CUDA context, cuBLAS workspaces and kernels: not torch tensors
CPU_OVERHEAD = int(0.35 * GIB)  # the Python process with torch loaded
ALLOCATOR_SLACK = 0.05  # fragmentation in the caching allocator, as a share of the tensors
MIN_DEVICE_MEMORY = 1024**2  # below this, --device-memory is a typo (0, or 24 meant as 24GB)
PLAN_MODES = ("single", "ddp", "fsdp")  # engine.parallel's ParallelPlan.mode


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


def shard_shapes(
    shapes: list[tuple[str, tuple[int, ...]]], world_size: int
) -> list[tuple[str, tuple[int, ...]]]:
    """Each rank's share of every parameter under FSDP2: split on dim 0 into `world_size`
    chunks of ceil(rows / world_size) rows; every rank allocates that largest chunk (padded),
    so this is exact for each rank's sharded weights and a rank-0 maximum for the rest."""
    return [
        (name, (-(-shape[0] // world_size), *shape[1:]) if shape else shape)
        for name, shape in shapes
    ]


def unsharded_bytes(shapes: list[tuple[str, tuple[int, ...]]], gather_bytes: int) -> int:
    """FSDP's transient working set at the start of backward (the activations' peak), in the
    all-gather dtype (the compute dtype under FSDP's mixed precision, fp32 without it).

    An estimate for `fully_shard` on each block and on the root: the root group (embeddings,
    final norm, the tied head) stays whole from forward to the end of backward (FSDP2's default
    for the root), with its gradient (the head's comes first in backward and waits for the root's
    reduce-scatter at the end); two blocks whole (the one computing and the next, prefetched);
    and the computing block's whole gradient before its reduce-scatter. Not counted: the
    collectives' own buffers, and an fp32 copy of a block's gradient when reduce_dtype is fp32.
    """
    root = sum(prod(s) for name, s in shapes if not name.startswith("blocks."))
    block = sum(prod(s) for name, s in shapes if name.startswith("blocks.0."))
    return gather_bytes * (2 * root + 3 * block)


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
    world_size: int = 1
    parallel: str = "single"  # "single", "ddp" or "fsdp"
    buckets: int = 0  # DDP: the gradient buckets (two copies of the gradients at their peak)
    unsharded: int = 0  # FSDP: the all-gathered parameters and gradients being computed

    @property
    def total(self) -> int:
        return (
            self.weights
            + self.gradients
            + self.optimizer
            + self.activations
            + self.overhead
            + self.buckets
            + self.unsharded
        )

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.total <= self.capacity

    def as_dict(self) -> dict[str, int]:
        names = ("weights", "gradients", "optimizer", "activations", "overhead")
        if self.parallel == "ddp":
            names += ("buckets",)
        elif self.parallel == "fsdp":
            names += ("unsharded",)
        values = {name: getattr(self, name) for name in names}
        if self.parallel != "single":  # a single process's record is as it always was
            values["world_size"] = self.world_size
        return {**values, "total": self.total, "capacity": self.capacity or 0}

    def rows(self) -> list[tuple[str, int]]:
        rows = [
            ("weights", self.weights),
            ("gradients", self.gradients),
            ("optimizer state", self.optimizer),
            ("activations", self.activations),
        ]
        if self.parallel == "ddp":
            rows.append(("DDP grad buckets", self.buckets))
        elif self.parallel == "fsdp":
            rows.append(("all-gathered", self.unsharded))
        return [*rows, ("overhead", self.overhead)]


def compute_dtype(cfg: RunConfig, device_type: str) -> torch.dtype:
    if cfg.train.dtype == "auto":
        return torch.bfloat16 if device_type == "cuda" else torch.float32
    return getattr(torch, cfg.train.dtype)


def check_plan_mode(world_size: int, parallel: str) -> None:
    if parallel not in PLAN_MODES:
        raise ValueError(f"parallel {parallel!r}: expected one of {', '.join(PLAN_MODES)}")
    if world_size < 1 or (parallel == "single") != (world_size == 1):
        raise ValueError(f"parallel {parallel!r} at world size {world_size}")


def plan_memory(
    cfg: RunConfig,
    vocab_size: int,
    device_type: str,
    capacity: int | None,
    world_size: int = 1,
    parallel: str = "single",
) -> MemoryPlan:
    """Peak memory of one device of the run: `parallel` is engine.parallel's mode ("single"
    for one process, else "ddp" or "fsdp" over `world_size` ranks)."""
    check_plan_mode(world_size, parallel)
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
    if value_bytes == 2 and parallel != "fsdp":
        # autocast's 16-bit copies of the weights, kept for backward (FSDP's mixed precision
        # all-gathers the weights in 16 bit instead: counted in `unsharded`)
        activations += 2 * n_params
    # each rank's own parameters: under FSDP its shard of every one
    held = shard_shapes(shapes, world_size) if parallel == "fsdp" else shapes
    n_held = sum(prod(s) for _, s in held)
    weights = 4 * n_held  # master weights stay fp32 under autocast
    gradients = 4 * n_held
    optimizer = optimizer_state_bytes(held, cfg.optim.name)
    # DDP (torch's defaults: gradient_as_bucket_view=False, 25 MiB buckets) copies every
    # gradient into flat bucket tensors for the all-reduce: the gradients' size again. Torch
    # rebuilds its buckets once, in the order the gradients arrived, and the step where it does
    # (the second) peaks one more such copy higher: measured on an H200 (local-300m, bf16):
    # +1.22 GB over a single process at step 3, +2.43 GB at step 2. The plan keeps that peak.
    buckets = 2 * gradients if parallel == "ddp" else 0
    unsharded = unsharded_bytes(shapes, value_bytes) if parallel == "fsdp" else 0
    tensors = weights + gradients + optimizer + activations + buckets + unsharded
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
        device_type,
        capacity,
        n_params,
        weights,
        gradients,
        optimizer,
        activations,
        overhead,
        world_size,
        parallel,
        buckets,
        unsharded,
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
    cfg: RunConfig,
    vocab_size: int,
    device_type: str,
    capacity: int | None,
    world_size: int = 1,
    parallel: str = "single",
) -> list[Fix]:
    """Changes that lower peak memory, cheapest in speed first, each with its new plan (in the
    same world and mode; a DDP world is also offered FSDP)."""

    def plan(trial: RunConfig, mode: str = parallel) -> MemoryPlan:
        return plan_memory(trial, vocab_size, device_type, capacity, world_size, mode)

    fixes: list[Fix] = []
    t, m = cfg.train, cfg.model
    # 1. smaller micro-batches, more accumulation: the same effective batch, same result
    batch = t.batch_size
    while batch % 2 == 0:
        batch //= 2
        accum = t.grad_accum * (t.batch_size // batch)
        trial = _with(cfg, train={"batch_size": batch, "grad_accum": accum})
        smaller = plan(trial)
        fixes.append(
            Fix(
                f"micro-batch {batch} x {accum} accumulation (same effective batch)",
                (f"train.batch_size={batch}", f"train.grad_accum={accum}"),
                smaller,
            )
        )
        if smaller.fits is not False:
            break
    if parallel == "ddp" and cfg.optim.name in FSDP_OPTIMIZERS:
        fixes.append(
            Fix(
                f"shard with FSDP over the {world_size} ranks",
                ("train.parallel=fsdp",),
                plan(cfg, "fsdp"),
            )
        )
    if not m.grad_checkpoint:
        trial = _with(cfg, model={"grad_checkpoint": True})
        fixes.append(
            Fix(
                "gradient checkpointing (about 30% slower steps)",
                ("model.grad_checkpoint=true",),
                plan(trial),
            )
        )
    if device_type == "cuda" and compute_dtype(cfg, device_type) == torch.float32:
        trial = _with(cfg, train={"dtype": "bfloat16"})
        fixes.append(
            Fix(
                "bf16 autocast",
                ("train.dtype=bfloat16",),
                plan(trial),
            )
        )
    for name, why in (
        ("adafactor", "factored second moments"),
        ("lion", "one state tensor"),
        ("muon", "one state tensor for matrices"),
    ):
        if parallel == "fsdp" and name not in FSDP_OPTIMIZERS:
            continue  # needs whole matrices (engine.parallel refuses it under FSDP)
        if name != cfg.optim.name and optimizer_state_bytes(
            param_shapes(cfg, vocab_size), name
        ) < optimizer_state_bytes(param_shapes(cfg, vocab_size), cfg.optim.name):
            trial = _with(cfg, optim={"name": name})
            fixes.append(
                Fix(
                    f"optimizer {name} ({why})",
                    (f"optim.name={name}",),
                    plan(trial),
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


def check_fits(
    cfg: RunConfig,
    vocab_size: int,
    device_type: str,
    capacity: int,
    world_size: int = 1,
    parallel: str = "single",
) -> MemoryPlan:
    """The plan (per device, for `parallel` over `world_size` ranks); a ConfigError naming the
    best fix if the estimate exceeds the capacity."""
    plan = plan_memory(cfg, vocab_size, device_type, capacity, world_size, parallel)
    if plan.fits:
        return plan
    fixes = suggest_fixes(cfg, vocab_size, device_type, capacity, world_size, parallel)
    fitting = [f for f in fixes if f.plan.fits]
    hint = (
        f"try {' '.join('--set ' + o for o in fitting[0].overrides)} (estimate {format_bytes(fitting[0].plan.total)})"
        if fitting
        else "use a smaller model or micro-batch"
    )
    where, command = device_type, "`cockpit plan`"
    if parallel != "single":
        where = f"each {device_type} device ({parallel} over {world_size} ranks)"
        command = f"`cockpit plan --nproc {world_size} --parallel {parallel}`"
    raise ConfigError(
        f"{cfg.name} will not fit: estimated peak {format_bytes(plan.total)} of {format_bytes(capacity)} "
        f"on {where}; {hint}; {command} lists every option"
    )


def format_bytes(n: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def world_lines(cfg: RunConfig, plan: MemoryPlan) -> list[str]:
    """How a distributed plan divides the work and the memory (nothing for one process)."""
    n = plan.world_size
    if plan.parallel == "single":
        return []
    t = cfg.train
    lines = [
        f"world: {n} ranks ({plan.parallel}), each {t.grad_accum // n} of the {t.grad_accum} "
        f"micro-batches of {t.batch_size} x {cfg.model.block_size} tokens: {cfg.tokens_per_step:,} "
        "tokens per optimizer step across the world, the same as one process"
    ]
    if plan.parallel == "fsdp":
        lines.append(
            f"per device: 1/{n} of the weights, gradients and optimizer state (every parameter "
            f"split on its first dimension, rows rounded up to a multiple of {n}); optimizers "
            f"that shard: {', '.join(FSDP_OPTIMIZERS)}"
        )
    else:
        lines.append(
            "per device: a whole replica of the weights, gradients and optimizer state, "
            "and DDP's gradient buckets"
        )
    return lines


def estimate_notes(cfg: RunConfig, plan: MemoryPlan) -> list[str]:
    """What the distributed rows estimate rather than count."""
    if plan.parallel == "ddp":
        return [
            "DDP grad buckets: two copies of the gradients' size, an estimate: torch's default "
            "buckets hold a copy of every gradient for the all-reduce, and at the second step, "
            "where torch rebuilds them, the old set is still held; NCCL's own buffers are not counted"
        ]
    if plan.parallel == "fsdp":
        dtype = repr(compute_dtype(cfg, plan.device)).removeprefix("torch.")
        return [
            f"all-gathered: an estimate, in {dtype}: the root (embeddings, final norm, head) whole "
            "with its gradient, two blocks whole (the one computing, the next prefetched) and one "
            "block's gradient; the collectives' own buffers are not counted"
        ]
    return []


def format_plan(cfg: RunConfig, plan: MemoryPlan, fixes: list[Fix]) -> str:
    cap = plan.capacity
    where = (
        plan.device
        if plan.parallel == "single"
        else f"each of {plan.world_size} {plan.device} devices"
    )
    lines = [
        f"{cfg.name}: {plan.n_params / 1e6:.1f}M parameters, micro-batch {cfg.train.batch_size} x {cfg.model.block_size} tokens"
        f" x {cfg.train.grad_accum} accumulation, {cfg.optim.name}, {compute_dtype(cfg, plan.device).__repr__().removeprefix('torch.')}"
        f"{', gradient checkpointing' if cfg.model.grad_checkpoint else ''} on {where}",
        *world_lines(cfg, plan),
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
        per = "" if plan.parallel == "single" else " per device"
        lines += ["", f"{verdict}: {format_bytes(plan.total)} of {format_bytes(cap)}{per}"]
    if notes := estimate_notes(cfg, plan):
        lines += ["", *notes]
    if fixes and (cap is None or not plan.fits):
        lines += ["", "to lower peak memory (each on its own; pass as --set):"]
        for fix in fixes:
            mark = "fits" if fix.plan.fits else ("" if fix.plan.fits is None else "still too big")
            lines.append(
                f"  {fix.description:<58} {format_bytes(fix.plan.total):>11}  {mark:<13} {' '.join('--set ' + o for o in fix.overrides)}"
            )
    return "\n".join(lines)
