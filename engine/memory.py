"""Memory accounting: exact bytes of live tensors, and estimates for activations.

The exact figures count distinct storages, so tied weights (embedding = head) count once.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (shared storages counted once)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            continue
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in seen or storage.nbytes() == 0:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total


def _state_tensors(state: Any) -> Iterable[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for v in state.values():
            yield from _state_tensors(v)
    elif isinstance(state, (list, tuple)):
        for v in state:
            yield from _state_tensors(v)


def weight_bytes(model: torch.nn.Module) -> int:
    return storage_bytes([*model.parameters(), *model.buffers()])


def gradient_bytes(model: torch.nn.Module) -> int:
    return storage_bytes(p.grad for p in model.parameters() if p.grad is not None)


def optimizer_bytes(optimizer: Any) -> int:
    """Bytes of the optimizer's state tensors (moments, factored statistics, step counters)."""
    return storage_bytes(_state_tensors(list(optimizer.state.values())))


def layer_activation_bytes(
    batch: int,
    seq: int,
    n_embd: int,
    n_head: int,
    bytes_per_value: int,
    *,
    flash_attention: bool = True,
) -> int:
    """One transformer block's activations kept for backward, Korthikanti et al. (2022), Eq. 2.

    At 16-bit: s*b*h*(34 + 5*a*s/h) bytes; the 5*a*s/h term is the attention score matrix,
    which fused (flash/memory-efficient) attention never materialises. The paper's constants
    assume 2-byte values: fp32 doubles them.
    """
    sbh = seq * batch * n_embd
    scale = bytes_per_value / 2
    return int(sbh * (34 + (0 if flash_attention else 5 * n_head * seq / n_embd)) * scale)


def activation_bytes_estimate(
    batch: int,
    seq: int,
    n_embd: int,
    n_head: int,
    n_layer: int,
    vocab: int,
    bytes_per_value: int,
    *,
    flash_attention: bool = True,
    grad_checkpoint: bool = False,
) -> int:
    """Activations live at the peak of a training step, in bytes.

    Without checkpointing: every block's activations (`layer_activation_bytes`). With it, what
    is really live at the peak (the backward of a block): each block's input (2*s*b*h bytes at
    16-bit), the one block being recomputed with all its activations, and that block's backward
    temporaries, the gradients flowing through it (about 3*s*b*h values; measured on the CPU by
    bench/memory_cpu.py, where the inputs-plus-one-block figure alone was 10% short).
    The loss is computed in fp32, so at its peak the backward pass holds three fp32 b*s*vocab
    tensors: the saved log-softmax, its gradient and the logits' gradient (12 bytes per logit,
    measured on CPU and on an H200 alike).
    """
    sbh = seq * batch * n_embd
    scale = bytes_per_value / 2  # the paper's constants assume 2-byte values
    per_layer = layer_activation_bytes(
        batch, seq, n_embd, n_head, bytes_per_value, flash_attention=flash_attention
    )
    if grad_checkpoint:
        inputs = 2 * sbh * scale * n_layer
        backward_temporaries = 6 * sbh * scale  # 3*s*b*h values
        layers = inputs + per_layer + backward_temporaries
    else:
        layers = per_layer * n_layer
    logits = batch * seq * vocab * 12
    return int(layers + logits)
