"""Runs under torchrun: the world, DDP and FSDP2, the per-step command exchange, rank reports."""

from engine import lazy_exports

# module -> the names it gives the rest of the code; each is imported when first asked for
_EXPORTS = {
    "engine.distributed.world": ("World", "init_world"),
    "engine.distributed.parallel": ("FSDP_OPTIMIZERS", "parallel_plan", "per_rank_batch"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
