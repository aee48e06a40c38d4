"""Starting a run from existing weights (`--init-from SOURCE`, `model.init_from`): a small GPT-2
made and saved by transformers in the test gives cockpit the logits transformers computes, and
fine-tuning it lowers its val loss; a nanoGPT ckpt.pt, a cockpit checkpoint, run directory and
safetensors export load with their logits; every bad source is refused in one line."""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from engine.checkpoint.init_from import open_source
from engine.checkpoint.init_source import InitFromError, same_source
from engine.checkpoint.source_fit import (
    apply_shape,
    check_fits,
    check_tokenizer_name,
    check_vocabulary,
    load_into,
    shaped_overrides,
)
from engine.config.run_config import ConfigError, ModelConfig, RunConfig
from engine.data.tokenizers import CharTokenizer
from engine.model.gpt import GPT

transformers = pytest.importorskip("transformers")

# a corpus of a few words in many orders: a small model learns it in a few dozen steps
WORDS = ("the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "red", "box")


def corpus_text(n_lines: int = 600) -> str:
    rng = torch.Generator().manual_seed(7)
    lines = []
    for _ in range(n_lines):
        picks = torch.randint(0, len(WORDS), (6,), generator=rng).tolist()
        lines.append(" ".join(WORDS[i] for i in picks) + ".")
    return "\n".join(lines) + "\n"


TEXT = corpus_text()
CHARS = "".join(sorted(set(TEXT)))


def tiny_gpt2(vocab: int, seed: int = 0, **changes: object) -> object:
    """transformers' GPT-2 at a tiny size, in eval mode (its dropout off)."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, n_positions=64, vocab_size=vocab, **changes
    )
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def hf_char(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    """(the transformers model, its save_pretrained directory) with the corpus's characters as
    its vocabulary (cockpit_chars.json, as cockpit's own HF export of a char run writes it)."""
    model = tiny_gpt2(len(CHARS))
    folder = tmp_path_factory.mktemp("hf") / "gpt2-char"
    model.save_pretrained(folder)
    (folder / "cockpit_chars.json").write_text(json.dumps(list(CHARS)))
    return model, folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "words.txt"
    path.write_text(TEXT)
    return path


def cockpit_model(source_dir: Path | str, **model: object) -> GPT:
    """A cockpit GPT started from `source_dir`, as a run builds it."""
    source = open_source(str(source_dir))
    cfg = ModelConfig(**model)
    apply_shape(cfg, source)
    gpt = GPT(cfg, source.vocab_size)
    load_into(gpt, source)
    return gpt.eval()


def logits_of(model: GPT, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits, _ = model(ids, full_logits=True)
    return logits[..., : model.vocab_size]


def ids(vocab: int, t: int = 64, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (2, t), generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------ Hugging Face GPT-2


def test_a_hf_gpt2_gives_cockpit_transformers_logits(hf_char):
    hf, folder = hf_char
    model = cockpit_model(folder)
    x = ids(len(CHARS))
    with torch.no_grad():
        expected = hf(x).logits
    assert torch.allclose(logits_of(model, x), expected, atol=1e-5, rtol=0)
    # gelu_new is the tanh GELU: the exact one would give other logits
    assert model.cfg.mlp == "gelu_tanh" and model.cfg.bias
    assert (model.cfg.n_layer, model.cfg.n_embd, model.cfg.block_size) == (2, 32, 64)


def test_a_pytorch_model_bin_loads_as_the_safetensors_does(hf_char, tmp_path):
    hf, folder = hf_char
    bin_dir = tmp_path / "gpt2-bin"
    bin_dir.mkdir()
    for name in ("config.json", "cockpit_chars.json"):
        shutil.copy(folder / name, bin_dir / name)
    torch.save(hf.state_dict(), bin_dir / "pytorch_model.bin")  # what the .bin format holds
    source = open_source(str(bin_dir))
    assert source.file == bin_dir / "pytorch_model.bin"
    x = ids(len(CHARS))
    with torch.no_grad():
        expected = hf(x).logits
    assert torch.allclose(logits_of(cockpit_model(bin_dir), x), expected, atol=1e-5, rtol=0)


def test_a_hf_gpt2_of_gpt2s_vocabulary_reads_gpt2s_bpe(tmp_path):
    hf = tiny_gpt2(50257, seed=3)
    hf.save_pretrained(tmp_path / "gpt2")
    source = open_source(str(tmp_path / "gpt2"))
    assert source.tokenizer == {"name": "r50k_base", "vocab_size": 50257}
    check_tokenizer_name(source, "gpt2")  # tiktoken's other name for the same BPE
    with pytest.raises(InitFromError, match="use --set data.tokenizer=r50k_base"):
        check_tokenizer_name(source, "char")
    x = ids(50257, t=16)
    with torch.no_grad():
        expected = hf(x).logits
    # padded to 50304 rows (vocab_multiple 64): the padded rows are a fresh model's, never read
    model = cockpit_model(tmp_path / "gpt2")
    assert model.padded_vocab == 50304
    assert torch.allclose(logits_of(model, x), expected, atol=1e-5, rtol=0)


def test_the_padded_rows_are_a_fresh_models(hf_char):
    _, folder = hf_char
    source = open_source(str(folder))
    cfg = ModelConfig()
    apply_shape(cfg, source)
    torch.manual_seed(5)
    fresh = GPT(cfg, source.vocab_size)
    torch.manual_seed(5)
    loaded = GPT(cfg, source.vocab_size)
    load_into(loaded, source)
    vocab = source.vocab_size
    assert loaded.padded_vocab > vocab
    assert torch.equal(loaded.wte.weight[vocab:], fresh.wte.weight[vocab:])
    assert not torch.equal(loaded.wte.weight[:vocab], fresh.wte.weight[:vocab])
    # and they are never produced: sampling masks them
    token = loaded.next_token(torch.zeros(1, 1, dtype=torch.long), temperature=0)
    assert int(token) < vocab


def test_a_smaller_block_size_crops_the_positions(hf_char):
    hf, folder = hf_char
    source = open_source(str(folder))
    assert shaped_overrides(source, {"block_size": 32})["block_size"] == 32
    model = cockpit_model(folder, block_size=32)
    assert model.wpe.weight.shape == (32, 32)
    x = ids(len(CHARS), t=32)
    with torch.no_grad():
        expected = hf(x).logits  # causal: the first 32 positions see only each other
    assert torch.allclose(logits_of(model, x), expected, atol=1e-5, rtol=0)


# ------------------------------------------------------------ a fine-tuning run


@pytest.fixture(scope="module")
def finetuned(hf_char, corpus, tmp_path_factory, isolated_env) -> Path:
    """A run started from the HF GPT-2, trained in this process."""
    from engine.train.trainer import Trainer

    _, folder = hf_char
    cfg = RunConfig(name="finetune-test")
    cfg.data.source = str(corpus)
    cfg.model.init_from = str(folder)
    cfg.optim.lr, cfg.schedule.kind, cfg.schedule.warmup_steps = 3e-3, "constant", 0
    cfg.schedule.min_lr = 0.0
    cfg.train.max_steps, cfg.train.batch_size = 40, 16
    cfg.eval.interval, cfg.eval.batches = 20, 8
    cfg.sample.interval, cfg.checkpoint.interval = 0, 20
    run_dir = tmp_path_factory.mktemp("finetuned") / "run"
    with pytest.MonkeyPatch.context() as env:
        for name, value in isolated_env.items():
            env.setenv(name, value)
        trainer = Trainer(cfg, run_dir=run_dir, telemetry=False, interactive=False)
        state = trainer.run()
    alerts = [e.message for e in trainer.drain_events() if e.kind == "alert"]
    assert state == "finished", alerts
    return run_dir


def records(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def text_loss(model: GPT, text: str) -> float:
    """The mean loss of `model` on `text`, in block-sized windows."""
    tokens = torch.tensor([CHARS.index(c) for c in text])
    block = model.cfg.block_size
    windows = tokens[: (len(tokens) - 1) // block * block + 1]
    x = windows[:-1].view(-1, block)
    y = windows[1:].view(-1, block)
    with torch.no_grad():
        _, loss = model(x, y)
    return float(loss)


def test_fine_tuning_lowers_the_val_loss(finetuned, hf_char):
    _, folder = hf_char
    held_out = TEXT[int(len(TEXT) * 0.9) :]  # the val split: the corpus's last tenth
    before = text_loss(cockpit_model(folder), held_out)
    evals = records(finetuned, "eval")
    assert [e["step"] for e in evals] == [20, 40]
    assert evals[-1]["val_loss"] < before - 0.5, (before, evals)
    steps = records(finetuned, "step")
    assert steps[0]["step"] == 1  # step 0: a new run, not a resume
    assert math.isclose(steps[0]["loss"], before, abs_tol=0.3)  # the source's loss, not ln(vocab)'s


def test_the_run_records_where_its_weights_came_from(finetuned, hf_char):
    from engine.checkpoint.store import load_checkpoint

    _, folder = hf_char
    config = json.loads((finetuned / "config.json").read_text())
    assert config["model"]["init_from"] == str(folder.absolute())
    assert config["model"]["mlp"] == "gelu_tanh"
    assert f'init_from = "{folder.absolute()}"' in (finetuned / "config.toml").read_text()
    started = records(finetuned, "run_started")[0]
    assert any(n.startswith("weights from Hugging Face GPT-2 ") for n in started["notes"])
    saved = load_checkpoint(finetuned / "ckpt-00000040.pt")
    assert saved["config"]["model"]["init_from"] == str(folder.absolute())


def test_a_resume_keeps_its_checkpoints_weights(finetuned, hf_char, tmp_path):
    from engine.checkpoint.resume import plan_resume
    from engine.checkpoint.store import load_checkpoint

    _, folder = hf_char
    state = load_checkpoint(finetuned / "ckpt-00000040.pt", mmap=True)
    extend = ["train.max_steps=50"]
    # the same source named again (relative, here) is no change
    relative = Path(os.path.relpath(folder, Path.cwd()))
    plan = plan_resume(state, [*extend, f'model.init_from="{relative}"'], "ckpt")
    assert plan.config.model.init_from == str(folder.absolute())
    with pytest.raises(ConfigError, match=r"cannot change model.init_from on resume .*weights come from its checkpoint"):
        plan_resume(state, [*extend, f'model.init_from="{tmp_path}"'], "ckpt")


# ------------------------------------------------------------ cockpit's and nanoGPT's files


def test_a_cockpit_run_checkpoint_and_export_load_with_their_logits(finetuned, tmp_path):
    from engine.checkpoint.trained import load_trained
    from engine.export.safetensors_file import export

    trained = load_trained(finetuned)  # its best checkpoint, as cockpit sample picks it
    x = ids(len(CHARS))
    expected = logits_of(trained.model, x)
    exported = tmp_path / "model.safetensors"
    export(finetuned, exported)
    for target in (finetuned, trained.path, exported):
        source = open_source(str(target))
        assert source.tokenizer["chars"] == CHARS
        assert torch.allclose(logits_of(cockpit_model(target), x), expected, atol=1e-6), target
    assert open_source(str(finetuned)).file == trained.path


def nanogpt_checkpoint(model: GPT, vocab: int) -> dict:
    """The dict nanoGPT's train.py saves, for a compiled model (its names under _orig_mod.):
    GPT-2's names, nn.Linear's layout, the tied head listed as well."""
    state = {}
    for name, tensor in model.state_dict().items():
        if name.startswith("blocks."):
            name = "transformer.h." + name.removeprefix("blocks.")
        elif not name.startswith("lm_head."):
            name = "transformer." + name
        state["_orig_mod." + name] = tensor[:vocab] if tensor.shape[0] == model.padded_vocab else tensor
    c = model.cfg
    model_args = dict(n_layer=c.n_layer, n_head=c.n_head, n_embd=c.n_embd,
                      block_size=c.block_size, bias=c.bias, vocab_size=vocab, dropout=0.0)  # fmt: skip
    return {
        "model": state,
        "optimizer": {"state": {}, "param_groups": []},
        "model_args": model_args,
        "iter_num": 250,
        "best_val_loss": torch.tensor(1.5),
        "config": {**model_args, "learning_rate": 1e-3, "dataset": "shakespeare_char"},
    }


def test_a_nanogpt_ckpt_loads_with_its_logits(tmp_path):
    torch.manual_seed(2)
    cfg = ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=64, bias=True, vocab_multiple=1)
    original = GPT(cfg, len(CHARS)).eval()
    out = tmp_path / "out-shakespeare-char"
    out.mkdir()
    torch.save(nanogpt_checkpoint(original, len(CHARS)), out / "ckpt.pt")
    meta = {"vocab_size": len(CHARS), "itos": dict(enumerate(CHARS)), "stoi": {c: i for i, c in enumerate(CHARS)}}
    (out / "meta.pkl").write_bytes(pickle.dumps(meta))
    source = open_source(str(out))  # the out_dir, or the file itself
    assert (source.kind, source.step, source.tokenizer["chars"]) == ("nanoGPT", 250, CHARS)
    assert open_source(str(out / "ckpt.pt")).file == out / "ckpt.pt"
    x = ids(len(CHARS))
    model = cockpit_model(out)
    assert model.cfg.mlp == "gelu"  # nanoGPT's exact GELU
    assert torch.allclose(logits_of(model, x), logits_of(original, x), atol=1e-6)


def test_a_nanogpt_ckpt_without_meta_pkl_of_another_vocabulary_is_refused(tmp_path):
    torch.manual_seed(2)
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, vocab_multiple=1), 65)
    torch.save(nanogpt_checkpoint(model, 65), tmp_path / "ckpt.pt")
    with pytest.raises(InitFromError, match=r"a vocabulary of 65 is not GPT-2's BPE and no meta.pkl"):
        open_source(str(tmp_path / "ckpt.pt"))


# ------------------------------------------------------------ refusals, one line each


def one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda d: d / "missing", r"no such file or directory; give a Hugging Face GPT-2 directory"),
        (lambda d: d, r"a directory with no config.json \(not a Hugging Face model\), no ckpt.pt"),
        (lambda d: _write(d / "notes.txt", b"not weights"), r"notes.txt is not a checkpoint torch can read"),
        (lambda d: _write(d / "x.safetensors", b"\x00" * 4), r"x.safetensors is not a safetensors file"),
        (lambda d: _pickled(d / "evil.pt"), r"holds objects a checkpoint never holds and cockpit will not run its code"),
        (lambda d: _torch_saved(d / "other.pt", {"weights": torch.zeros(2)}), r"other.pt is not a checkpoint cockpit can start from"),
    ],
    ids=["missing", "empty-dir", "text-file", "bad-safetensors", "foreign-pickle", "other-dict"],
)
def test_a_bad_source_is_refused_in_one_line(tmp_path, make, expected):
    with pytest.raises(InitFromError, match=expected) as error:
        open_source(str(make(tmp_path)))
    assert one_line(error).startswith(f"--init-from {tmp_path}")


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _torch_saved(path: Path, value: object) -> Path:
    torch.save(value, path)
    return path


class Planted:
    def __reduce__(self):  # what a hostile file would run on load
        return (print, ("ran",))


def _pickled(path: Path) -> Path:
    torch.save({"model": Planted()}, path)
    return path


def _hf_dir(tmp_path: Path, hf_char, **config: object) -> Path:
    _, folder = hf_char
    copy = tmp_path / "hf-copy"
    shutil.copytree(folder, copy)
    data = json.loads((copy / "config.json").read_text())
    data.update(config)
    (copy / "config.json").write_text(json.dumps(data))
    return copy


def test_another_hf_architecture_is_refused(tmp_path, hf_char):
    folder = _hf_dir(tmp_path, hf_char, model_type="llama")
    with pytest.raises(InitFromError, match=r"a Hugging Face llama model .*GPT-2's architecture only") as error:
        open_source(str(folder))
    one_line(error)


def test_another_activation_is_refused(tmp_path, hf_char):
    folder = _hf_dir(tmp_path, hf_char, activation_function="relu")
    with pytest.raises(InitFromError, match=r"activation_function = 'relu'"):
        open_source(str(folder))


def test_weights_that_do_not_fit_their_config_are_refused_before_loading(tmp_path, hf_char):
    folder = _hf_dir(tmp_path, hf_char, n_embd=48, n_head=2)  # the tensors are 32 wide
    source = open_source(str(folder))
    cfg = ModelConfig()
    apply_shape(cfg, source)
    with pytest.raises(InitFromError, match=r"its tensor \S+ is \(\d+, 32\) where its shape says") as error:
        check_fits(source, cfg)
    one_line(error)


def test_a_hf_directory_without_weights_is_refused(tmp_path, hf_char):
    folder = _hf_dir(tmp_path, hf_char)
    (folder / "model.safetensors").unlink()
    with pytest.raises(InitFromError, match=r"no weights beside config.json; it needs model.safetensors or pytorch_model.bin"):
        open_source(str(folder))


def test_a_set_that_conflicts_with_the_shape_is_refused(hf_char):
    _, folder = hf_char
    source = open_source(str(folder))
    with pytest.raises(InitFromError, match=r"--set model.n_layer=4 conflicts with its weights' n_layer = 2; drop that --set") as error:
        shaped_overrides(source, {"n_layer": 4, "dropout": 0.1})
    one_line(error)
    with pytest.raises(InitFromError, match=r"model.block_size=128 conflicts .* block_size = 64; .*below 64 crops"):
        shaped_overrides(source, {"block_size": 128})
    assert shaped_overrides(source, {"n_layer": 2})["n_layer"] == 2  # the same value is no conflict


def test_a_corpus_of_other_characters_is_refused(hf_char):
    _, folder = hf_char
    source = open_source(str(folder))
    check_vocabulary(source, CharTokenizer(CHARS), "words.txt")
    with pytest.raises(InitFromError, match=r"the characters of other.txt are not its weights' .*fine-tune a char model"):
        check_vocabulary(source, CharTokenizer(CHARS + "z"), "other.txt")
    with pytest.raises(InitFromError, match=r"its weights read the char tokenizer token ids but data.tokenizer is 'r50k_base'; use --set data.tokenizer=char"):
        check_tokenizer_name(source, "r50k_base")


def test_a_name_is_found_in_the_hugging_face_cache_only(hf_char, tmp_path, monkeypatch):
    _, folder = hf_char
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(InitFromError, match=r"no Hugging Face cache on this machine holds gpt2; .*downloads nothing"):
        open_source("gpt2")
    snapshot = tmp_path / "hub" / "models--gpt2" / "snapshots" / "abc123"
    shutil.copytree(folder, snapshot)
    (tmp_path / "hub" / "models--gpt2" / "refs").mkdir()
    (tmp_path / "hub" / "models--gpt2" / "refs" / "main").write_text("abc123")
    assert open_source("gpt2").path == snapshot
    assert same_source(str(snapshot), "gpt2")


# ------------------------------------------------------------ the command line


def cli(*args: str) -> int:
    from cockpit.cli import main

    return main(list(args))


def test_the_finetune_preset_needs_init_from(capsys, tmp_path):
    rc = cli("train", "--headless", "--preset", "finetune", "--run-dir", str(tmp_path / "run"))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "preset finetune fine-tunes existing weights: give them with --init-from DIR" in err
    assert "a Hugging Face GPT-2 directory" in err and "downloads nothing" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--init-from", "nowhere/at/all"], "--init-from nowhere/at/all: no such file or directory"),
        (["--set", "model.n_embd=64"], "--set model.n_embd=64 conflicts with its weights' n_embd = 32"),
        (["--set", "data.tokenizer=r50k_base"], "data.tokenizer is 'r50k_base'; use --set data.tokenizer=char"),
    ],
    ids=["missing", "shape", "tokenizer"],
)
def test_the_command_line_refuses_a_bad_start_before_anything(capsys, tmp_path, hf_char, corpus, extra, expected):
    _, folder = hf_char
    init = [] if "--init-from" in extra else ["--init-from", str(folder)]
    rc = cli("train", "--headless", "--preset", "tiny", "--data", str(corpus),
             "--run-dir", str(tmp_path / "run"), *init, *extra)  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "run").exists()


def test_the_command_line_trains_from_the_weights_with_their_shape(capsys, tmp_path, hf_char, corpus):
    _, folder = hf_char
    run_dir = tmp_path / "run"
    rc = cli("train", "--headless", "--no-telemetry", "--preset", "tiny", "--data", str(corpus),
             "--run-dir", str(run_dir), "--init-from", str(folder), "--set", "model.block_size=32",
             "--set", "train.max_steps=2", "--set", "eval.interval=0", "--set", "sample.interval=0")  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"note: weights from Hugging Face GPT-2 {folder / 'model.safetensors'}" in out
    model = json.loads((run_dir / "config.json").read_text())["model"]
    assert (model["n_embd"], model["block_size"], model["bias"], model["mlp"]) == (32, 32, True, "gelu_tanh")


def test_cockpit_runs_shows_where_a_runs_weights_came_from(finetuned, hf_char, capsys, monkeypatch):
    from cockpit.figures.run_table import fmt_from, table
    from engine.rundir import list_runs

    _, folder = hf_char
    (listed,) = list_runs(finetuned.parent)
    assert listed.as_json()["init_from"] == str(folder.absolute())
    header, line = table([listed], now=0.0, width=200)
    assert header.split()[:3] == ["RUN", "PRESET", "FROM"]
    assert line.split()[2] == "gpt2-char"
    monkeypatch.setenv("COLUMNS", "100")
    assert cli("runs", str(finetuned.parent)) == 0
    assert "gpt2-char" in capsys.readouterr().out
    hub = "/root/.cache/huggingface/hub/models--openai-community--gpt2/snapshots/0123abc"
    assert fmt_from(hub) == "gpt2"
    assert fmt_from("/runs/a/best.pt") == "a/best.pt"
    assert fmt_from(None) == "-"


def test_a_resume_does_not_read_the_source_again(finetuned, tmp_path, isolated_env, monkeypatch):
    import engine.train.setup as setup
    from engine.train.trainer import Trainer
    from tests.run_copies import copy_run

    run_dir = copy_run(finetuned, tmp_path / "run")

    def no_source(given):
        raise AssertionError(f"the source {given} was read again on resume")

    monkeypatch.setattr(setup, "open_source", no_source)
    trainer = Trainer(RunConfig(), resume=run_dir, resume_overrides=["train.max_steps=42"],
                      telemetry=False, interactive=False)  # fmt: skip
    assert trainer.run() == "finished", [e.message for e in trainer.drain_events() if e.kind == "alert"]
    assert records(run_dir, "step")[-1]["step"] == 42


def test_the_finetune_preset_trains_a_gpt2_on_tiny_shakespeare(capsys, tmp_path, shakespeare, tiktoken_cache):
    hf = tiny_gpt2(50257, seed=4)
    hf.save_pretrained(tmp_path / "gpt2")
    run_dir = tmp_path / "run"
    rc = cli("train", "--headless", "--no-telemetry", "--preset", "finetune", "--data", str(shakespeare),
             "--init-from", str(tmp_path / "gpt2"), "--run-dir", str(run_dir), "--set", "train.max_steps=2",
             "--set", "train.grad_accum=2", "--set", "eval.interval=0", "--set", "eval.batches=2")  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "r50k_base vocab 50257" in out and "weights from Hugging Face GPT-2" in out
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["optim"]["lr"], config["schedule"]["kind"]) == (3e-5, "constant")
    assert config["model"]["block_size"] == 64  # the weights' context, not a preset's
    steps = records(run_dir, "step")
    assert [s["lr"] for s in steps] == [3e-5, 3e-5]


def test_the_hub_gpt2_layout_loads_too(hf_char, tmp_path):
    """openai-community/gpt2's own model.safetensors: GPT2Model's names (no transformer. prefix,
    no lm_head) and each layer's causal-mask buffer (attn.bias, 1 x 1 x n x n)."""
    from safetensors.torch import save_file

    hf, folder = hf_char
    state = {k.removeprefix("transformer."): v.contiguous() for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    for i in range(2):
        state[f"h.{i}.attn.bias"] = torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64)
    hub = tmp_path / "hub-layout"
    hub.mkdir()
    for name in ("config.json", "cockpit_chars.json"):
        shutil.copy(folder / name, hub / name)
    save_file(state, str(hub / "model.safetensors"))
    x = ids(len(CHARS))
    with torch.no_grad():
        expected = hf(x).logits
    assert torch.allclose(logits_of(cockpit_model(hub), x), expected, atol=1e-5, rtol=0)


def test_a_fine_tuned_gpt2_exports_back_to_transformers(finetuned, tmp_path):
    """HF -> cockpit -> HF: the tanh GELU goes back out as gelu_new, with cockpit's logits;
    nanoGPT, whose GELU is exact, is refused."""
    from engine.checkpoint.trained import load_trained
    from engine.export import ExportError
    from engine.export.hf import export as export_hf
    from engine.export.nanogpt import export as export_nanogpt

    export_hf(finetuned, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["activation_function"] == "gelu_new"
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    x = ids(len(CHARS))
    with torch.no_grad():
        got = back(x).logits
    assert torch.allclose(got, logits_of(load_trained(finetuned).model, x), atol=1e-5, rtol=0)
    with pytest.raises(ExportError, match=r"model.mlp = 'gelu_tanh': nanoGPT's GPT has the exact GELU"):
        export_nanogpt(finetuned, tmp_path / "nanogpt")
