"""The error of a checkpoint that cannot be used, shared by every part that reads one.

Torch-free: a caller can catch it without loading torch.
"""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be read or does not fit the run; the message is for the user."""
