"""The memory plan's per-device arithmetic for a torchrun world.

FSDP2 gives each rank a shard of every parameter, its gradient and its optimizer state, and adds
the all-gathered working set; DDP keeps a whole replica on each rank and adds its gradient
buckets. `parallel` is a ParallelPlan's mode.
"""

from __future__ import annotations

from math import prod

PLAN_MODES = ("single", "ddp", "fsdp")  # a ParallelPlan's modes


def check_plan_mode(world_size: int, parallel: str) -> None:
    if parallel not in PLAN_MODES:
        raise ValueError(f"parallel {parallel!r}: expected one of {', '.join(PLAN_MODES)}")
    if world_size < 1 or (parallel == "single") != (world_size == 1):
        raise ValueError(f"parallel {parallel!r} at world size {world_size}")


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


def ddp_bucket_bytes(gradient_bytes: int) -> int:
    """DDP's gradient buckets at their peak, for a replica whose gradients take `gradient_bytes`.

    DDP (torch's defaults: gradient_as_bucket_view=False, 25 MiB buckets) copies every
    gradient into flat bucket tensors for the all-reduce: the gradients' size again. Torch
    rebuilds its buckets once, in the order the gradients arrived, and the step where it does
    (the second) peaks one more such copy higher: measured on an H200 (local-300m, bf16):
    +1.22 GB over a single process at step 3, +2.43 GB at step 2. The plan keeps that peak.
    """
    return 2 * gradient_bytes
