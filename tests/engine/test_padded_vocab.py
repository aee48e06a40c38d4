"""The padded vocabulary (model.vocab_multiple): the embedding and head get rows up to a multiple
of 64 for the matmuls, the tokenizer's size stays the model's `vocab_size`, the padded rows are
never sampled, exports cut them, older checkpoints (no padding) still load and resume, and the
plan counts the rows the head really computes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny import tiny_overrides

from cockpit.cli import main as cockpit_main
from engine.checkpoint.resume import plan_resume
from engine.checkpoint.store import latest_checkpoint, load_checkpoint
from engine.checkpoint.trained import load_trained
from engine.config.loading import recorded_config
from engine.config.presets import load_preset
from engine.config.run_config import ConfigError, ModelConfig, RunConfig
from engine.data.tokenizers import CharTokenizer
from engine.model.gpt import GPT, padded_vocab_size
from engine.model.sampling import SamplingOptions, generate_tokens
from engine.plan.flops import flops_per_token
from engine.plan.memory import activation_bytes_estimate
from engine.plan.planner import param_shapes, plan_memory

CHARS = "".join(chr(c) for c in range(32, 97))  # 65 characters, as tinyshakespeare's
TINY = dict(n_layer=1, n_head=2, n_embd=16, block_size=8)


@pytest.mark.parametrize(
    "vocab, multiple, padded",
    [
        (50257, 64, 50304),  # GPT-2's BPE: 786 * 64, nanoGPT's and llm.c's figure
        (50257, 128, 50304),  # 393 * 128: the same
        (50257, 256, 50432),  # 197 * 256
        (50257, 1, 50257),  # no padding
        (100277, 64, 100288),  # cl100k_base: 1567 * 64
        (65, 64, 128),
        (64, 64, 64),  # a multiple already: unchanged
        (1, 64, 64),
    ],
)
def test_padded_size_by_hand(vocab, multiple, padded):
    assert padded_vocab_size(vocab, multiple) == padded


def test_padded_size_refuses_nonsense():
    with pytest.raises(ValueError):
        padded_vocab_size(65, 0)
    with pytest.raises(ValueError):
        padded_vocab_size(0, 64)


def test_the_setting_is_validated_in_one_line():
    with pytest.raises(ConfigError, match=r"model\.vocab_multiple: expected a value >= 1, got 0"):
        load_preset("tiny", ["model.vocab_multiple=0"])
    assert load_preset("tiny", []).model.vocab_multiple == 64


def test_the_model_keeps_the_tokenizers_size_and_pads_its_rows():
    model = GPT(ModelConfig(**TINY), len(CHARS))
    assert model.vocab_size == 65 and model.padded_vocab == 128
    assert model.wte.weight.shape == (128, 16) and model.lm_head.weight.shape == (128, 16)
    assert model.wte.weight is model.lm_head.weight  # still tied: one matrix
    unpadded = GPT(ModelConfig(**TINY, vocab_multiple=1), len(CHARS))
    assert unpadded.padded_vocab == 65 and unpadded.lm_head.weight.shape == (65, 16)
    assert model.num_params() - unpadded.num_params() == (128 - 65) * 16


def _huge_padded_logits(model: GPT) -> GPT:
    """The model with its padded rows' logits far above every true one: unmasked, they win."""
    def lift(_module, _inputs, out):
        out = out.clone()
        out[..., model.vocab_size :] = 1e4
        return out

    model.lm_head.register_forward_hook(lift)
    return model.eval()


def test_padded_rows_are_never_sampled():
    torch.manual_seed(0)
    model = _huge_padded_logits(GPT(ModelConfig(**TINY), len(CHARS)))
    idx = torch.randint(len(CHARS), (4, 5))
    raw, _ = model(idx)
    assert (raw[:, -1].argmax(-1) >= model.vocab_size).all()  # what an unmasked argmax picks

    generator = torch.Generator().manual_seed(0)
    for temperature, top_k in ((0.0, None), (1.0, None), (1.0, 5), (2.0, 500)):
        out = model.generate(idx, 30, temperature, top_k, generator)
        assert out[:, 5:].max() < model.vocab_size, (temperature, top_k)


def test_sampling_as_cockpit_sample_streams_never_yields_a_padded_row():
    torch.manual_seed(0)
    model = _huge_padded_logits(GPT(ModelConfig(**TINY), len(CHARS)))
    generator = torch.Generator().manual_seed(0)
    for temperature, top_k in ((0.0, 0), (1.0, 0), (1.0, 3)):
        options = SamplingOptions(max_new_tokens=40, temperature=temperature, top_k=top_k)
        ids = list(generate_tokens(model, [1, 2, 3], options, torch.device("cpu"), generator))
        assert len(ids) == 40 and max(ids) < len(CHARS)
    # and the text decodes: every id is one of the tokenizer's
    CharTokenizer(CHARS).decode(ids)


# ------------------------------------------------------------------------------ exports


@pytest.fixture
def padded_checkpoint(tmp_path: Path) -> Path:
    """A checkpoint of a padded char model (65 -> 128 rows), its padded rows given large
    weights so that leaking one into an export would change what the export computes."""
    cfg = RunConfig()
    for key, value in TINY.items():
        setattr(cfg.model, key, value)
    torch.manual_seed(0)
    model = GPT(cfg.model, len(CHARS))
    with torch.no_grad():
        model.wte.weight[len(CHARS) :] = 5.0
    path = tmp_path / "run" / "ckpt-00000003.pt"
    path.parent.mkdir()
    state = {
        "version": 2,
        "config": cfg.to_dict(),
        "model": model.state_dict(),
        "tokenizer": CharTokenizer(CHARS).to_meta(),
        "step": 3,
    }
    torch.save(state, path)
    return path


def _true_logits(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits, _ = model(idx, full_logits=True)
    return logits[..., : model.vocab_size]


def test_exports_have_the_tokenizers_vocabulary(padded_checkpoint: Path, tmp_path: Path):
    from safetensors import safe_open
    from safetensors.torch import load_file

    trained = load_trained(padded_checkpoint)
    assert trained.model.padded_vocab == 128
    idx = torch.randint(len(CHARS), (2, 8), generator=torch.Generator().manual_seed(1))

    out = tmp_path / "model.safetensors"
    assert cockpit_main(["export", str(padded_checkpoint), "--format", "safetensors", "--out", str(out)]) == 0
    tensors = load_file(str(out))
    assert tensors["wte.weight"].shape == (65, 16) and "lm_head.weight" not in tensors
    with safe_open(str(out), framework="pt") as f:
        meta = f.metadata()
    assert meta["vocab_size"] == "65"
    rebuilt = GPT(ModelConfig(**json.loads(meta["model_config"])), int(meta["vocab_size"]))
    tensors["lm_head.weight"] = tensors["wte.weight"]
    rebuilt.load_state_dict(tensors)  # the metadata's recipe rebuilds the cut shape
    assert torch.equal(_true_logits(rebuilt.eval(), idx), _true_logits(trained.model, idx))

    nano = tmp_path / "nanogpt"
    assert cockpit_main(["export", str(padded_checkpoint), "--format", "nanogpt", "--out", str(nano)]) == 0
    ckpt = torch.load(nano / "ckpt.pt", map_location="cpu", weights_only=True)
    assert ckpt["model_args"]["vocab_size"] == 65
    assert ckpt["model"]["transformer.wte.weight"].shape == (65, 16)
    assert ckpt["model"]["lm_head.weight"].shape == (65, 16)


def test_the_hf_model_of_a_padded_run_gives_its_logits(padded_checkpoint: Path, tmp_path: Path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert cockpit_main(["export", str(padded_checkpoint), "--format", "hf", "--out", str(out)]) == 0
    hf_model, info = transformers.GPT2LMHeadModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info.get("mismatched_keys"), info
    assert hf_model.config.vocab_size == 65
    trained = load_trained(padded_checkpoint)
    idx = torch.randint(len(CHARS), (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hf_logits = hf_model.eval()(idx).logits
    assert hf_logits.shape == (2, 8, 65)
    torch.testing.assert_close(hf_logits, _true_logits(trained.model, idx), atol=1e-5, rtol=0)


# ------------------------------------------------------------------ checkpoints from before


SMALL = tiny_overrides("model.block_size=32", "eval.batches=1", quiet=True)  # 32: the tiny preset's own


def _as_before_padding(run_dir: Path) -> Path:
    """The run's checkpoint and config.json as cockpit wrote them before vocab_multiple existed."""
    path = latest_checkpoint(run_dir)
    state = torch.load(path, map_location="cpu", weights_only=True)
    del state["config"]["model"]["vocab_multiple"]
    torch.save(state, path)
    config = json.loads((run_dir / "config.json").read_text())
    del config["model"]["vocab_multiple"]
    (run_dir / "config.json").write_text(json.dumps(config))
    return path


def test_a_config_stored_without_the_key_means_no_padding():
    assert recorded_config({"model": {"n_layer": 2}})["model"] == {"n_layer": 2, "vocab_multiple": 1}
    assert recorded_config({"model": {"vocab_multiple": 64}})["model"]["vocab_multiple"] == 64
    raw = {"model": {"n_layer": 2}}
    recorded_config(raw)
    assert raw == {"model": {"n_layer": 2}}  # a copy: the caller's dict is left as it was


def test_a_checkpoint_from_before_padding_resumes_with_its_weights(tmp_path: Path):
    from engine.train.trainer import Trainer
    trainer = Trainer(
        load_preset("tiny", [*SMALL, "model.vocab_multiple=1", "train.max_steps=3"]),
        run_dir=tmp_path,
        telemetry=False,
    )
    assert trainer.run() == "finished"
    old = _as_before_padding(tmp_path)
    saved = torch.load(old, map_location="cpu", weights_only=True)["model"]
    vocab = saved["wte.weight"].shape[0]

    assert load_checkpoint(old)["config"]["model"]["vocab_multiple"] == 1
    trained = load_trained(old)  # what `cockpit sample` and `export` read
    assert trained.model.padded_vocab == trained.model.vocab_size == vocab
    assert all(torch.equal(trained.model.state_dict()[k], v) for k, v in saved.items())

    resumed = Trainer(
        load_preset("default"),
        resume=tmp_path,
        resume_overrides=["train.max_steps=5"],
        telemetry=False,
    )
    assert resumed.run() == "finished"
    new = torch.load(latest_checkpoint(tmp_path), map_location="cpu", weights_only=True)
    assert new["step"] == 5 and new["model"]["wte.weight"].shape[0] == vocab
    assert new["config"]["model"]["vocab_multiple"] == 1  # written down from now on


def test_changing_the_padding_on_resume_is_refused_in_one_line():
    saved = {"config": RunConfig().to_dict(), "step": 10}
    del saved["config"]["model"]["vocab_multiple"]  # a run from before: no padding
    with pytest.raises(ConfigError) as refused:
        plan_resume(saved, ["model.vocab_multiple=64"], "runs/old", label="runs/old")
    message = str(refused.value)
    assert "\n" not in message
    assert "cannot change model.vocab_multiple on resume (1 -> 64)" in message
    assert "row count of the embedding and head" in message
    # and resuming it as it is changes nothing
    assert plan_resume(saved, [], "runs/old").config.model.vocab_multiple == 1


# ------------------------------------------------------------------------ the plan


def _gpt2_small(vocab_multiple: int) -> RunConfig:
    # with biases, as nanoGPT's gpt2 (124M) whose counts it prints
    cfg = load_preset("gpt2-small", ["model.bias=true", f"model.vocab_multiple={vocab_multiple}"])
    cfg.train.dtype = "float32"
    return cfg


def test_the_plan_counts_gpt2_smalls_padded_head():
    cfg = _gpt2_small(64)
    shapes = dict(param_shapes(cfg, 50257))
    assert shapes["wte.weight"] == (50304, 768)
    per_block = 768 * 3 * 768 + 3 * 768 + 768 * 768 + 768 + 2 * 768 * 3072 + 3072 + 768 + 4 * 768
    by_hand = 50304 * 768 + 1024 * 768 + 12 * per_block + 2 * 768  # tied head, wpe, blocks, ln_f
    assert cfg.model.bias and by_hand == 124_475_904  # nanoGPT's gpt2: "123.69M" without wpe
    plan = plan_memory(cfg, 50257, "cpu", None)
    assert plan.n_params == by_hand
    unpadded = plan_memory(_gpt2_small(1), 50257, "cpu", None)
    assert plan.weights - unpadded.weights == 4 * 47 * 768  # 47 rows of 768 fp32 values
    # the logits the head computes: the padded row count, as the estimate's vocabulary
    m = cfg.model
    head_rows = [
        activation_bytes_estimate(
            cfg.train.batch_size, m.block_size, m.n_embd, m.n_head, m.n_layer, vocab, 4,
            grad_checkpoint=m.grad_checkpoint,
        )
        for vocab in (50304, 50257)
    ]  # fmt: skip
    assert plan.activations - unpadded.activations == head_rows[0] - head_rows[1] > 0


def test_flops_per_token_of_gpt2_small_count_the_padded_head():
    cfg = _gpt2_small(64)
    with torch.device("meta"):
        model = GPT(cfg.model, 50257)
    assert model.num_params() == 123_689_472  # nanoGPT prints "number of parameters: 123.69M"
    # 6N + 12 * layers * heads * head size * context
    assert flops_per_token(model.num_params(), cfg.model) == 6 * 123_689_472 + 12 * 12 * 12 * 64 * 1024
    assert flops_per_token(model.num_params(), cfg.model) == 855_383_040


def test_the_planner_sees_a_models_shapes_without_initialising_it() -> None:
    """param_shapes builds the model on the meta device with its weights unset: the same names
    and shapes as an initialised model, and `cockpit plan` never imports torch._dynamo
    (a normal_ on meta imported it: a second of CPU in every plan)."""
    import subprocess
    import sys

    from engine.config import load_preset
    from engine.model.gpt import GPT
    from engine.plan.planner import param_shapes

    cfg = load_preset("speedrun-cpu", ["model.value_embeds=2", "model.tie_embeddings=false"])
    model = GPT(cfg.model, 65)
    assert param_shapes(cfg, 65) == [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    probe = (
        "import sys; from engine.config import load_preset; from engine.plan.planner import "
        "param_shapes; param_shapes(load_preset('gpt2-small'), 50257); "
        "print('torch._dynamo' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
