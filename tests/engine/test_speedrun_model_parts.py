"""model.value_embeds and model.unet_skips: the modded-nanogpt speedrun's two model parts.

Each is checked against a hand-computed forward (known weights, the sum a block must see), in
the parameter and FLOP counts, in the memory estimate (against the tensors autograd keeps), in
the optimizer's groups, under torch.compile, and switched off against today's numbers.
"""

from __future__ import annotations

import pytest
import torch

from engine.config.loading import config_from_dict
from engine.config.run_config import ConfigError, ModelConfig, OptimConfig, RunConfig
from engine.model.gpt import GPT, value_embed_tables
from engine.optim.optimizers import build_optimizer
from engine.plan.flops import flops_per_token, matmul_params
from engine.plan.memory import activation_bytes_estimate, speedrun_parts_bytes
from engine.plan.planner import plan_memory

VOCAB = 30  # padded to 64 rows (model.vocab_multiple's default)
ROWS = 64


def tiny(**kw) -> ModelConfig:
    return ModelConfig(**{"n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 8, **kw})


def built(cfg: ModelConfig, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(cfg, VOCAB)


def tokens(b: int = 3, t: int = 8, seed: int = 1) -> torch.Tensor:
    return torch.randint(VOCAB, (b, t), generator=torch.Generator().manual_seed(seed))


def block_io(model: GPT, idx: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each block's input and output in one forward pass."""
    inputs, outputs, hooks = [], [], []
    for block in model.blocks:
        hooks.append(block.register_forward_pre_hook(lambda _m, args: inputs.append(args[0])))
        hooks.append(block.register_forward_hook(lambda _m, _a, out: outputs.append(out)))
    with torch.no_grad():
        model(idx)
    for h in hooks:
        h.remove()
    return inputs, outputs


def saved_activation_bytes(model: GPT, idx: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd keeps for backward, weights excluded."""
    weights = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(idx, idx)
    return sum(kept.values())


# ------------------------------------------------------------------ switched off: today's model


@pytest.mark.parametrize(
    ("pos_emb", "losses"),
    [
        # recorded with the model before these switches existed (seed 0, AdamW, CPU float32)
        ("learned", (3.4094600677490234, 3.4006731510162354, 3.3929319381713867)),
        ("rotary", (3.412794351577759, 3.393099546432495, 3.412816047668457)),
    ],
)
def test_switched_off_the_model_is_todays(pos_emb, losses):
    model = built(tiny(pos_emb=pos_emb))
    names = [n for n in model.state_dict() if "value_embed" in n or "skip" in n or "ve_" in n]
    assert names == []
    # the hand count: the tied 64-row embedding, 2 blocks of 12h^2 + 2h, ln_f (+ positions)
    assert model.num_params() == 64 * 16 + 2 * (12 * 16 * 16 + 2 * 16) + 16 == 7248
    assert model.num_params(non_embedding=False) == 7248 + (8 * 16 if pos_emb == "learned" else 0)
    optimizer = build_optimizer(model, OptimConfig(), "cpu")
    batches = torch.Generator().manual_seed(1)
    got = []
    for _ in range(3):
        idx = torch.randint(VOCAB, (4, 9), generator=batches)
        _, loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        got.append(loss.item())
    assert got == pytest.approx(losses, abs=1e-5)


@pytest.mark.parametrize("switch", [{"value_embeds": 1}, {"unet_skips": True}])
def test_a_switch_with_its_scalars_at_zero_computes_the_plain_model_bit_for_bit(switch):
    plain = built(tiny())
    model = built(tiny(**switch), seed=5)
    model.load_state_dict(plain.state_dict(), strict=False)  # the shared weights: the plain's
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ve_lambda" in name or name == "skip_weights":
                p.zero_()
    idx = tokens()
    assert torch.equal(model(idx, idx)[1], plain(idx, idx)[1])


# ------------------------------------------------------------------ value embeddings


def test_value_embed_tables_feed_the_first_and_the_last_blocks():
    assert value_embed_tables(4, 0) == [None] * 4
    assert value_embed_tables(2, 1) == [0, 0]
    assert value_embed_tables(3, 1) == [0, None, 0]
    assert value_embed_tables(6, 2) == [0, 1, None, None, 0, 1]
    with pytest.raises(ValueError):
        value_embed_tables(3, 2)


def test_value_embeds_shapes_and_parameter_names():
    model = built(tiny(n_layer=5, value_embeds=2))
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert shapes["value_embeds.0.weight"] == shapes["value_embeds.1.weight"] == (ROWS, 16)
    with_lambda = [i for i in range(5) if f"blocks.{i}.attn.ve_lambda" in shapes]
    assert with_lambda == [0, 1, 3, 4]  # the middle block takes none
    assert shapes["blocks.0.attn.ve_lambda"] == (1,)
    assert model.blocks[0].attn.ve_lambda.item() == 1.0


@pytest.mark.parametrize("pos_emb", ["learned", "rotary"])
def test_a_block_adds_its_scaled_value_embedding_to_the_attention_values(pos_emb):
    # Block 0 with zero query/key/value projections (uniform causal attention over nothing but
    # the value embedding), an identity output projection and a silent MLP: its output is
    # x + lambda * (the running mean of E[token] over the positions so far)
    model = built(tiny(value_embeds=1, pos_emb=pos_emb))
    attn, h = model.blocks[0].attn, 16
    with torch.no_grad():
        attn.c_attn.weight.zero_()
        attn.c_proj.weight.copy_(torch.eye(h))
        model.blocks[0].mlp.c_proj.weight.zero_()
        attn.ve_lambda.fill_(0.5)
    idx = tokens(b=2, t=5)
    inputs, outputs = block_io(model, idx)
    table = model.value_embeds[0].weight.detach()[idx]  # (2, 5, h)
    running_mean = table.cumsum(1) / torch.arange(1, 6).view(1, 5, 1)
    x = model.wte.weight.detach()[idx]
    if pos_emb == "learned":
        x = x + model.wpe.weight.detach()[:5]
    assert torch.allclose(inputs[0], x)
    assert torch.allclose(outputs[0], x + 0.5 * running_mean, atol=1e-6)


def test_value_embeds_counts_and_flops_by_hand():
    base = tiny(n_layer=4, n_embd=32, pos_emb="learned")
    cfg = tiny(n_layer=4, n_embd=32, pos_emb="learned", value_embeds=2)
    plain, model = built(base), built(cfg)
    tables, lambdas = 2 * ROWS * 32, 4  # two 64 x 32 tables; one scalar in each of the 4 blocks
    assert model.num_params(non_embedding=False) == plain.num_params(non_embedding=False) + tables + lambdas
    # the tables are looked up, not multiplied: FLOPs count only the lambdas
    assert model.num_params() == plain.num_params() + lambdas
    attention = 12 * 4 * 2 * 16 * 8  # 12 * L * H * Q * T
    assert flops_per_token(model.num_params(), cfg) == 6 * (plain.num_params() + 4) + attention
    plan = plan_memory(RunConfig(model=cfg), VOCAB, "cpu", None)
    assert plan.n_params == model.num_params(non_embedding=False)
    assert matmul_params(plan.n_params, cfg, VOCAB) == model.num_params()


@pytest.mark.parametrize(
    "kw",
    [
        {"value_embeds": 1},
        {"value_embeds": 2, "pos_emb": "rotary", "qk_norm": True},
        {"value_embeds": 2, "grad_checkpoint": "full"},
        {"value_embeds": 2, "grad_checkpoint": "mlp"},
        {"value_embeds": 2, "grad_checkpoint": "full", "recompute_blocks": 2},
    ],
)
def test_value_embeds_memory_estimate_is_what_autograd_keeps(kw):
    kw = {"n_layer": 4, "n_embd": 32, "block_size": 32, **kw}
    off = {k: v for k, v in kw.items() if k != "value_embeds"}
    idx = tokens(b=4, t=32)
    measured = saved_activation_bytes(built(tiny(**kw)), idx) - saved_activation_bytes(
        built(tiny(**off)), idx
    )
    cfg = tiny(**kw)
    full = cfg.grad_checkpoint == "full"
    estimate = speedrun_parts_bytes(
        4, 32, 32, 4, 4, value_embeds=cfg.value_embeds,
        full_recompute_blocks=cfg.recomputed_blocks if full else 0,
    )  # fmt: skip
    assert estimate == measured > 0
    args = (4, 32, 32, 2, 4, ROWS, 4)
    opts = {"grad_checkpoint": cfg.grad_checkpoint, "recompute_blocks": cfg.recompute_blocks}
    assert activation_bytes_estimate(*args, **opts, value_embeds=cfg.value_embeds) == (
        activation_bytes_estimate(*args, **opts) + estimate
    )


def test_the_planner_counts_the_tables_and_their_activations():
    def plan(**kw):
        cfg = RunConfig(model=tiny(n_layer=4, **kw))
        cfg.train.batch_size = 2
        return plan_memory(cfg, VOCAB, "cpu", None)

    off, on = plan(), plan(value_embeds=2)
    extra = 2 * ROWS * 16 + 4
    assert on.weights - off.weights == on.gradients - off.gradients == 4 * extra
    # AdamW's two moments, and a step counter for each of the 6 new tensors
    assert on.optimizer - off.optimizer == 8 * extra + 4 * 6
    assert on.activations - off.activations == speedrun_parts_bytes(2, 8, 16, 4, 4, value_embeds=2)


# ------------------------------------------------------------------ U-net skips


def test_unet_skips_shapes():
    for n_layer, skips in ((2, 1), (3, 1), (4, 2), (7, 3)):
        model = built(tiny(n_layer=n_layer, unet_skips=True))
        assert model.skip_weights.shape == (skips,)
        assert torch.equal(model.skip_weights.detach(), torch.ones(skips))


def test_a_mirror_block_takes_its_skip_weighted_by_hand():
    # 4 blocks: block 3 takes block 0's output, block 2 block 1's (its own input, again)
    model = built(tiny(n_layer=4, unet_skips=True))
    with torch.no_grad():
        model.skip_weights.copy_(torch.tensor([0.3, -0.7]))
    inputs, outputs = block_io(model, tokens())
    assert torch.equal(inputs[1], outputs[0])
    assert torch.allclose(inputs[2], outputs[1] - 0.7 * outputs[1])
    assert torch.allclose(inputs[3], outputs[2] + 0.3 * outputs[0])


def test_the_middle_block_of_an_odd_count_takes_no_skip():
    model = built(tiny(n_layer=3, unet_skips=True))
    with torch.no_grad():
        model.skip_weights.fill_(0.25)
    inputs, outputs = block_io(model, tokens())
    assert torch.equal(inputs[1], outputs[0])
    assert torch.allclose(inputs[2], outputs[1] + 0.25 * outputs[0])


def test_unet_skips_counts_flops_and_memory_by_hand():
    base, cfg = tiny(n_layer=4), tiny(n_layer=4, unet_skips=True)
    plain, model = built(base), built(cfg)
    assert model.num_params() == plain.num_params() + 2  # two skip weights
    assert flops_per_token(model.num_params(), cfg) == flops_per_token(plain.num_params(), base) + 12
    # even count: the first block of the second half keeps its input's source twice (4*b*s*h)
    assert speedrun_parts_bytes(2, 8, 16, 4, 4, unet_skips=True) == 4 * 2 * 8 * 16
    assert speedrun_parts_bytes(2, 8, 16, 3, 4, unet_skips=True) == 0
    idx = tokens(b=4, t=8)
    for n_layer in (3, 4):
        on, off = built(tiny(n_layer=n_layer, unet_skips=True)), built(tiny(n_layer=n_layer))
        measured = saved_activation_bytes(on, idx) - saved_activation_bytes(off, idx)
        assert measured == speedrun_parts_bytes(4, 8, 16, n_layer, 4, unet_skips=True)


# ------------------------------------------------------------------ both: training parts


def test_gradients_reach_the_new_parameters():
    model = built(tiny(n_layer=2, value_embeds=1, unet_skips=True))
    idx = tokens()
    model(idx, idx)[1].backward()
    table = model.value_embeds[0].weight.grad
    used = torch.zeros(ROWS, dtype=torch.bool)
    used[idx.unique()] = True
    assert table[used].abs().sum(1).gt(0).all() and table[~used].eq(0).all()
    for p in (model.blocks[0].attn.ve_lambda, model.blocks[1].attn.ve_lambda, model.skip_weights):
        assert p.grad is not None and p.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["adamw", "muon"])
def test_the_tables_decay_as_embeddings_and_the_scalars_do_not(name):
    model = built(tiny(n_layer=2, value_embeds=1, unet_skips=True))
    optimizer = build_optimizer(model, OptimConfig(name=name, weight_decay=0.1), "cpu")
    group_of = {id(p): g for g in optimizer.param_groups for p in g["params"]}
    table = model.value_embeds[0].weight
    assert group_of[id(table)]["weight_decay"] == 0.1
    assert group_of[id(table)] is group_of[id(model.wte.weight)]  # with the token embedding
    for p in (model.blocks[0].attn.ve_lambda, model.skip_weights):
        assert group_of[id(p)]["weight_decay"] == 0.0
    if name == "muon":  # Muon takes the blocks' matrices only; the new ones are AdamW's
        muon = optimizer.optimizers[0]
        mine = {id(p) for g in muon.param_groups for p in g["params"]}
        assert not mine & {id(table), id(model.skip_weights), id(model.blocks[0].attn.ve_lambda)}


def test_recompute_gives_the_same_loss_and_gradients():
    kw = {"n_layer": 2, "value_embeds": 1, "unet_skips": True}
    plain, full = built(tiny(**kw)), built(tiny(**kw, grad_checkpoint="full"))
    idx = tokens()
    for model in (plain, full):
        model(idx, idx)[1].backward()
    for (name, p), q in zip(plain.named_parameters(), full.parameters(), strict=True):
        assert torch.allclose(p.grad, q.grad, atol=1e-6), name


def test_under_bf16_autocast_the_values_keep_one_dtype():
    # the lookup is float32 whatever the autocast: added to bfloat16 values unconverted, it
    # would make them float32, and attention refuses mixed dtypes
    model = built(tiny(n_layer=2, value_embeds=1, unet_skips=True))
    idx = tokens()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, loss = model(idx, idx)
    loss.backward()
    assert torch.isfinite(loss) and model.value_embeds[0].weight.grad.abs().sum() > 0


def test_compiled_equals_eager():
    torch._dynamo.reset()
    model = built(tiny(n_layer=2, value_embeds=1, unet_skips=True, pos_emb="rotary"))
    idx = tokens()
    _, eager = model(idx, idx)
    eager.backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    _, compiled = torch.compile(model, backend="aot_eager", fullgraph=True)(idx, idx)
    compiled.backward()
    assert abs(compiled.item() - eager.item()) <= 1e-6
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, expected[n], atol=1e-6), n


# ------------------------------------------------------------------ settings, exports, resume


def test_settings_that_cannot_be_built_are_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"model.value_embeds \(3\) needs 6 blocks"):
        config_from_dict({"model": {"n_layer": 4, "value_embeds": 3}})
    with pytest.raises(ConfigError, match="model.unet_skips needs at least 2 blocks"):
        config_from_dict({"model": {"n_layer": 1, "unet_skips": True}})
    cfg = config_from_dict({"model": {"n_layer": 4, "value_embeds": 2, "unet_skips": True}})
    assert (cfg.model.value_embeds, cfg.model.unet_skips) == (2, True)


@pytest.mark.parametrize(
    ("switch", "says"),
    [
        ({"value_embeds": 1}, "model.value_embeds = 1: nanoGPT's GPT has no value embeddings"),
        ({"unet_skips": True}, "model.unet_skips = True: nanoGPT's GPT has no skip connections"),
    ],
)
def test_gpt2_layouts_refuse_them_naming_the_setting(switch, says):
    from engine.export import ExportError
    from engine.export.weights_source import refuse_unless_gpt2_shaped

    with pytest.raises(ExportError) as refused:
        refuse_unless_gpt2_shaped(tiny(**switch), "nanoGPT's GPT")
    assert says in str(refused.value) and "\n" not in str(refused.value)
    refuse_unless_gpt2_shaped(tiny(), "nanoGPT's GPT")  # off: exported as before


@pytest.mark.parametrize("override", ["model.value_embeds=1", "model.unet_skips=true"])
def test_turning_one_on_at_resume_is_refused(override):
    from engine.checkpoint.resume import plan_resume

    saved = {"config": RunConfig(model=tiny()).to_dict(), "step": 10}
    del saved["config"]["model"]["value_embeds"], saved["config"]["model"]["unet_skips"]
    with pytest.raises(ConfigError, match=f"cannot change {override.split('=')[0]} on resume"):
        plan_resume(saved, [override], "runs/old")
    # a run from before the switches resumes with them off
    resumed = plan_resume(saved, [], "runs/old").config.model
    assert (resumed.value_embeds, resumed.unet_skips) == (0, False)


def test_weights_fix_the_switches_for_init_from():
    from engine.checkpoint.init_weights import SHAPE_KEYS

    assert {"value_embeds", "unet_skips"} <= set(SHAPE_KEYS)
