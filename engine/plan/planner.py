"""The pre-flight memory plan: the peak memory of one device of a run, before anything is allocated.

Weights, gradients and optimizer state are exact (the model is built on the meta device);
activations are estimated. Under torchrun the plan is per device: FSDP divides the states by the
world size and adds its working set; DDP adds its gradient buckets.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

import torch

from engine.config.byte_sizes import GIB
from engine.config.run_config import RunConfig
from engine.model.gpt import GPT, attention_is_fused, padded_vocab_size
from engine.plan.memory import (
    activation_bytes_estimate,
    float8_activation_saving,
    layer_activation_bytes,
    mlp_recompute_saving,
)
from engine.plan.per_rank_memory import (
    check_plan_mode,
    ddp_bucket_bytes,
    shard_shapes,
    unsharded_bytes,
)

CUDA_OVERHEAD = int(0.6 * GIB)  # CUDA context, cuBLAS workspaces and kernels: not torch tensors
CPU_OVERHEAD = int(0.35 * GIB)  # the Python process with torch loaded
ALLOCATOR_SLACK = 0.05  # fragmentation in the caching allocator, as a share of the tensors


def param_shapes(cfg: RunConfig, vocab_size: int) -> list[tuple[str, tuple[int, ...]]]:
    """Distinct parameters of the model (tied weights once), without allocating them; the
    embedding and head have the padded vocabulary's rows for the tokenizer's `vocab_size`."""
    with torch.device("meta"):
        model = GPT(cfg.model, vocab_size, initialise=False)
    return [(name, tuple(p.shape)) for name, p in model.named_parameters()]


def float8_weights(shapes: list[tuple[str, tuple[int, ...]]]) -> int:
    """Weights of the layers train.float8 converts: the blocks' MLPs and the head (a head tied to
    the embedding is named as the embedding, once, in `param_shapes`)."""
    names = dict(shapes)
    head = names.get("lm_head.weight", names.get("wte.weight", ()))
    mlps = sum(prod(s) for n, s in shapes if ".mlp." in n and n.endswith(".weight"))
    return mlps + (prod(head) if head else 0)


def keeps_first_moment(cfg: RunConfig, optimizer: str | None = None) -> bool:
    """Whether `optimizer` (cfg.optim.name when None) keeps a first moment under cfg's settings:
    SGD a momentum buffer when optim.sgd_momentum > 0, Adafactor one when optim.beta1 > 0."""
    name = optimizer or cfg.optim.name
    return cfg.optim.sgd_momentum > 0 if name == "sgd" else cfg.optim.beta1 > 0


def optimizer_state_bytes(
    shapes: list[tuple[str, tuple[int, ...]]], optimizer: str, first_moment: bool = True
) -> int:
    """Bytes of optimizer state for fp32 parameters, matching the implementations' (torch's,
    and cockpit's own in engine.optim). `first_moment`: Adafactor keeps one (optim.beta1 > 0),
    SGD its momentum buffer (optim.sgd_momentum > 0): `keeps_first_moment`."""
    total = 0
    for name, shape in shapes:
        n = prod(shape)
        if optimizer == "adamw":
            total += 8 * n + 4  # exp_avg, exp_avg_sq, and a scalar step tensor
        elif optimizer == "lion":
            total += 4 * n
        elif optimizer == "sgd":
            total += 4 * n if first_moment else 0  # the momentum buffer
        elif optimizer == "adafactor":
            if len(shape) >= 2:  # factored second moment: one row and one column statistic
                total += 4 * (prod(shape[:-1]) + prod(shape[:-2]) * shape[-1]) + 4
            else:
                total += 4 * n + 4
            total += 4 * n if first_moment else 0
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


def plan_memory(
    cfg: RunConfig,
    vocab_size: int,
    device_type: str,
    capacity: int | None,
    world_size: int = 1,
    parallel: str = "single",
) -> MemoryPlan:
    """Peak memory of one device of the run: `parallel` is a ParallelPlan's mode ("single" for
    one process, else "ddp" or "fsdp" over `world_size` ranks)."""
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
        padded_vocab_size(vocab_size, m.vocab_multiple),  # the head computes every padded row
        value_bytes,
        flash_attention=attention_is_fused(device_type, dtype, m.block_size),
        grad_checkpoint=m.grad_checkpoint,
        recompute_blocks=m.recompute_blocks,
        value_embeds=m.value_embeds,
        unet_skips=m.unet_skips,
        whole_head=cfg.train.float8 != "off",
    )
    if value_bytes == 2 and parallel != "fsdp":
        # autocast's 16-bit copies of the weights, kept for backward (FSDP's mixed precision
        # all-gathers the weights in 16 bit instead: counted in `unsharded`); the value
        # embeddings are looked up, in float32, never copied
        looked_up = sum(prod(s) for name, s in shapes if name.startswith("value_embeds."))
        activations += 2 * (n_params - looked_up)
        if cfg.train.float8 != "off":
            activations -= float8_activation_saving(float8_weights(shapes), value_bytes)
    # each rank's own parameters: under FSDP its shard of every one
    held = shard_shapes(shapes, world_size) if parallel == "fsdp" else shapes
    n_held = sum(prod(s) for _, s in held)
    weights = 4 * n_held  # master weights stay fp32 under autocast
    gradients = 4 * n_held
    optimizer = optimizer_state_bytes(held, cfg.optim.name, first_moment=keeps_first_moment(cfg))
    buckets = ddp_bucket_bytes(gradients) if parallel == "ddp" else 0  # copies for the all-reduce
    unsharded = unsharded_bytes(shapes, value_bytes) if parallel == "fsdp" else 0
    tensors = weights + gradients + optimizer + activations + buckets + unsharded
    fixed = CUDA_OVERHEAD if device_type == "cuda" else CPU_OVERHEAD
    overhead = fixed + int(ALLOCATOR_SLACK * tensors)
    if m.recomputed_blocks and device_type == "cpu":
        # glibc keeps freed activation buffers in its heap, so the process peaks about one
        # recomputed part above its live tensors (bench/memory_cpu.py, "process" column).
        # Without recompute the fixed overhead's margin covers that; with full recompute the
        # activations are small, the rebuilt blocks' buffers many, and the plan was 19-28% short.
        sizes = (cfg.train.batch_size, m.block_size, m.n_embd)
        overhead += (
            layer_activation_bytes(*sizes, m.n_head, value_bytes)
            if m.grad_checkpoint == "full"
            else mlp_recompute_saving(*sizes, value_bytes)
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


def vocab_size_for(cfg: RunConfig, data_path: str | None = None) -> tuple[int, str]:
    """The vocabulary the run will have, and how it was found (no training data is read for BPE)."""
    from engine.data.preparation import DataError, prepare

    if cfg.data.tokenizer != "char":
        try:
            import tiktoken

            return tiktoken.get_encoding(cfg.data.tokenizer).n_vocab, cfg.data.tokenizer
        except (ImportError, OSError, ValueError):  # offline (requests' errors are OSErrors)
            return (
                50257,
                f"{cfg.data.tokenizer} (assumed GPT-2 size: encoding not available offline)",
            )
    try:
        data = prepare(cfg.data, data_path=data_path)
        return data.tokenizer.vocab_size, "characters of the corpus"
    except DataError:
        return 256, "assumed 256 characters (corpus not available)"
