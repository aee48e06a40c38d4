"""The chunked head + cross-entropy: the unchunked loss and gradients, without the full logits."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import engine.model.head_loss as head_loss_module
from engine.config.run_config import ModelConfig
from engine.model.gpt import GPT
from engine.model.head_loss import chunk_tokens_for, head_loss

VOCAB = 65


def unchunked(hidden, weight, targets, softcap):
    logits = F.linear(hidden, weight)
    if softcap > 0:
        logits = softcap * torch.tanh(logits / softcap)
    return F.cross_entropy(logits.float(), targets, ignore_index=-1)


def some_inputs(n=37, h=16, v=50, ignored=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g).requires_grad_()
    weight = (0.5 * torch.randn(v, h, generator=g)).requires_grad_()
    targets = torch.randint(v, (n,), generator=g)
    if ignored:
        targets[::3] = -1
    return hidden, weight, targets


def grads_of(loss, *tensors):
    return torch.autograd.grad(loss, tensors)


@pytest.mark.parametrize("softcap", [0.0, 3.0])
@pytest.mark.parametrize("ignored", [False, True])
@pytest.mark.parametrize("chunk", [1, 5, 37, 1000])
def test_loss_and_gradients_are_the_unchunked_ones_in_fp32(softcap, ignored, chunk):
    hidden, weight, targets = some_inputs(ignored=ignored)
    ref = unchunked(hidden, weight, targets, softcap)
    ref_h, ref_w = grads_of(1024 * ref, hidden, weight)  # a GradScaler-like scale
    loss = head_loss(hidden, weight, targets, softcap, chunk)
    got_h, got_w = grads_of(1024 * loss, hidden, weight)
    assert loss.dtype == torch.float32
    assert abs(loss.item() - ref.item()) <= 1e-6
    # the gradients carry the scale: compare them unscaled, at 1e-6
    assert (got_h - ref_h).abs().max().item() / 1024 <= 1e-6
    assert (got_w - ref_w).abs().max().item() / 1024 <= 1e-6
    if ignored:  # an ignored position's hidden state gets no gradient
        assert torch.count_nonzero(got_h[::3]) == 0


def test_a_second_backward_gets_the_same_gradients():
    hidden, weight, targets = some_inputs()
    loss = head_loss(hidden, weight, targets, 0.0, 8)
    first = torch.autograd.grad(loss, (hidden, weight), retain_graph=True)
    second = torch.autograd.grad(loss, (hidden, weight))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


def test_without_gradients_the_loss_is_the_same():
    hidden, weight, targets = some_inputs()
    with torch.no_grad():
        assert abs(head_loss(hidden, weight, targets, 3.0, 4).item()
                   - unchunked(hidden, weight, targets, 3.0).item()) <= 1e-6


class LargestTensor(TorchDispatchMode):
    """The most elements of any tensor an op produced while active."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("grad", [True, False])
def test_no_tensor_the_size_of_the_full_logits_is_ever_made(grad):
    n, h, v, chunk = 64, 4, 300, 8  # full logits: 19,200 values; a chunk's: 2,400 (the weight's)
    hidden, weight, targets = some_inputs(n, h, v)
    with torch.set_grad_enabled(grad), LargestTensor() as seen:
        loss = head_loss(hidden, weight, targets, 2.0, chunk)
        if grad:
            loss.backward()
    assert seen.largest <= chunk * v
    with LargestTensor() as unchunked_seen:  # the check sees the full logits when they exist
        unchunked(hidden, weight, targets, 2.0).backward()
    assert unchunked_seen.largest == n * v


def test_one_chunk_is_the_plain_loss():
    # all the tokens in one chunk: F.cross_entropy's own graph, bit for bit
    hidden, weight, targets = some_inputs()
    loss = head_loss(hidden, weight, targets, 3.0, 37)
    assert loss.grad_fn.name() == unchunked(hidden, weight, targets, 3.0).grad_fn.name()
    assert loss.item() == unchunked(hidden, weight, targets, 3.0).item()


def test_chunk_rule_keeps_small_vocabularies_in_one_chunk():
    # a char-level model: every realistic micro-batch is one chunk, the unchunked path's speed
    assert chunk_tokens_for(65, 64 * 1024) == 64 * 1024
    # a padded GPT-2 vocabulary: 512 tokens, 103 MB of fp32 logits (<= 128 MiB)
    assert chunk_tokens_for(50304, 16 * 1024) == 512
    assert chunk_tokens_for(50304, 100) == 100  # never more than the tokens there are
    assert chunk_tokens_for(10**9, 100) == 1


def tiny(**kw) -> ModelConfig:
    base = dict(n_layer=2, n_head=2, n_embd=32, block_size=16)
    return ModelConfig(**{**base, **kw})


@pytest.fixture
def eight_token_chunks(monkeypatch):
    # 8 tokens a chunk for this vocabulary, padded to 128 rows or not
    monkeypatch.setattr(head_loss_module, "CHUNK_LOGIT_BYTES", 4 * 128 * 8)
    assert chunk_tokens_for(VOCAB, 64) == chunk_tokens_for(128, 64) == 8


def model_grads(model, x, y, **kw):
    model.zero_grad(set_to_none=True)
    logits, loss = model(x, y, **kw)
    (256 * loss).backward()
    return logits, loss, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("softcap", [0.0, 5.0])
def test_model_training_loss_matches_the_full_logits_path(eight_token_chunks, tie, softcap):
    torch.manual_seed(0)
    model = GPT(tiny(tie_embeddings=tie, logit_softcap=softcap), VOCAB)
    x, y = torch.randint(VOCAB, (2, 2, 16))
    y[0, :5] = -1  # ignored targets
    logits, loss, grads = model_grads(model, x, y)
    assert logits is None  # training never returns (or holds) the full logits
    ref_logits, ref_loss, ref_grads = model_grads(model, x, y, full_logits=True)
    assert ref_logits.shape == (2, 16, model.lm_head.weight.size(0))
    assert abs(loss.item() - ref_loss.item()) <= 1e-6
    for name, g in grads.items():  # the embedding/head gradient, tied or not, and the rest
        assert (g - ref_grads[name]).abs().max().item() / 256 <= 1e-6, name


def test_model_under_bf16_autocast_matches_the_full_logits_path(eight_token_chunks):
    # bf16 rounds the matmuls (as lm_head under autocast does); the soft-cap and the weight
    # gradient's sum over chunks are fp32 here, so agreement is to bf16's precision: the
    # loss within 1e-3 relative, each gradient within 2% of its largest entry.
    torch.manual_seed(0)
    model = GPT(tiny(tie_embeddings=True, logit_softcap=5.0), VOCAB)
    x, y = torch.randint(VOCAB, (2, 2, 16))
    y[1, -4:] = -1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss, grads = model_grads(model, x, y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, ref_loss, ref_grads = model_grads(model, x, y, full_logits=True)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-3)
    for name, g in grads.items():
        ref = ref_grads[name]
        assert g.dtype == ref.dtype == torch.float32
        assert (g - ref).abs().max() <= 0.02 * ref.abs().max(), name


def test_evaluation_loss_is_chunked_and_the_same(eight_token_chunks):
    torch.manual_seed(0)
    model = GPT(tiny(), VOCAB).eval()
    x, y = torch.randint(VOCAB, (2, 2, 16))
    with torch.no_grad():
        logits, loss = model(x, y)
        _, ref = model(x, y, full_logits=True)
    assert logits is None and abs(loss.item() - ref.item()) <= 1e-6


def test_generation_still_gets_the_last_position_logits():
    model = GPT(tiny(), VOCAB).eval()
    logits, loss = model(torch.randint(VOCAB, (2, 16)))
    assert loss is None and logits.shape == (2, 1, model.lm_head.weight.size(0))


def test_traced_whole_by_torch_compile():
    # fullgraph: dynamo traces the autograd.Function without a graph break; aot_eager runs
    # AOTAutograd's forward and backward graphs (inductor was checked by hand: 200 s on 2 cores)
    torch._dynamo.reset()
    hidden, weight, targets = some_inputs(24, 8, 30)
    ref = head_loss(hidden, weight, targets, 2.0, 8)
    ref_h, ref_w = grads_of(4 * ref, hidden, weight)
    compiled = torch.compile(head_loss, backend="aot_eager", fullgraph=True)
    loss = compiled(hidden, weight, targets, 2.0, 8)
    got_h, got_w = grads_of(4 * loss, hidden, weight)
    assert abs(loss.item() - ref.item()) <= 1e-6
    assert torch.allclose(got_h, ref_h, atol=1e-6) and torch.allclose(got_w, ref_w, atol=1e-6)


# ------------------------------------------------------------------ the planner's term


def test_plan_counts_the_plain_loss_when_the_tokens_make_one_chunk():
    from engine.plan.memory import head_loss_bytes

    # 2 x 4 tokens of a 10-token vocabulary: 80 logits, 12 bytes each
    assert head_loss_bytes(2, 4, 8, 10, 2) == 960


def test_plan_counts_one_chunk_and_the_gradients_when_chunked():
    from engine.plan.memory import (
        activation_bytes_estimate,
        head_loss_bytes,
        layer_activation_bytes,
    )

    # gpt2-small, fp32, 16 x 128 tokens: 512-token chunks of the padded 50,304 rows
    gradients = 4 * (2048 + 50304) * 768  # hidden states' and head weight's: 160,825,344
    one_chunk = 8 * 512 * 50304  # fp32 logits and their gradient: 206,045,184
    assert head_loss_bytes(16, 128, 768, 50304, 4) == gradients + one_chunk == 366_870_528
    # local-300m, bf16, 16 x 1024 tokens: 9.2 GiB of logits before (16384 * 50304 * 12 bytes),
    # 0.54 GiB now (a chunk's bf16 weight-gradient product added)
    gradients = 4 * (16384 + 50304) * 1024
    in_chunk = 8 * 512 * 50304 + 50304 * 1024 * 2
    assert head_loss_bytes(16, 1024, 1024, 50304, 2) == gradients + in_chunk == 582_221_824
    # a wide model's small micro-batch: the gradients held twice at backward's start dominate
    assert head_loss_bytes(1, 1024, 4096, 50304, 4) == 2 * 4 * (1024 + 50304) * 4096
    # the activation estimate is the blocks' part plus this term
    layers = 12 * layer_activation_bytes(16, 128, 768, 12, 4)
    assert activation_bytes_estimate(16, 128, 768, 12, 12, 50304, 4) == layers + 366_870_528


def test_grad_scaler_scale_reaches_the_gradients_and_unscales_exactly(eight_token_chunks):
    torch.manual_seed(0)
    model = GPT(tiny(), VOCAB)
    x, y = torch.randint(VOCAB, (2, 2, 16))
    _, _, ref = model_grads(model, x, y, full_logits=True)  # 256 x the gradients
    model.zero_grad(set_to_none=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler.scale(model(x, y)[1] / 2).backward()  # as train_step: the loss / accumulation steps
    scaler.unscale_(optimizer)
    for name, p in model.named_parameters():
        assert (2 * p.grad - ref[name] / 256).abs().max().item() <= 1e-6, name


@pytest.mark.parametrize("softcap", [0.0, 3.0])
@pytest.mark.parametrize("chunk", [5, 1000])  # chunked, and the one-chunk plain path
def test_padded_rows_take_no_part_in_the_loss(softcap, chunk):
    """A weight padded past the tokenizer's 50 rows: loss and gradients of the true rows are
    those of the unpadded weight, and the padded rows get no gradient at all."""
    hidden, weight, targets = some_inputs()
    true_rows = weight.detach().clone().requires_grad_()
    padding = torch.randn(14, weight.size(1)) * 5.0  # large logits, were they counted
    padded = torch.cat([weight.detach(), padding]).requires_grad_()
    ref = unchunked(hidden, true_rows, targets, softcap)
    ref_h, ref_w = grads_of(ref, hidden, true_rows)
    loss = head_loss(hidden, padded, targets, softcap, chunk, vocab=50)
    got_h, got_w = grads_of(loss, hidden, padded)
    assert abs(loss.item() - ref.item()) <= 1e-6
    assert (got_h - ref_h).abs().max().item() <= 1e-6
    assert (got_w[:50] - ref_w).abs().max().item() <= 1e-6
    assert torch.count_nonzero(got_w[50:]) == 0


def test_a_padded_model_starts_at_the_loss_of_a_uniform_guess():
    """103 characters padded to 128 rows: the first loss is about ln 103, not ln 128, in the
    chunked path, the full-logits path and under no_grad alike."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=16), 103)
    assert model.padded_vocab == 128
    idx = torch.randint(103, (4, 16))
    targets = torch.randint(103, (4, 16))
    _, chunked = model(idx, targets)
    _, full = model(idx, targets, full_logits=True)
    with torch.no_grad():
        _, evaluated = model(idx, targets)
    for loss in (chunked, full, evaluated):
        assert abs(loss.item() - torch.log(torch.tensor(103.0)).item()) < 0.05
    assert abs(chunked.item() - full.item()) <= 1e-6
