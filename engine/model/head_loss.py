"""The language-model head and its cross-entropy, in chunks of tokens, never holding the full logits.

Whole, fp32 cross-entropy keeps three b*t*vocab tensors at backward's peak (12 bytes per logit:
9 GiB for 16 x 1024 tokens of a 50k vocabulary). Here each chunk's forward computes its loss and,
at once, the gradients for its hidden states and the head's weight, then drops its logits;
backward only scales them. Liger-Kernel's fused linear cross-entropy, in plain torch ops.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -1
# The most bytes one chunk's fp32 logits may take. Large enough that a small vocabulary (a
# char-level model's 65) is one chunk, the unchunked path's speed; small enough that a 50k
# vocabulary's chunk (512 tokens) is a few hundred MB at the peak, a constant the planner counts.
CHUNK_LOGIT_BYTES = 128 * 2**20


def chunk_tokens_for(vocab: int, n_tokens: int, chunk_bytes: int | None = None) -> int:
    """Tokens per chunk: the largest power of two whose fp32 logits fit `chunk_bytes`
    (CHUNK_LOGIT_BYTES by default), at least 1 and at most `n_tokens`."""
    budget = CHUNK_LOGIT_BYTES if chunk_bytes is None else chunk_bytes
    fit = max(1, budget // (4 * vocab))
    return max(1, min(n_tokens, 1 << (fit.bit_length() - 1)))


def head_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    softcap: float = 0.0,
    chunk_tokens: int | None = None,
    vocab: int | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of `F.linear(hidden, weight)` (soft-capped when `softcap` > 0) against
    `targets` (IGNORE_INDEX counts for nothing), `chunk_tokens` tokens at a time (`chunk_tokens_for`
    when None); a scalar fp32 loss. `vocab`: the tokenizer's size when the weight has padded rows,
    whose logits take no part in the softmax. When all the tokens make one chunk, it is
    F.cross_entropy of the logits."""
    hidden = hidden.reshape(-1, hidden.size(-1))
    targets = targets.reshape(-1)
    chunk = chunk_tokens or chunk_tokens_for(weight.size(0), hidden.size(0))
    vocab = weight.size(0) if vocab is None else vocab
    if chunk >= hidden.size(0):
        # One chunk: the plain ops, whose autograd holds these (at most CHUNK_LOGIT_BYTES-sized)
        # logits through backward; the Function's extra ops would only cost a small model time.
        logits = F.linear(hidden, weight)
        if softcap > 0:
            logits = softcap * torch.tanh(logits / softcap)
        return F.cross_entropy(logits[:, :vocab].float(), targets, ignore_index=IGNORE_INDEX)
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _ChunkedHeadLoss.apply(hidden, weight, targets, float(softcap), chunk, vocab)
    loss, _, _ = _chunked_loss(hidden, weight, targets, softcap, chunk, vocab, False, False)
    return loss


class _ChunkedHeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        softcap: float,
        chunk: int,
        vocab: int,
    ) -> torch.Tensor:
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        loss, grad_hidden, grad_weight = _chunked_loss(
            hidden, weight, targets, softcap, chunk, vocab, want_hidden, want_weight
        )
        ctx.save_for_backward(grad_hidden, grad_weight)
        return loss

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad_loss: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        # New tensors, not scaled in place: a second backward (retain_graph) must see the
        # stored gradients unchanged.
        if grad_hidden is not None:
            grad_hidden = grad_hidden * grad_loss.to(grad_hidden.dtype)
        if grad_weight is not None:
            grad_weight = grad_weight * grad_loss.to(grad_weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def _chunked_loss(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    softcap: float,
    chunk: int,
    vocab: int,
    want_hidden: bool,
    want_weight: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(mean loss, d loss / d hidden or None, d loss / d weight or None), one chunk at a time.

    The matmuls run in the dtype autocast gives them (as `lm_head` would); the softmax and
    the loss in fp32; the weight's gradient is summed over the chunks in fp32.
    """
    n_tokens = hidden.size(0)
    matmul_dtype = _matmul_dtype(hidden)
    w = weight.to(matmul_dtype)  # cast once, not per chunk (no-op when already that dtype)
    valid = targets != IGNORE_INDEX
    n_valid = valid.sum()  # a tensor: no host sync (0 targets gives NaN, as F.cross_entropy)
    loss_sum = torch.zeros((), dtype=torch.float32, device=hidden.device)
    grad_hidden = torch.empty_like(hidden) if want_hidden else None
    grad_weight = (
        torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if want_weight else None
    )
    for start in range(0, n_tokens, chunk):
        end = min(start + chunk, n_tokens)
        h = hidden[start:end].to(matmul_dtype)
        chunk_valid = valid[start:end]
        chunk_targets = targets[start:end].clamp(min=0).unsqueeze(1)  # ignored: any row
        logits = F.linear(h, w).float()  # a no-op copy when the matmul ran in fp32
        capped = None
        if softcap > 0:
            capped = logits.div_(softcap).tanh_()
            logits = capped * softcap
        if vocab < logits.size(1):  # padded rows: exp(-inf) = 0, in the softmax and its gradient
            logits[:, vocab:] = -float("inf")
        lse = torch.logsumexp(logits, dim=1)
        picked = logits.gather(1, chunk_targets).squeeze(1)
        loss_sum = loss_sum + torch.where(chunk_valid, lse - picked, 0.0).sum()
        if not (want_hidden or want_weight):
            continue
        # d loss / d logits = (softmax - one_hot(target)) / n_valid on valid rows, 0 elsewhere,
        # built in the logits' own storage.
        grad = logits.sub_(lse.unsqueeze(1)).exp_()
        del logits
        grad.scatter_add_(1, chunk_targets, torch.full_like(picked, -1.0).unsqueeze(1))
        grad.mul_((chunk_valid / n_valid).unsqueeze(1))
        if capped is not None:  # d(c*tanh(z/c))/dz = 1 - tanh(z/c)^2
            grad.mul_(capped.square_().neg_().add_(1.0))
            del capped
        grad = grad.to(matmul_dtype)  # the fp32 copy is freed here when they differ
        if want_hidden:
            grad_hidden[start:end] = grad @ w
        if want_weight:
            if matmul_dtype == torch.float32:
                grad_weight.addmm_(grad.t(), h)
            else:  # a bf16/fp16 product, summed in fp32
                grad_weight += grad.t() @ h
        del grad
    loss = loss_sum / n_valid
    if grad_weight is not None:
        grad_weight = grad_weight.to(weight.dtype)
    return loss, grad_hidden, grad_weight


def _matmul_dtype(hidden: torch.Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: autocast's when it is on, else the hidden states'."""
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return hidden.dtype
