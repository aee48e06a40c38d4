"""Runs under torchrun: the world, DDP and FSDP2, the per-step command exchange, rank reports."""
