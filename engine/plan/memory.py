"""Memory accounting: exact bytes of live tensors, and estimates for activations.

The exact figures count distinct storages, so tied weights (embedding = head) count once.
`memory_breakdown` puts them together, with what the device or the host says, into the
`MemoryBreakdown` event the memory panel draws.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from typing import Any

import psutil
import torch

from engine.config.run_config import RunConfig
from engine.events import MemoryBreakdown
from engine.model.gpt import value_embed_tables
from engine.model.head_loss import chunk_tokens_for
from engine.train.device import device_capacity, process_gpu_memory


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (shared storages counted once)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            continue
        if hasattr(t, "to_local"):  # a sharded (DTensor) parameter: this rank's shard
            t = t.to_local()
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


def mlp_recompute_saving(batch: int, seq: int, n_embd: int, bytes_per_value: int) -> int:
    """What recomputing one block's MLP in backward frees, of `layer_activation_bytes`.

    Of the block's 34*s*b*h bytes (16-bit), the MLP keeps 19: its input (2), the 4h-wide
    activation's input and output (8 + 8) and the dropout mask (1). Recomputed, only its input
    (the second norm's output) stays: 17*s*b*h bytes freed, half the block.
    """
    return int(17 * seq * batch * n_embd * bytes_per_value / 2)


def recomputed_layers_bytes(
    batch: int,
    seq: int,
    n_embd: int,
    n_head: int,
    n_layer: int,
    bytes_per_value: int,
    *,
    flash_attention: bool = True,
    mode: str | bool = "none",
    recompute_blocks: int = 0,
) -> int:
    """The blocks' activations at the peak of a step when backward recomputes `mode` ("none", "mlp"
    or "full"; True/False: full/none) in the first `recompute_blocks` blocks (0: all).

    The peak is at the start of backward (every kept activation) or at the last recomputed block,
    where one block is rebuilt: its recomputed part and, under "full", its backward temporaries
    (about 3*s*b*h values; bench/memory_cpu.py found the figure 10% short without them)."""
    if isinstance(mode, bool):
        mode = "full" if mode else "none"
    sbh = seq * batch * n_embd
    scale = bytes_per_value / 2  # the paper's constants assume 2-byte values
    per_layer = layer_activation_bytes(
        batch, seq, n_embd, n_head, bytes_per_value, flash_attention=flash_attention
    )
    n = 0 if mode == "none" else min(recompute_blocks or n_layer, n_layer)
    kept = n_layer - n
    if mode == "full":
        inputs = 2 * sbh * scale
        backward_temporaries = 6 * sbh * scale  # 3*s*b*h values
        rebuilt = per_layer + backward_temporaries
        return int(n * inputs + max(kept * per_layer, rebuilt))
    if mode == "mlp":
        saving = mlp_recompute_saving(batch, seq, n_embd, bytes_per_value)
        return int(n * (per_layer - saving) + max(kept * per_layer, saving))
    if mode != "none":
        raise ValueError(f"unknown recompute mode {mode!r}")
    return int(n_layer * per_layer)


def speedrun_parts_bytes(
    batch: int,
    seq: int,
    n_embd: int,
    n_layer: int,
    bytes_per_value: int,
    *,
    value_embeds: int = 0,
    unet_skips: bool = False,
    full_recompute_blocks: int = 0,
) -> int:
    """What value embeddings and U-net skips add to the blocks' kept activations, in bytes.

    Counted from the tensors autograd saves: each value-embedding lookup (b*s*h fp32) once for its
    two blocks, and each such block's new values at the compute dtype (a fully recomputed block
    keeps only its inputs); with an even number of blocks, the middle skip's source and sum
    (b*s*h fp32). With rotary and no QK-norm the figure is high by the blocks' share."""
    sbh = batch * seq * n_embd
    total = 0
    if value_embeds:
        tables = value_embed_tables(n_layer, value_embeds)
        fed = sum(1 for i, t in enumerate(tables) if t is not None and i >= full_recompute_blocks)
        total += 4 * sbh * value_embeds + bytes_per_value * sbh * fed
    if unet_skips and n_layer % 2 == 0:
        total += 4 * sbh
    return total


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
    grad_checkpoint: str | bool = "none",
    recompute_blocks: int = 0,
    value_embeds: int = 0,
    unet_skips: bool = False,
    whole_head: bool = False,
) -> int:
    """Activations live at the peak of a training step, in bytes.

    `grad_checkpoint` is model.grad_checkpoint's mode (True/False: full/none), applied to the
    first `recompute_blocks` blocks (0: all); `recomputed_layers_bytes` has the layers' part.
    The head and its loss add `head_loss_bytes`; model.value_embeds and model.unet_skips add
    `speedrun_parts_bytes`; `whole_head` (a float8 head): the head's logits are never chunked.
    """
    layers = recomputed_layers_bytes(
        batch,
        seq,
        n_embd,
        n_head,
        n_layer,
        bytes_per_value,
        flash_attention=flash_attention,
        mode=grad_checkpoint,
        recompute_blocks=recompute_blocks,
    )
    full = grad_checkpoint is True or grad_checkpoint == "full"
    parts = speedrun_parts_bytes(
        batch,
        seq,
        n_embd,
        n_layer,
        bytes_per_value,
        value_embeds=value_embeds,
        unet_skips=unet_skips,
        full_recompute_blocks=min(recompute_blocks or n_layer, n_layer) if full else 0,
    )
    head = head_loss_bytes(batch, seq, n_embd, vocab, bytes_per_value, whole=whole_head)
    return int(layers + parts + head)


def head_loss_bytes(
    batch: int, seq: int, n_embd: int, vocab: int, bytes_per_value: int, *, whole: bool = False
) -> int:
    """What the head and the cross-entropy add to a step's peak, in bytes, as `head_loss` computes
    them (in chunks of `chunk_tokens_for` tokens when the logits would not fit one).

    One chunk: 12 bytes per logit (the saved log-softmax, its gradient, the logits' gradient; as
    measured on CPU and an H200). Several: one chunk's fp32 logits and gradient (8 bytes per logit)
    beside the fp32 gradients of the hidden states and the head's weight, held twice at backward's
    start (the larger figure when the chunk is small beside the weight). `whole`: the logits of
    every token at once, as a float8 head computes them (through its module, unchunked)."""
    tokens = batch * seq
    chunk = chunk_tokens_for(vocab, tokens)
    if whole or chunk >= tokens:
        return tokens * vocab * 12
    gradients = 4 * (tokens + vocab) * n_embd
    in_chunk = 8 * chunk * vocab + (vocab * n_embd * bytes_per_value if bytes_per_value < 4 else 0)
    return max(gradients + in_chunk, 2 * gradients)


def float8_activation_saving(converted_weights: int, bytes_per_value: int) -> int:
    """What float8 (train.float8) takes off a step's activations, in bytes: under 16-bit autocast
    each Linear keeps a 16-bit copy of its weight for backward, which a float8 Linear never makes
    (it keeps its fp32 weight and its input, as a plain Linear keeps the input, and casts both to
    float8 again in backward; the float8 copies live only for their matmul). `converted_weights`:
    the weights of the converted layers (the MLPs' and the head's)."""
    return 2 * converted_weights if bytes_per_value == 2 else 0


def step_start_allocated(device: torch.device) -> int:
    """At the start of a measured step: reset the CUDA peak counter and return the bytes
    allocated now (0 off CUDA), for `memory_breakdown` to find the step's activations."""
    if device.type != "cuda":
        return 0
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def memory_breakdown(
    model: torch.nn.Module,
    optimizer: Any,
    cfg: RunConfig,
    device: torch.device,
    dtype: torch.dtype,
    step: int,
    step_start: int,
) -> MemoryBreakdown:
    """Where the run's memory goes, taken inside a step after the optimizer step and before
    zero_grad, so gradients and optimizer state exist and the step's peak has just been reached.

    On CUDA activations are measured (the step's peak above `step_start`, from
    `step_start_allocated`, less the gradients it created); elsewhere they are estimated.
    """
    weights = weight_bytes(model)
    grads = gradient_bytes(model)
    opt = optimizer_bytes(optimizer)
    m = cfg.model
    if device.type == "cuda":
        allocated = torch.cuda.memory_allocated(device)
        reserved = torch.cuda.memory_reserved(device)
        activations = max(0, torch.cuda.max_memory_allocated(device) - step_start - grads)
        measured = True
        cache = reserved - allocated
        driver_view = _driver_process_memory(device)
        other = driver_view - reserved if driver_view else 0
    else:
        activations = activation_bytes_estimate(
            cfg.train.batch_size,
            m.block_size,
            m.n_embd,
            m.n_head,
            m.n_layer,
            model.padded_vocab,
            torch.finfo(dtype).bits // 8,
            grad_checkpoint=m.grad_checkpoint,
            recompute_blocks=m.recompute_blocks,
            value_embeds=m.value_embeds,
            unet_skips=m.unet_skips,
            whole_head=cfg.train.float8 != "off",
        )
        measured = False
        cache = 0
        other = psutil.Process().memory_info().rss - weights - grads - opt
    return MemoryBreakdown(
        step=step,
        device=str(device),
        capacity=device_capacity(device),
        weights=weights,
        gradients=grads,
        optimizer=opt,
        activations=activations,
        activations_measured=measured,
        cache=cache,
        other=max(0, other),
    )


def _driver_process_memory(device: torch.device) -> int | None:
    """This process's memory on a CUDA device as the driver sees it; None when NVML can't tell."""
    try:
        import pynvml
    except ImportError:  # no pynvml: no "other" figure
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no driver: no "other" figure
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        return process_gpu_memory(pynvml, handle, os.getpid())
    except pynvml.NVMLError:  # the query failed: report no "other" rather than a wrong one
        return None
    finally:
        with contextlib.suppress(pynvml.NVMLError):  # balances the init above; nothing to act on
            pynvml.nvmlShutdown()
