"""A GPT language model in the spirit of nanoGPT's model.py, with switchable modern parts: with
`ModelConfig`'s defaults it is nanoGPT's GPT; switches turn on rotary positions, RMSNorm,
QK-norm, ReLU^2 or tanh GELU, an untied head, zero-initialised projections, logit soft-capping,
and the modded-nanogpt speedrun's value embeddings and U-net skips.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from engine.config.run_config import ModelConfig
from engine.model.head_loss import head_loss


class RMSNorm(nn.Module):
    def __init__(self, ndim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in x's dtype: a bfloat16 x (autocast's q and k) with a float32 weight takes torch's
        # slower unfused path
        return F.rms_norm(x, self.weight.shape, self.weight.to(x.dtype), 1e-6)


def make_norm(cfg: ModelConfig, ndim: int) -> nn.Module:
    """RMSNorm, or torch's LayerNorm (bias optional; its `weight`/`bias` keys are what
    checkpoints have always held)."""
    return RMSNorm(ndim) if cfg.norm == "rmsnorm" else nn.LayerNorm(ndim, eps=1e-5, bias=cfg.bias)


def rotary_tables(
    block_size: int, head_dim: int, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(block_size, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (first half, second half) of each head's channels by position-dependent angles."""
    t = x.size(-2)
    cos, sin = cos[:t].to(x.dtype), sin[:t].to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


# On a CPU in bfloat16, torch's fused attention kernel is slower than its three ops written out
# up to this many tokens (forward and backward: 3.3x at 64, 2.0x at 128, 1.2x at 256; at 512 the
# rounds disagree, at 1024 the fused one is faster and the scores the three ops keep grow with
# the square): `python bench/attention_cpu.py`. In float32 and on GPUs the fused kernel is kept.
CPU_BFLOAT16_UNFUSED_MAX_TOKENS = 256


def attention_is_fused(device_type: str, dtype: torch.dtype, tokens: int) -> bool:
    """Whether attention over `tokens` runs torch's fused kernel, which never holds the score
    matrix (the memory planner's question too), or the three ops, which keep it for backward."""
    return not (
        device_type == "cpu" and dtype == torch.bfloat16 and tokens <= CPU_BFLOAT16_UNFUSED_MAX_TOKENS
    )


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float
) -> torch.Tensor:
    """Causal softmax attention of (b, h, t, d) queries, keys and values: torch's fused kernel,
    or on a CPU in bfloat16 for short sequences the same arithmetic as three ops."""
    if attention_is_fused(q.device.type, q.dtype, q.size(-2)):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    return unfused_causal_attention(q, k, v, dropout_p)


def unfused_causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    """The fused kernel's arithmetic as three ops: scores, masked softmax, weights times values."""
    t = q.size(-2)
    scores = (q @ k.mT) * q.size(-1) ** -0.5
    future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    weights = scores.masked_fill(future, float("-inf")).softmax(-1)
    if dropout_p > 0:
        weights = F.dropout(weights, dropout_p)
    return weights @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, value_embed: bool = False) -> None:
        """`value_embed`: the block's values get a value embedding added, times `ve_lambda`."""
        super().__init__()
        self.n_head = cfg.n_head
        self.head_dim = cfg.n_embd // cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.c_proj.is_residual_proj = True
        self.dropout = cfg.dropout
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.q_norm = RMSNorm(self.head_dim) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim) if cfg.qk_norm else None
        # one learned scale; starts at 1, the weight modded-nanogpt's zero-initialised gate gives
        self.ve_lambda = nn.Parameter(torch.ones(1)) if value_embed else None

    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor] | None,
        value_embed: torch.Tensor | None = None,
    ) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        if value_embed is not None:  # a float32 lookup: cast to the values' (autocast) dtype
            v = v + (self.ve_lambda * value_embed).to(v.dtype)
        q, k, v = (z.view(b, t, self.n_head, self.head_dim).transpose(1, 2) for z in (q, k, v))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        y = causal_attention(q, k, v, self.dropout if self.training else 0.0)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.c_proj.is_residual_proj = True
        self.relu2 = cfg.mlp == "relu2"
        # GPT-2's own weights were trained with the tanh approximation (transformers' gelu_new)
        self.gelu_approximate = "tanh" if cfg.mlp == "gelu_tanh" else "none"
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c_fc(x)
        h = F.relu(h).square() if self.relu2 else F.gelu(h, approximate=self.gelu_approximate)
        return self.dropout(self.c_proj(h))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, value_embed: bool = False) -> None:
        super().__init__()
        self.ln_1 = make_norm(cfg, cfg.n_embd)
        self.attn = CausalSelfAttention(cfg, value_embed)
        self.ln_2 = make_norm(cfg, cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor] | None,
        value_embed: torch.Tensor | None = None,
        recompute_mlp: bool = False,
    ) -> torch.Tensor:
        """With `recompute_mlp`, backward recomputes the MLP from its input rather than keeping
        its 4h-wide activations: the block's largest ones, for the MLP's share of its forward.
        `value_embed` (b, t, n_embd): this block's value embedding (model.value_embeds)."""
        x = x + self.attn(self.ln_1(x), rotary, value_embed)
        h = self.ln_2(x)
        return x + (checkpoint(self.mlp, h, use_reentrant=False) if recompute_mlp else self.mlp(h))


def value_embed_tables(n_layer: int, n_tables: int) -> list[int | None]:
    """The value-embedding table each block adds to its values (None: none): table i feeds
    block i and block n_layer - n_tables + i, modded-nanogpt's "012 ... 012" layout (the tables
    carry what a token is to the blocks nearest the input and the output)."""
    if 2 * n_tables > n_layer:
        raise ValueError(
            f"{n_tables} value embedding tables need {2 * n_tables} blocks, not {n_layer}"
        )
    last = n_layer - n_tables
    return [i if i < n_tables else i - last if i >= last else None for i in range(n_layer)]


def padded_vocab_size(vocab_size: int, multiple: int) -> int:
    """The vocabulary rounded up to a multiple of `multiple` (1: unchanged): the rows the
    embedding and head get, since an unaligned head dimension slows their matmuls."""
    if vocab_size < 1 or multiple < 1:
        raise ValueError(f"vocab_size ({vocab_size}) and multiple ({multiple}) must be >= 1")
    return -(-vocab_size // multiple) * multiple


def embedding(rows: int, dim: int, initialise: bool) -> nn.Embedding:
    """An embedding table; unset (no N(0, 1) fill) unless `initialise`."""
    return (
        nn.Embedding(rows, dim)
        if initialise
        else nn.Embedding(rows, dim, _weight=torch.empty(rows, dim))
    )


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int, *, initialise: bool = True) -> None:
        """`initialise=False` leaves the weights unset: for shapes on the meta device (the
        planner's), where a normal_ imports torch._dynamo: a second of CPU."""
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size  # the tokenizer's: ids at or above it are never produced
        self.padded_vocab = padded_vocab_size(vocab_size, cfg.vocab_multiple)
        self.wte = embedding(self.padded_vocab, cfg.n_embd, initialise)
        self.wpe = (
            embedding(cfg.block_size, cfg.n_embd, initialise) if cfg.pos_emb == "learned" else None
        )
        self.drop = nn.Dropout(cfg.dropout)
        self.ve_tables = value_embed_tables(cfg.n_layer, cfg.value_embeds)
        self.value_embeds = nn.ModuleList(
            embedding(self.padded_vocab, cfg.n_embd, initialise) for _ in range(cfg.value_embeds)
        )
        self.blocks = nn.ModuleList(Block(cfg, table is not None) for table in self.ve_tables)
        # skip_weights[j]: block j's output into block n_layer-1-j's input, starting at 1 as
        # modded-nanogpt's (the middle block of an odd count has no mirror)
        self.skip_weights = nn.Parameter(torch.ones(cfg.n_layer // 2)) if cfg.unet_skips else None
        self.ln_f = make_norm(cfg, cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, self.padded_vocab, bias=False)
        # True: the training loss computes the logits through lm_head itself, unchunked (a
        # float8 head's matmul is its module's; `head_loss` multiplies by the weight directly)
        self.whole_head = False
        if cfg.tie_embeddings:
            # nanoGPT ties the head to the embedding: fewer parameters, better small-model loss.
            self.wte.weight = self.lm_head.weight
        if cfg.pos_emb == "rotary":
            cos, sin = rotary_tables(cfg.block_size, cfg.n_embd // cfg.n_head)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        if not initialise:
            return
        self.apply(self._init_weights)
        for module in self.modules():
            if getattr(module, "is_residual_proj", False):
                if cfg.zero_init_proj:
                    nn.init.zeros_(module.weight)
                else:  # GPT-2's scaled init of the projections into the residual stream
                    nn.init.normal_(module.weight, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self, non_embedding: bool = True) -> int:
        """Distinct parameters, the padded vocabulary's rows included (they are computed with
        and held in memory); nanoGPT's convention subtracts the position embedding, and the
        value embeddings go with it: tables looked up, never multiplied (the token embedding
        stays, as the head it is tied to)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            lookups = [self.wpe] if self.wpe is not None else []
            n -= sum(t.weight.numel() for t in [*lookups, *self.value_embeds])
        return n

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, full_logits: bool = False
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(logits, loss) of idx (b, t). Without targets: the last position's logits (what
        generation needs), no loss. With targets: no logits and the mean loss, computed in
        chunks of tokens so that the (b, t, vocab) logits never exist (`head_loss`).
        `full_logits`: the logits of every position, and the loss from them when targets are
        given (the unchunked path: training this way holds 12 bytes per logit)."""
        b, t = idx.size()
        if t > self.cfg.block_size:
            raise ValueError(f"sequence of length {t} exceeds block_size {self.cfg.block_size}")
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(t, device=idx.device))
        x = self.drop(x)
        rotary = (self.rope_cos, self.rope_sin) if self.wpe is None else None
        # model.grad_checkpoint's recompute applies to the first blocks: backward reaches them
        # last, when the other blocks' activations are already freed.
        recomputed = self.cfg.recomputed_blocks if self.training and torch.is_grad_enabled() else 0
        value_embeds = [table(idx) for table in self.value_embeds]
        n_layer = len(self.blocks)
        skipped = len(self.skip_weights) if self.skip_weights is not None else 0
        outputs: list[torch.Tensor] = []  # the first half's, for the U-net skips
        for i, block in enumerate(self.blocks):
            mirror = n_layer - 1 - i
            if mirror < skipped:
                x = x + self.skip_weights[mirror] * outputs[mirror]
            table = self.ve_tables[i]
            ve = value_embeds[table] if table is not None else None
            if i < recomputed and self.cfg.grad_checkpoint == "full":
                x = checkpoint(block, x, rotary, ve, use_reentrant=False)
            else:
                x = block(x, rotary, ve, recompute_mlp=i < recomputed)
            if i < skipped:
                outputs.append(x)
        x = self.ln_f(x)
        if full_logits or (self.whole_head and targets is not None):
            logits = self._logits(x)
            if targets is None:
                return logits, None
            # the padded rows take no part in the softmax, as in head_loss
            true_logits = logits[..., : self.vocab_size].reshape(-1, self.vocab_size).float()
            loss = F.cross_entropy(true_logits, targets.reshape(-1), ignore_index=-1)
            return (logits if full_logits else None), loss
        if targets is None:
            return self._logits(x[:, [-1], :]), None
        return None, head_loss(
            x, self.lm_head.weight, targets, self.cfg.logit_softcap, vocab=self.vocab_size
        )

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(x)
        cap = self.cfg.logit_softcap
        if cap > 0:
            logits = cap * torch.tanh(logits / cap)
        return logits

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Extend idx (b, t) by max_new_tokens sampled tokens, cropping context to block_size.
        Temperature 0 is greedy: the most likely token each time, no random numbers drawn."""
        for _ in range(max_new_tokens):
            next_id = self.next_token(idx, temperature, top_k, generator)
            idx = torch.cat((idx, next_id), dim=1)
        return idx

    @torch.no_grad()
    def next_token(
        self,
        idx: torch.Tensor,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """The next token (b, 1) after idx (b, t), seeing at most the last block_size tokens:
        one step of `generate`, for callers that stream tokens as they come. The padded
        vocabulary's rows are never chosen: no tokenizer can decode them."""
        context = idx if idx.size(1) <= self.cfg.block_size else idx[:, -self.cfg.block_size :]
        logits, _ = self(context)
        logits = mask_padded_logits(logits[:, -1, :].float(), self.vocab_size)
        if temperature == 0:
            return logits.argmax(dim=-1, keepdim=True)
        logits = logits / temperature
        if top_k:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float("inf")
        probs = F.softmax(logits, dim=-1)
        return torch.multinomial(probs, num_samples=1, generator=generator)


def mask_padded_logits(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """`logits` (..., padded_vocab) with the rows past the tokenizer's `vocab_size` at -inf,
    so that no top-k, softmax or argmax can pick one (in place; returned for chaining)."""
    if logits.size(-1) > vocab_size:
        logits[..., vocab_size:] = -float("inf")
    return logits
