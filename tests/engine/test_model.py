import math

import pytest
import torch

from engine.config.run_config import ModelConfig
from engine.model.gpt import GPT

VOCAB = 65


def tiny(**kw) -> ModelConfig:
    base = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_multiple=1)  # VOCAB rows
    return ModelConfig(**{**base, **kw})


def test_nanogpt_cpu_parameter_count_by_hand():
    # nanoGPT's char model has the vocabulary's 65 rows, unpadded
    model = GPT(ModelConfig(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_multiple=1), VOCAB)
    per_block = 128 * 384 + 128 * 128 + 2 * 128 * 512 + 2 * 128  # qkv, proj, mlp, 2 LayerNorm gains
    total = 4 * per_block + VOCAB * 128 + 64 * 128 + 128  # + wte (tied head) + wpe + ln_f
    assert model.num_params(non_embedding=False) == total == 804_096
    assert model.num_params() == total - 64 * 128  # nanoGPT's "0.80M"


def test_initial_loss_is_about_log_vocab():
    torch.manual_seed(0)
    model = GPT(tiny(), VOCAB)
    x, y = torch.randint(VOCAB, (2, 4, 16))
    _, loss = model(x, y)
    assert loss.item() == pytest.approx(math.log(VOCAB), rel=0.05)


@pytest.mark.parametrize(
    "switch, delta",
    [
        (dict(pos_emb="rotary"), -16 * 32),  # no learned position table
        (dict(tie_embeddings=False), VOCAB * 32),  # a separate head matrix
        (dict(qk_norm=True), 2 * 2 * 16),  # q and k RMSNorm gains of head size, per layer
        (dict(norm="rmsnorm"), 0),  # same gains, no bias either way
        (dict(mlp="relu2"), 0),
        (dict(bias=True), 2 * (3 * 32 + 32 + 4 * 32 + 32 + 2 * 32) + 32),
    ],
)
def test_switches_change_parameter_counts_as_described(switch, delta):
    base = GPT(tiny(), VOCAB).num_params(non_embedding=False)
    model = GPT(tiny(**switch), VOCAB)
    assert model.num_params(non_embedding=False) == base + delta
    logits, loss = model(torch.randint(VOCAB, (2, 16)), torch.randint(VOCAB, (2, 16)), full_logits=True)
    assert logits.shape == (2, 16, VOCAB) and torch.isfinite(loss)


def test_rotary_model_is_position_aware_without_a_table():
    torch.manual_seed(0)
    model = GPT(tiny(pos_emb="rotary"), VOCAB).eval()
    assert model.wpe is None
    x = torch.randint(VOCAB, (1, 8))
    logits_a, _ = model(x, full_logits=True)
    # Same tokens, one shifted position: causal attention with rotary sees a different context.
    logits_b, _ = model(torch.cat([x[:, :1], x], dim=1)[:, :8], full_logits=True)
    assert not torch.allclose(logits_a[0, 1:], logits_b[0, 1:])


def test_zero_init_projections_and_softcap():
    model = GPT(tiny(zero_init_proj=True, logit_softcap=5.0), VOCAB)
    for block in model.blocks:
        assert torch.count_nonzero(block.attn.c_proj.weight) == 0
        assert torch.count_nonzero(block.mlp.c_proj.weight) == 0
    with torch.no_grad():
        model.lm_head.weight.mul_(1000)  # huge logits before the cap
    logits, _ = model(torch.randint(VOCAB, (1, 16)), full_logits=True)
    assert logits.abs().max() <= 5.0


@pytest.mark.parametrize(
    ("setting", "mlp_runs", "attn_runs"),
    # forward runs per block in one training step: a recomputed part runs twice
    [
        (dict(grad_checkpoint=True), [2, 2], [2, 2]),  # the old switch: full
        (dict(grad_checkpoint="full"), [2, 2], [2, 2]),
        (dict(grad_checkpoint="full", recompute_blocks=1), [2, 1], [2, 1]),
        (dict(grad_checkpoint="mlp"), [2, 2], [1, 1]),
        (dict(grad_checkpoint="mlp", recompute_blocks=1), [2, 1], [1, 1]),
        (dict(grad_checkpoint="mlp", dropout=0.2), [2, 2], [1, 1]),  # the same dropout masks
        (dict(grad_checkpoint="full", dropout=0.2, pos_emb="rotary"), [2, 2], [2, 2]),
    ],
)
def test_each_recompute_mode_gives_the_same_gradients(setting, mlp_runs, attn_runs):
    plain_setting = {k: v for k, v in setting.items() if k not in ("grad_checkpoint", "recompute_blocks")}
    torch.manual_seed(0)
    plain = GPT(tiny(**plain_setting), VOCAB)
    ckpt = GPT(tiny(**setting), VOCAB)
    ckpt.load_state_dict(plain.state_dict())
    runs = {"mlp": [0, 0], "attn": [0, 0]}
    for i, block in enumerate(ckpt.blocks):
        for part in ("mlp", "attn"):
            def count(*_, part=part, i=i):
                runs[part][i] += 1
            getattr(block, part).register_forward_pre_hook(count)  # a recompute stops early
    x = torch.randint(VOCAB, (2, 16))
    for m in (plain, ckpt):
        torch.manual_seed(1)  # the same dropout in both
        m(x, x)[1].backward()
    assert runs == {"mlp": mlp_runs, "attn": attn_runs}
    for a, b in zip(plain.parameters(), ckpt.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad)
    with torch.no_grad():  # no backward to come: one run each, nothing recomputed
        ckpt(x, x)
    assert runs == {"mlp": [n + 1 for n in mlp_runs], "attn": [n + 1 for n in attn_runs]}


def test_generate_extends_and_crops_context():
    torch.manual_seed(0)
    model = GPT(tiny(), VOCAB).eval()
    g = torch.Generator().manual_seed(1)
    out = model.generate(
        torch.zeros((1, 3), dtype=torch.long), 30, temperature=0.8, top_k=5, generator=g
    )
    assert out.shape == (1, 33)  # longer than block_size 16: the context was cropped
    g2 = torch.Generator().manual_seed(1)
    again = model.generate(
        torch.zeros((1, 3), dtype=torch.long), 30, temperature=0.8, top_k=5, generator=g2
    )
    assert torch.equal(out, again)  # its own generator: reproducible
