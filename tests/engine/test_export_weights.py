"""`cockpit export` of weights, checked by the tools that read them: safetensors' own loader,
transformers' GPT-2 (logits, greedy generation, tokenizer) and a nanoGPT-layout GPT."""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from command_here import cockpit_here

from cockpit.cli import main as cockpit_main
from engine.checkpoint.trained import load_trained
from engine.config.run_config import ModelConfig
from engine.model.gpt import GPT
from tests.conftest import TIKTOKEN_CACHE

SHORT_RUN = [
    "--set", "train.max_steps=4", "--set", "eval.interval=2", "--set", "eval.batches=1",
    "--set", "checkpoint.interval=2", "--set", "sample.interval=0",
]  # fmt: skip


def _env(base: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TERM": "dumb",
        "COCKPIT_CACHE_DIR": str(base / "cockpit-cache"),  # conftest's: the corpus prepared once
        "XDG_CONFIG_HOME": str(base / "xdg-config"),
        "TIKTOKEN_CACHE_DIR": str(TIKTOKEN_CACHE),
    }


def cockpit(base: Path, *args: str) -> subprocess.CompletedProcess:
    return cockpit_here(*args, env=_env(base))


def _train(factory: pytest.TempPathFactory, name: str, *sets: str) -> Path:
    run_dir = factory.mktemp(name) / "run"
    result = cockpit(
        factory.getbasetemp(),
        "train", "--headless", "--preset", "tiny", "--run-dir", str(run_dir), *SHORT_RUN, *sets,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return run_dir


@pytest.fixture(scope="module")
def char_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _train(tmp_path_factory, "char")


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (TIKTOKEN_CACHE.exists() and any(TIKTOKEN_CACHE.iterdir())):
        pytest.skip(f"no tiktoken cache at {TIKTOKEN_CACHE}")
    return _train(
        tmp_path_factory, "bpe", "--set", "data.tokenizer=r50k_base", "--set", "model.bias=true"
    )


@pytest.fixture(scope="module")
def hf_exports(char_run: Path, bpe_run: Path) -> dict[str, tuple[Path, Path]]:
    """{kind: (run dir, exported directory)}: the char run has no biases, the BPE run has them."""
    exports = {}
    with pytest.MonkeyPatch.context() as env:  # conftest's environment is per test, not per module
        env.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE))
        for kind, run_dir in (("char", char_run), ("bpe", bpe_run)):
            assert cockpit_main(["export", str(run_dir), "--format", "hf"]) == 0
            exports[kind] = (run_dir, run_dir / "export" / "hf")
    return exports


def _variant_checkpoint(run_dir: Path, out: Path, **model_changes: object) -> Path:
    """The run's best.pt with other model switches (and weights of that shape): a checkpoint as a
    run with those switches would have written it."""
    state = torch.load(run_dir / "best.pt", map_location="cpu", weights_only=True)
    state["config"]["model"].update(model_changes)
    model_cfg = ModelConfig(**state["config"]["model"])
    torch.manual_seed(0)
    state["model"] = GPT(model_cfg, state["tokenizer"]["vocab_size"]).state_dict()
    torch.save(state, out)
    return out


def _some_ids(vocab_size: int, length: int = 24) -> torch.Tensor:
    return torch.randint(0, vocab_size, (2, length), generator=torch.Generator().manual_seed(1))


def _cockpit_logits(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    """The logits of the tokenizer's ids: an export cuts the padded vocabulary's rows."""
    with torch.no_grad():
        logits, _ = model(idx, full_logits=True)
    return logits[..., : model.vocab_size]


# ---------------------------------------------------------------------- safetensors


def test_safetensors_reloads_into_the_same_model(char_run: Path, tmp_path: Path):
    from safetensors import safe_open
    from safetensors.torch import load_file

    result = cockpit(tmp_path, "export", str(char_run), "--format", "safetensors")
    assert result.returncode == 0, result.stderr
    out = char_run / "export" / "model.safetensors"
    assert f"wrote {out}" in result.stdout
    assert f"exported from {char_run / 'best.pt'} (step 4, val loss " in result.stdout

    with safe_open(str(out), framework="pt") as f:
        meta = f.metadata()
    assert meta["tokenizer"] == "char" and meta["step"] == "4"
    assert json.loads(meta["tied_weights"]) == {"lm_head.weight": "wte.weight"}
    tensors = load_file(str(out))
    assert "lm_head.weight" not in tensors  # stored once
    tensors["lm_head.weight"] = tensors["wte.weight"]
    rebuilt = GPT(ModelConfig(**json.loads(meta["model_config"])), int(meta["vocab_size"]))
    rebuilt.load_state_dict(tensors)
    rebuilt.eval()

    trained = load_trained(char_run)
    idx = _some_ids(trained.tokenizer.vocab_size)
    assert torch.equal(_cockpit_logits(rebuilt, idx), _cockpit_logits(trained.model, idx))


def test_safetensors_takes_any_model_shape(char_run: Path, tmp_path: Path):
    from safetensors import safe_open
    from safetensors.torch import load_file

    modern = dict(
        pos_emb="rotary", norm="rmsnorm", qk_norm=True, mlp="relu2", logit_softcap=15.0,
        tie_embeddings=False,
    )  # fmt: skip
    ckpt = _variant_checkpoint(char_run, tmp_path / "modern.pt", **modern)
    out = tmp_path / "modern.safetensors"
    assert cockpit_main(["export", str(ckpt), "--format", "safetensors", "--out", str(out)]) == 0
    with safe_open(str(out), framework="pt") as f:
        meta = f.metadata()
    assert json.loads(meta["tied_weights"]) == {}
    rebuilt = GPT(ModelConfig(**json.loads(meta["model_config"])), int(meta["vocab_size"]))
    rebuilt.load_state_dict(load_file(str(out)))
    rebuilt.eval()
    trained = load_trained(ckpt)
    idx = _some_ids(trained.tokenizer.vocab_size)
    assert torch.equal(_cockpit_logits(rebuilt, idx), _cockpit_logits(trained.model, idx))


# ---------------------------------------------------------------------- Hugging Face


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_hf_gpt2_gives_the_same_logits_and_greedy_text(hf_exports, kind: str):
    transformers = pytest.importorskip("transformers")
    run_dir, out = hf_exports[kind]
    hf_model, info = transformers.GPT2LMHeadModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info.get("mismatched_keys"), info
    hf_model.eval()
    trained = load_trained(run_dir)
    config = json.loads((out / "config.json").read_text())
    assert config["activation_function"] == "gelu" and config["tie_word_embeddings"] is True
    assert config["eos_token_id"] == (50256 if kind == "bpe" else None)

    idx = _some_ids(trained.tokenizer.vocab_size)
    with torch.no_grad():
        hf_logits = hf_model(idx).logits
    torch.testing.assert_close(hf_logits, _cockpit_logits(trained.model, idx), atol=1e-5, rtol=0)

    prompt, new = idx[:1, :8], 16
    ours = prompt
    for _ in range(new):
        ours = torch.cat((ours, trained.model.next_token(ours, temperature=0)), dim=1)
    theirs = hf_model.generate(
        prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, do_sample=False
    )
    assert theirs.tolist() == ours.tolist()


def test_hf_export_writes_the_text_cockpit_sample_writes(hf_exports, tmp_path):
    """The issue's promise end to end: the exported directory, loaded by transformers with its
    own tokenizer, continues a prompt greedily with exactly the text `cockpit sample` prints."""
    transformers = pytest.importorskip("transformers")
    run_dir, out = hf_exports["bpe"]
    prompt, new = "ROMEO: what light", 24
    sampled = cockpit(
        tmp_path, "sample", str(run_dir), "--prompt", prompt, "--tokens", str(new),
        "--temperature", "0",
    )  # fmt: skip
    assert sampled.returncode == 0, sampled.stderr
    tokenizer = transformers.GPT2TokenizerFast.from_pretrained(out)
    model = transformers.GPT2LMHeadModel.from_pretrained(out).eval()
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    generated = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
        pad_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    assert sampled.stdout == tokenizer.decode(generated[0]) + "\n"


def test_hf_tokenizer_encodes_like_tiktoken(hf_exports):
    transformers = pytest.importorskip("transformers")
    import tiktoken

    _, out = hf_exports["bpe"]
    tokenizer = transformers.GPT2TokenizerFast.from_pretrained(out)
    encoding = tiktoken.get_encoding("r50k_base")
    texts = [
        "Hello world",
        "  leading spaces and trailing   ",
        "lines\n\nwith\r\n breaks\n\n\n",
        "naïve café, Ελληνικά, 日本語のテキスト, emoji 🎉👩‍👩‍👧",
        "def f(x):\n    return x['key'] + 3.14159 # it's 2024, isn't it?",
        "I'LL've they'd 's 123456789 \t\ttabs",
    ]
    for text in texts:
        ids = tokenizer(text)["input_ids"]
        assert ids == encoding.encode_ordinary(text), text
        assert tokenizer.decode(ids) == text
    assert tokenizer.eos_token == "<|endoftext|>"
    assert tokenizer.convert_tokens_to_ids("<|endoftext|>") == 50256


def test_hf_char_run_writes_its_characters_instead_of_a_tokenizer(hf_exports):
    run_dir, out = hf_exports["char"]
    chars = json.loads((out / "cockpit_chars.json").read_text(encoding="utf-8"))
    assert "".join(chars) == load_trained(run_dir).tokenizer.chars
    assert not (out / "vocab.json").exists() and not (out / "merges.txt").exists()


@pytest.mark.parametrize(
    ("switch", "value", "gpt2_has"),
    [
        ("pos_emb", "rotary", "has learned positions"),
        ("norm", "rmsnorm", "normalises with LayerNorm"),
        ("qk_norm", True, "has no QK-norm"),
        ("mlp", "relu2", "has a GELU MLP"),
        ("logit_softcap", 30.0, "has no logit soft-cap"),
        ("tie_embeddings", False, "ties its output head"),
    ],
)
def test_hf_refuses_a_model_that_is_not_gpt2(char_run, tmp_path, capsys, switch, value, gpt2_has):
    ckpt = _variant_checkpoint(char_run, tmp_path / "variant.pt", **{switch: value})
    out = tmp_path / "hf"
    assert cockpit_main(["export", str(ckpt), "--format", "hf", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cockpit: "), err
    said = f"model.{switch} = {value!r}: Hugging Face's GPT-2 {gpt2_has}"
    assert said in err and "--format safetensors" in err
    assert not out.exists()


# ---------------------------------------------------------------------- nanoGPT


NANOGPT_MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout")


class _RefLayerNorm(nn.Module):
    def __init__(self, n: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class _RefAttention(nn.Module):
    def __init__(self, a: dict) -> None:
        super().__init__()
        self.n_head = a["n_head"]
        self.c_attn = nn.Linear(a["n_embd"], 3 * a["n_embd"], bias=a["bias"])
        self.c_proj = nn.Linear(a["n_embd"], a["n_embd"], bias=a["bias"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        heads = [z.view(b, t, self.n_head, -1).transpose(1, 2) for z in self.c_attn(x).split(c, 2)]
        q, k, v = heads
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        scores = scores.masked_fill(torch.ones(t, t).triu(1).bool(), float("-inf"))
        y = scores.softmax(-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class _RefMLP(nn.Module):
    def __init__(self, a: dict) -> None:
        super().__init__()
        self.c_fc = nn.Linear(a["n_embd"], 4 * a["n_embd"], bias=a["bias"])
        self.c_proj = nn.Linear(4 * a["n_embd"], a["n_embd"], bias=a["bias"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))


class _RefBlock(nn.Module):
    def __init__(self, a: dict) -> None:
        super().__init__()
        self.ln_1, self.attn = _RefLayerNorm(a["n_embd"], a["bias"]), _RefAttention(a)
        self.ln_2, self.mlp = _RefLayerNorm(a["n_embd"], a["bias"]), _RefMLP(a)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPTLayout(nn.Module):
    """nanoGPT's GPT as its checkpoints name it, written for this test from its key layout."""

    def __init__(self, a: dict) -> None:
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(a["vocab_size"], a["n_embd"]),
                wpe=nn.Embedding(a["block_size"], a["n_embd"]),
                h=nn.ModuleList(_RefBlock(a) for _ in range(a["n_layer"])),
                ln_f=_RefLayerNorm(a["n_embd"], a["bias"]),
            )
        )
        self.lm_head = nn.Linear(a["n_embd"], a["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        tr = self.transformer
        x = tr.wte(idx) + tr.wpe(torch.arange(idx.size(1)))
        for block in tr.h:
            x = block(x)
        return self.lm_head(tr.ln_f(x))


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_nanogpt_checkpoint_loads_into_nanogpts_layout(char_run, bpe_run, tmp_path, capsys, kind):
    run_dir, bias = (char_run, False) if kind == "char" else (bpe_run, True)
    out = tmp_path / "nanogpt"
    assert cockpit_main(["export", str(run_dir), "--format", "nanogpt", "--out", str(out)]) == 0
    printed = capsys.readouterr().out

    ckpt = torch.load(out / "ckpt.pt", map_location="cpu", weights_only=True)
    trained = load_trained(run_dir)
    args = ckpt["model_args"]
    assert set(args) == set(NANOGPT_MODEL_ARGS)
    assert args["bias"] is bias and args["vocab_size"] == trained.tokenizer.vocab_size
    assert ckpt["iter_num"] == 4 and ckpt["best_val_loss"] == trained.state["best_val"]
    if kind == "bpe":  # sample.py decodes with GPT-2's BPE when no dataset names a meta.pkl
        assert "dataset" not in ckpt["config"] and not (out / "meta.pkl").exists()
        assert "GPT-2's BPE (no meta.pkl): the same as r50k_base" in printed
    else:
        assert ckpt["config"]["dataset"] == "cockpit_pydoc"
        assert "data/cockpit_pydoc/meta.pkl" in printed

    reference = NanoGPTLayout(args)
    expected = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in ckpt["model"].items()} == expected
    reference.load_state_dict(ckpt["model"], strict=True)
    reference.eval()
    idx = _some_ids(args["vocab_size"])
    with torch.no_grad():
        theirs = reference(idx)
    torch.testing.assert_close(theirs, _cockpit_logits(trained.model, idx), atol=1e-5, rtol=0)
    if kind == "bpe":
        return
    with (out / "meta.pkl").open("rb") as f:
        meta = pickle.load(f)
    assert meta["vocab_size"] == len(trained.tokenizer.chars)
    assert "".join(meta["itos"][i] for i in range(meta["vocab_size"])) == trained.tokenizer.chars
    assert all(meta["stoi"][c] == i for i, c in meta["itos"].items())


def test_nanogpt_refuses_rotary_in_one_line(char_run, tmp_path):
    ckpt = _variant_checkpoint(char_run, tmp_path / "rotary.pt", pos_emb="rotary")
    result = cockpit(tmp_path, "export", str(ckpt), "--format", "nanogpt")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "model.pos_emb = 'rotary': nanoGPT's GPT has learned positions" in result.stderr
    assert "--format safetensors" in result.stderr
    assert not (tmp_path / "export").exists()


# ---------------------------------------------------------------------- the command


def test_an_existing_out_is_kept_unless_force(char_run, tmp_path, capsys):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    argv = ["export", str(char_run), "--format", "nanogpt", "--out", str(out)]
    assert cockpit_main(argv) == 2
    err = capsys.readouterr().err
    assert "already exists; pass --force" in err and err.count("\n") == 1
    assert not (out / "ckpt.pt").exists()
    assert cockpit_main([*argv, "--force"]) == 0
    assert (out / "ckpt.pt").exists() and (out / "mine.txt").read_text() == "keep me"


def test_a_directory_without_checkpoint_is_one_line(tmp_path, capsys):
    assert cockpit_main(["export", str(tmp_path), "--format", "hf"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cockpit: ") and "no checkpoint" in err and err.count("\n") == 1
    assert cockpit_main(["export", str(tmp_path / "nothing"), "--format", "safetensors"]) == 2
    assert "no such run directory or checkpoint file" in capsys.readouterr().err


def test_a_missing_package_is_one_line(char_run, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)  # as if it were not installed
    out = tmp_path / "model.safetensors"
    assert (
        cockpit_main(["export", str(char_run), "--format", "safetensors", "--out", str(out)]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("cockpit: export --format safetensors needs the safetensors package")
    assert "pip install safetensors" in err and err.count("\n") == 1
    assert not out.exists()
